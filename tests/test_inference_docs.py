"""The docstring examples of the inference modules run as tests."""

import doctest
import importlib

import pytest

MODULES = ["requests", "simulator", "itertime", "serve", "pd", "search", "supernode", "clients",
           "validate", "speculative"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    m = importlib.import_module(f"gpufabric.workloads.inference.{name}")
    assert doctest.testmod(m).failed == 0


def test_report_section_example():
    m = importlib.import_module("gpufabric.report.inference")
    assert doctest.testmod(m).failed == 0

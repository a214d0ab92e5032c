"""Measured kernel timings as calibration data: NVIDIA AIConfigurator's kernel database.

AIConfigurator (``pip install 'gpufabric[aic]'``, Apache-2.0) ships kernel latencies measured
on silicon, per GPU system, serving backend and backend version: GEMMs per quantisation,
prefill and decode attention, MoE layers, NCCL and the engines' custom all-reduce. gpufabric
reads them where the package installed them (never a copy in this repository) and sets its
own compute model's curves beside them:

- :mod:`~gpufabric.kerneldb.db`: where the database is, what it covers, its rows;
- :mod:`~gpufabric.kerneldb.compare`: gpufabric's time for each measured kernel, the error
  per kernel family and GPU, and the physical efficiency that fits the measured kernels on
  some shapes, reported on the others.

Without the package every function that needs the database raises one
:class:`~gpufabric.errors.InputError` that says how to install it.
"""

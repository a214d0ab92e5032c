"""The inference section of the HTML report."""

from gpufabric.report.inference import section, section_html


def test_inference_section_renders_its_figures():
    d = section(rates=(4.0, 12.0, 20.0), requests=80, versus=False)
    assert [p["rate"] for p in d["sweep"]] == [4.0, 12.0, 20.0]
    # more load, never less latency
    assert d["sweep"][0]["ttft_ms_p90"] <= d["sweep"][2]["ttft_ms_p90"]
    page = section_html(d)
    # four charts (CDFs, throughput, p90 latencies, KV use), drawn by plotly
    assert page.count('class="plotly-graph-div"') == 4
    assert "KV cache use over time at 12 requests" in page
    assert "Latency CDFs at 12 requests" in page

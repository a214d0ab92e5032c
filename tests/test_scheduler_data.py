"""Where the openb trace comes from: a data directory, the environment, or a checked download;
and the synthetic openb-like stand-in that runs when none of them has it.

Downloads are tested against a server on the loopback interface, never the internet.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import socket
import threading
from collections import Counter

import pytest

from gpufabric.errors import InputError
from gpufabric.scheduler import load_jobs, load_nodes
from gpufabric import downloads as D
from gpufabric.scheduler.cluster import synthetic_nodes
from gpufabric.scheduler.jobs import synthetic_jobs

NODES = "sn,cpu_milli,memory_mib,gpu,model\n"


@pytest.fixture
def server(tmp_path):
    """Serve ``tmp_path/www`` on 127.0.0.1; yields (directory, base URL)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(_Quiet, directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield www, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def no_openb(tmp_path, monkeypatch):
    """No data directory and an empty cache: a fresh machine."""
    monkeypatch.setenv(D.ENV_VAR, str(tmp_path / "nowhere"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_fetch_keeps_a_file_whose_sha256_matches(server, tmp_path):
    www, url = server
    body = NODES + "n0,8000,32768,2,T4\n"
    (www / "nodes.csv").write_text(body)
    want = hashlib.sha256(body.encode()).hexdigest()
    seen = []
    got = D.fetch(tmp_path / "dest", base_url=url, files={"nodes.csv": want},
                  progress=lambda *a: seen.append(a))
    assert got == [tmp_path / "dest" / "nodes.csv"] and got[0].read_text() == body
    assert seen[-1] == ("nodes.csv", len(body), len(body))
    # a second fetch finds it in place and downloads nothing
    (www / "nodes.csv").unlink()
    assert D.fetch(tmp_path / "dest", base_url=url, files={"nodes.csv": want}) == got


def test_fetch_refuses_a_file_whose_sha256_differs(server, tmp_path):
    www, url = server
    (www / "nodes.csv").write_text("tampered\n")
    have = hashlib.sha256(b"tampered\n").hexdigest()
    with pytest.raises(InputError) as e:
        D.fetch(tmp_path / "dest", base_url=url, files={"nodes.csv": "0" * 64})
    assert str(e.value) == (f"{url}nodes.csv: sha256 {have} is not the pinned {'0' * 64}; "
                            "the file was not kept")
    assert not (tmp_path / "dest").exists()   # nothing kept, no temporary, no empty folder


def test_fetch_reports_a_missing_file_and_an_unreachable_server(server, tmp_path):
    _, url = server
    with pytest.raises(InputError, match=f"^{url}gone.csv: the server answered 404 "):
        D.fetch(tmp_path, base_url=url, files={"gone.csv": "0" * 64})
    with socket.socket() as s:           # a port nobody listens on: what offline looks like
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    closed = f"http://127.0.0.1:{port}/"
    with pytest.raises(InputError) as e:
        D.fetch(tmp_path, base_url=closed, files={"x.csv": "0" * 64})
    msg = str(e.value)
    assert msg.startswith(f"{closed}x.csv: cannot download (") and msg.endswith(
        "offline? Copy the files into a directory and pass --data-dir or set "
        "GPUFABRIC_DATA_DIR")


def test_cli_fetch_offline_is_one_line_and_exit_2(cli, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = cli("data", "fetch", "openb", "--dest", str(tmp_path), "--url",
                         f"http://127.0.0.1:{port}/")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"gpufabric: error: http://127.0.0.1:{port}/openb_node_list_all_node"
                          ".csv: cannot download (")


@pytest.mark.openb
def test_the_pinned_sha256_are_those_of_the_real_files(cli, tmp_path):
    # the files in ../shared are the ones of alibaba/clusterdata at OPENB_COMMIT
    src = D.find("openb_pod_list_default.csv").parent
    code, out, err = cli("data", "fetch", "openb", "--dest", str(tmp_path), "--url",
                         src.as_uri() + "/", "--json")
    assert code == 0 and sorted(json.loads(out)["files"]) == sorted(
        str(tmp_path / f) for f in D.OPENB_FILES)
    assert err.count("\n") == 7   # one progress line per file
    assert len(load_jobs("default", data_dir=tmp_path)) == 8152


def test_a_name_is_looked_up_in_data_dir_then_environment_then_cache(no_openb, monkeypatch):
    dirs = {}
    for k, where in enumerate(("arg", "env", "cache/gpufabric/openb")):
        d = no_openb / where
        d.mkdir(parents=True)
        (d / "openb_node_list_gpu_node.csv").write_text(NODES + f"n{k},8000,32768,{k + 1},T4\n")
        dirs[where] = d
    monkeypatch.setenv(D.ENV_VAR, str(dirs["env"]))
    assert load_nodes("gpu_node", data_dir=dirs["arg"]).names == ["n0"]
    assert load_nodes("gpu_node").names == ["n1"]
    monkeypatch.delenv(D.ENV_VAR)
    assert load_nodes("gpu_node").names == ["n2"]          # the cache `data fetch` fills


def test_without_the_trace_the_library_says_how_to_get_it(no_openb):
    with pytest.raises(D.DataMissing) as e:
        load_jobs("default")
    assert str(e.value) == (
        f"openb_pod_list_default.csv: openb trace 'default' is not in {no_openb / 'nowhere'}, "
        f"{no_openb / 'cache/gpufabric/openb'}; get it with `gpufabric data fetch openb`, or "
        "point --data-dir or GPUFABRIC_DATA_DIR at a copy of "
        "alibaba/clusterdata/cluster-trace-gpu-v2023/csv")


def test_without_the_trace_schedule_runs_on_the_synthetic_stand_in(cli, no_openb):
    code, out, err = cli("schedule", "default", "--policy", "best-fit", "--runs", "1", "--json")
    data = json.loads(out)
    assert code == 0 and (data["trace"], data["nodes"]) == ("synthetic-openb",
                                                            "synthetic-openb:gpu_node")
    assert data["allocation_pct_at_100"] == 93.151
    assert err == ("gpufabric: note: openb node list 'gpu_node' and trace 'default' not found "
                   "(--data-dir, $GPUFABRIC_DATA_DIR, or `gpufabric data fetch openb`); the "
                   "results above are on the synthetic openb-like cluster and workload "
                   "(synthetic-openb, see docs/scheduler.md)\n")
    # an explicit path never falls back, nor an explicit data directory
    code, _, err = cli("schedule", str(no_openb / "pods.csv"))
    assert code == 2 and err == f"gpufabric: error: {no_openb / 'pods.csv'}: no such file\n"
    code, _, err = cli("schedule", "default", "--data-dir", str(no_openb))
    assert code == 2 and err.startswith("gpufabric: error: openb_node_list_gpu_node.csv: "
                                        f"openb node list 'gpu_node' is not in {no_openb}, ")


def test_synthetic_workload_has_the_trace_proportions():
    js = synthetic_jobs()
    share = (js.num_gpu == 1) & (js.gpu_milli < 1000)
    assert len(js) == 8152 and int(share.sum()) == 3078
    assert Counter(js.num_gpu.tolist()) == {1: 6989, 0: 1088, 8: 44, 2: 16, 4: 15}
    assert Counter(js.qos) == {"LS": 4647, "BE": 3398, "Burstable": 100, "Guaranteed": 7}
    assert (js.creation[1:] >= js.creation[:-1]).all() and (js.duration >= 0).all()
    c = synthetic_nodes("all_node")
    assert (len(c), int(c.num_gpu.sum()), c.summary()["gpu:G2x8"]) == (1523, 6212, 549)


@pytest.mark.openb
def test_synthetic_shapes_are_exactly_the_real_traces():
    real, synth = load_jobs("default"), synthetic_jobs()
    shape = lambda js: Counter(zip(js.cpu.tolist(), js.num_gpu.tolist(),  # noqa: E731
                                   js.gpu_milli.tolist(), strict=True))
    assert shape(real) == shape(synth)
    real_nodes = load_nodes("all_node")
    assert real_nodes.summary() == synthetic_nodes("all_node").summary()


def test_mooncake_traces_are_fetched_checked_and_found_by_their_short_name(server, tmp_path,
                                                                           monkeypatch, cli):
    """`data fetch mooncake` keeps the pinned files (served here from a loopback stand-in of the
    repository with the pinned hashes swapped for our own files'), and `serve --trace
    mooncake-conversation` reads the one in the cache."""
    www, url = server
    body = ('{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}\n'
            '{"timestamp": 500, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}\n')
    (www / "conversation_trace.jsonl").write_text(body)
    files = {"conversation_trace.jsonl": hashlib.sha256(body.encode()).hexdigest()}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUFABRIC_DATA_DIR", raising=False)
    got = D.fetch(base_url=url, files=files, name="mooncake")
    assert got == [tmp_path / "cache" / "gpufabric" / "mooncake" / "conversation_trace.jsonl"]
    assert D.trace_path("mooncake-conversation") == str(got[0])
    code, out, _ = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--trace",
                       "mooncake-conversation", "--json")
    assert code == 0 and json.loads(out)["requests"] == 2
    # the real set's pins: every file of the repository folder at the commit, by name
    assert sorted(D.SETS["mooncake"].files) == ["conversation_trace.jsonl",
                                                "synthetic_trace.jsonl"]
    assert D.SETS["mooncake"].url == ("https://raw.githubusercontent.com/kvcache-ai/Mooncake/"
                                      "3b5a594133958449a1feaf1c9e0fc1b553e34a28/"
                                      "FAST25-release/traces/")


def test_a_missing_mooncake_trace_says_how_to_get_it_and_an_unknown_set_is_refused(
        cli, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("GPUFABRIC_DATA_DIR", raising=False)
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--trace",
                         "mooncake-synthetic")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "get it with `gpufabric data fetch mooncake`" in err
    code, _, err = cli("data", "fetch", "mooncak")
    assert code == 2 and "unknown data set 'mooncak'; did you mean 'mooncake'?" in err

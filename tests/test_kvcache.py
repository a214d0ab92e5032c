"""Prefix caching over a KV cache hierarchy (HBM, host DRAM, NVMe, a remote pool): hits of a
Mooncake-format trace, LRU eviction per tier, the cost of a load against a recompute, and the
`serve --kv-tier` option.

The fixture ``tests/fixtures/traces/prefix_mooncake.jsonl`` is our own, in Mooncake's format
(``timestamp`` in ms, ``hash_ids`` one per 512-token block). Its six requests, in order:
r0 blocks 0 1 2 3 (2,048 tokens, new); r1 the same (hits 3 blocks: the last token is always
computed, so a prompt of 2,048 tokens can hit 1,535 of them, three whole blocks); r2 0 1 4
(1,536 tokens: hits 0 1); r3 5 6 (new); r4 0 1 2 3 7 (2,560 tokens: hits 4 blocks); r5 6 5
(the same ids as r3 in another order: another prefix, no hit). Hits: 1,536 + 1,024 + 2,048 =
4,608 of 10,240 prompt tokens, 45% exactly.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference import kvcache as K
from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.serve import ServeConfig, serve, step_model

FIXTURE = str(Path(__file__).parent / "fixtures" / "traces" / "prefix_mooncake.jsonl")
ONE_H100 = {"gpu": "H100-SXM", "gpus_per_node": 1}
INF = math.inf


def test_a_mooncake_trace_reads_milliseconds_and_its_block_ids():
    r = R.load_trace(FIXTURE)
    assert r.arrival.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]      # ms -> s
    assert r.isl.tolist() == [2048, 2048, 1536, 1024, 2560, 1024]
    assert r.prefix is not None and r.prefix.block == 512
    assert r.prefix.ids[4] == (0, 1, 2, 3, 7)


def test_hit_tokens_per_request_are_the_prefix_blocks_found():
    r = R.load_trace(FIXTURE)
    assert r.prefix is not None
    tiers = [K.Tier("hbm", 1e6, INF)]                  # room for every block
    p = K.plan(r.prefix.ids, r.isl, tiers, block=512, block_bytes=1.0)
    assert p.hit_tokens.tolist() == [0, 1536, 1024, 0, 2048, 0]
    assert p.prompt_tokens == 10240 and p.load_s.tolist() == [0.0] * 6
    assert K.summary(p, tiers, 512, 1.0)["hit_rate"] == 0.45


def test_lru_eviction_decides_which_tier_serves_each_block():
    # one unit of bytes per block: HBM holds 2 blocks, the host 5. r1 finds block 2 in HBM
    # (the last used) and blocks 0 1 in the host (3 and 4 blocks back); by r4, blocks 2 and 3
    # were last used 7 and 6 distinct blocks back: evicted from a host of 5, so r4 hits 0 1
    r = R.load_trace(FIXTURE)
    assert r.prefix is not None
    tiers = [K.Tier("hbm", 2.0, INF), K.Tier("host", 5.0, 1.0)]
    p = K.plan(r.prefix.ids, r.isl, tiers, block=512, block_bytes=1.0)
    assert p.hit_tokens.tolist() == [0, 1536, 1024, 0, 1024, 0]
    assert p.tier_tokens == {"hbm": 512, "host": 3072}
    # a host of 100 blocks keeps everything: r4 hits its 4 blocks
    big = K.plan(r.prefix.ids, r.isl, [tiers[0], K.Tier("host", 100.0, 1.0)], 512, 1.0)
    assert big.tier_tokens == {"hbm": 512, "host": 4096}
    # the working set: the farthest reuse is 7 blocks back, so 7 blocks reach every hit
    ws = K.working_set(big, 512, 1.0)
    assert ws["bytes_for_max"] == 7.0 and ws["max_hit_rate"] == 0.45


def test_a_remote_pool_is_shared_by_every_instance():
    # two instances, round-robin: this one gets r1 r3 r5. Its own cache has never seen r1's
    # blocks; the pool has (the other instance computed them for r0), so r1 hits 3 blocks there
    r = R.load_trace(FIXTURE)
    assert r.prefix is not None
    mine = np.arange(6) % 2 == 1
    tiers = [K.Tier("hbm", 100.0, INF), K.Tier("remote", 100.0, 1.0)]
    p = K.plan(r.prefix.ids, r.isl[mine], tiers, 512, 1.0, mine=mine)
    assert p.hit_tokens.tolist() == [1536, 0, 0]
    assert p.tier_tokens == {"hbm": 0, "remote": 1536}
    alone = K.plan(r.prefix.ids, r.isl[mine], tiers[:1], 512, 1.0, mine=mine)
    assert alone.hit_tokens.tolist() == [0, 0, 0]


def test_a_hit_from_hbm_is_cheaper_than_from_nvme_and_both_beat_recompute():
    # Llama 3 70B on 8 H100s (TP 8): each GPU holds 40 KiB of KV per token, so a 7 GB/s drive
    # loads 175k tokens/s per GPU while the prefill recomputes about 40k (a small model's
    # prefill is quicker than its KV's load from one drive: llama3-8b's nearly ties)
    sm = step_model("llama3-70b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 8}),
                    ServeConfig(tp=8))
    topo = sm.topo
    bb = sm.kv_bytes_per_token * 512
    ids, isl = [tuple(range(32)), tuple(range(32))], np.array([16384, 16384])

    def recompute_s(n, start):
        c = n - start
        return sm(c, c * (start + (c + 1) / 2), start + c, 0, 0)
    loads = {}
    for name in ("host", "nvme"):
        tiers = K.resolve([K.Tier("hbm", 0.0), K.Tier(name, 1e12)], topo, 0.0)
        p = K.plan(ids, isl, tiers, 512, bb, recompute_s)
        assert p.hit_tokens.tolist() == [0, 31 * 512]       # the whole hit is loaded
        loads[name] = float(p.load_s[1])
    full = float(recompute_s(16384, np.array([0]))[0])
    # (the host link, 48 GB/s usable PCIe Gen5, is faster than one NVMe drive at 7 GB/s)
    assert 0.0 < loads["host"] < loads["nvme"] < full
    hbm = K.plan(ids, isl, K.resolve([K.Tier("hbm", 0.0)], topo, 1e12), 512, bb, recompute_s)
    assert hbm.load_s.tolist() == [0.0, 0.0] and hbm.hit_tokens[1] == 31 * 512


def test_a_slow_tier_short_prefix_is_recomputed_instead():
    sm = step_model("llama3-8b", from_spec(ONE_H100), ServeConfig())
    bb = sm.kv_bytes_per_token * 512

    def recompute_s(n, start):
        c = n - start
        return sm(c, c * (start + (c + 1) / 2), start + c, 0, 0)
    slow = [K.Tier("hbm", 0.0, INF), K.Tier("remote", 1e12, 0.01)]   # 10 MB/s
    p = K.plan([(1, 2), (1, 2)], np.array([1100, 1100]), slow, 512, bb, recompute_s)
    assert p.hit_tokens.tolist() == [0, 0] and p.declined_tokens == 1024


def test_serve_with_tiers_reports_hits_and_the_run_without_them():
    r = serve("llama3-8b", from_spec(ONE_H100),
              ServeConfig(trace=FIXTURE, requests=None, kv_tiers=("hbm", "host:64GiB")))
    kt = r["kv_tiers"]
    assert kt["hit_rate"] == 0.45
    assert [t["name"] for t in kt["tiers"]] == ["hbm", "host"]
    assert kt["tiers"][1]["capacity_bytes"] == 64 * 2**30
    rows = {c["tiers"]: c for c in kt["compare"]}
    assert list(rows) == ["none", "hbm", "hbm+host"] and rows["none"]["hit_rate"] == 0.0
    # the requests arrive a second apart and run alone: a hit shortens each one's prefill
    assert rows["hbm"]["ttft_ms"]["mean"] < rows["none"]["ttft_ms"]["mean"]


def test_multi_turn_sessions_share_their_earlier_turns(tmp_path):
    f = tmp_path / "chat.csv"
    f.write_text("arrival_s,isl,osl,session_id\n0,1000,100,a\n5,1600,100,a\n6,700,10,b\n")
    r = R.load_trace(str(f))
    assert r.prefix is not None and r.prefix.session
    p = K.plan(r.prefix.ids, r.isl, [K.Tier("hbm", 1e6, INF)], 512, 1.0)
    # turn 2 of a starts with turn 1's 1,100 tokens: two whole blocks of 512
    assert p.hit_tokens.tolist() == [0, 1024, 0]


@pytest.mark.parametrize("spec, says", [
    ("ssd:1TiB", "host, nvme, remote"),
    ("host", "needs a size per GPU"),
    ("host:lots", "expected a number with a unit"),
    ("host:0GiB", "must be above 0"),
    ("nvme:1TiB@fast", "unknown drive .fast."),
    ("host:1TiB@fast", "expected GB/s per GPU"),
    ("hbm:80GiB", "hbm takes no size"),
])
def test_bad_tier_specs_are_refused(spec, says):
    with pytest.raises(InputError, match=says):
        K.parse_tier(spec)


def test_bad_tiers_on_the_command_line_are_one_line_and_exit_2(cli):
    code, _, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--trace",
                       FIXTURE, "--kv-tier", "host:1TiB,host:2TiB")
    assert code == 2 and err.count("\n") == 1 and "--kv-tier: host given 2 times" in err
    code, _, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--kv-tier",
                       "host:1TiB")
    assert code == 2 and "--kv-tier: applies only with --trace" in err


def test_a_trace_without_prefixes_or_with_bad_hash_ids_is_refused(cli, tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_text("arrival_s,isl,osl\n0,100,10\n")
    code, _, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--trace",
                       str(plain), "--kv-tier", "hbm")
    assert code == 2 and "--kv-tier: the trace names no shared prefixes" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, '
                   '"hash_ids": [0, "x"]}\n')
    with pytest.raises(InputError, match=r"row 1\.hash_ids: got .*expected a list of whole"):
        R.load_trace(str(bad))

"""Hold-out 3: published measurements collected in stop 15 of issue 9, predicted before any
change of that stop and never tuned against (tests/data/calibration/holdout3.yaml); its first six
entries are marked looked_at (the tree's per-node load changed after them). The tests bound the
model's errors on them with the reason; a change that moves one out of its band must say why
in docs/collectives.md."""

from pathlib import Path

import pytest

from gpufabric.collectives.validate import validate

HOLDOUT3 = Path(__file__).parent / "data" / "calibration" / "holdout3.yaml"


@pytest.fixture(scope="module")
def result():
    return validate(str(HOLDOUT3))


def test_every_entry_runs_and_nothing_is_fitted_on_it(result):
    s = result["summary"]
    assert result["skipped"] == [] and s["all"]["points"] == 38 and s["fitted"]["points"] == 0
    # goals: large median <= 10 (met); max <= 25 is not (the TCPXO mid sizes,
    # docs/collectives.md): bounded by its worst point; small median <= 20 % on every public
    # file (issue 22 point 5), over all its points, the looked-at ones included
    large, small = s["all"]["by_size"]["large"], s["all"]["by_size"]["small"]
    assert large["median_abs_pct"] <= 10 and small["median_abs_pct"] <= 20, s
    assert large["max_abs_pct"] <= 115, large


def test_two_node_hgx_clusters_on_eight_ndr_nics(result):
    """NVLS tree across two nodes, one 400G NIC per GPU (CoreWeave, 8 GiB; -4.4 / +6.8 % as
    first predicted, before stop 15 gave NVLS tree its whole pipeline fill)."""
    rows = {r["id"]: (r["algo"], r["error_pct"]) for r in result["points"]}
    for eid in ("coreweave-hgx-b200-2node", "coreweave-hgx-h100-2node"):
        algo, err = rows[eid]
        assert algo == "nvls_tree" and abs(err) <= 10, (eid, err)   # NIC-bound: within 10 %


def test_gb200_partitions_joined_by_infiniband(result):
    """Three GB200 NVLink partitions on different racks (NVIDIA/nccl issue 1801, 16 GiB): the
    rings NCCL picks are NIC-bound and predicted within 3 %; the forced trees are not. The
    tree on 4-GPU partitions gained from the double binary tree's real per-node load (1.5x
    the buffer on 3 nodes; stop 15, -31.0 -> -22.3 %); the one on 8-GPU partitions stays
    under NCCL's beyond-two-node tree estimate (one tray's 4 NICs), which it beats 2.7x."""
    rows = {r["id"]: (r["algo"], r["error_pct"]) for r in result["points"]}
    assert {k: v[0] for k, v in rows.items() if k.startswith("gb200-3x-")} == {
        "gb200-3x-nvl4-ib-ring": "ring", "gb200-3x-nvl8-ib-ring": "ring",
        "gb200-3x-nvl4-ib-tree": "tree", "gb200-3x-nvl8-ib-tree": "tree"}
    # the rings within 5 %; the forced trees under-predicted (NCCL's tuning table unknown)
    assert all(abs(rows[k][1]) <= 5 for k in ("gb200-3x-nvl4-ib-ring", "gb200-3x-nvl8-ib-ring"))
    assert -30 <= rows["gb200-3x-nvl4-ib-tree"][1] < 0
    assert -70 <= rows["gb200-3x-nvl8-ib-tree"][1] < -30


def _errs(result, entry):
    return {r["size"]: r["error_pct"] for r in result["points"] if r["id"] == entry}


def test_two_node_clouds_at_large_and_mid_sizes(result):
    """Full sweeps of 2-node H100/B200 clouds (NVLS tree on 8 NICs a node): within 8 % from
    64 MiB on InfiniBand and RoCE once NVLS tree pays its whole pipeline fill (stop 15; they
    were +21 to +27 % at 64 MiB before, as first predicted); 16 MiB is still over-predicted
    (+6 to +20 %; +13 to +32 % first). GPUDirect-TCPXO runs under GCP's NCCL profile (rings
    and trees, Simple only; stop 16): its latency comes within 19 %, but its mid sizes take
    about 0.9 ms more than any algorithm the model has (GCP's tuner plugin, not public)."""
    G, M = 2**30, 2**20
    nebius, lam = _errs(result, "nebius-h100-2node-ib"), _errs(result, "lambda-b200-2node-ib")
    a4 = _errs(result, "gcp-a4-b200-2node-roce")
    tcpxo = _errs(result, "gcp-a3mega-h100-2node-tcpxo")
    # InfiniBand and RoCE from 64 MiB: within 8 % (NVLS tree with its whole fill)
    assert all(abs(e[s]) <= 8 for e in (nebius, lam, a4) for s in (64 * M, 256 * M, G))
    # 16 MiB over-predicted by at most 21 %
    assert all(0 <= e[16 * M] <= 21 for e in (nebius, lam, a4))
    # TCPXO: within 10 % at 1 GiB; its mid sizes ~0.9 ms over (GCP's tuner, not public)
    assert abs(tcpxo[G]) <= 10 and 90 <= tcpxo[64 * M] <= 125 and tcpxo[256 * M] <= 35
    # its latency: the Simple tree with the receiver's flush on each network hop (the NIC's
    # latency once more, as NCCL's cost model) within 10 %
    assert abs(tcpxo[8]) <= 10 and abs(tcpxo[1024]) <= 10
    # the InfiniBand trees' 8-byte points: the measured 8 B and 1 KiB times differ by up to
    # 14 us in either direction (noise of one sweep), so within 35 %
    assert abs(nebius[8]) <= 35 and abs(lam[8]) <= 35
    algos = {r["algo"] + "/" + r["proto"] for r in result["points"]
             if r["id"] == "gcp-a3mega-h100-2node-tcpxo"}
    assert algos == {"tree/Simple"}


def test_two_gb200_nvl72_racks_on_infiniband(result):
    """144 ranks, NVLS tree across two 72-GPU NVLink domains (CoreWeave, SHARP on, which the
    model does not have): within 9 % from 1 GiB to 16 GiB, +26 % at 512 MiB (+15.5 % as first
    predicted: NCCL's NVLS-tree chunk halves below 576 MiB on 72 heads, a shorter fill)."""
    errs = list(_errs(result, "coreweave-gb200-2racks").values())
    assert 0 < errs[0] <= 30 and all(abs(e) <= 10 for e in errs[1:]), errs

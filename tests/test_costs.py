"""Topology, collectives and the cost model against closed forms and hand-built profiles."""

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from sim3d.costs.collectives import NETWORK_EFFICIENCY, NVLINK_N_HALF_BYTES, collective_time
from sim3d.costs.compute import block_shape, gemm_shape_efficiency
from sim3d.costs.cost_model import CostModel
from sim3d.costs.profile import COLUMNS, Profile
from sim3d.model.ops import embedding_ops, head_ops, layer_ops
from sim3d.scenario.load import load_scenario, scenario_from_dict
from sim3d.cluster.topology import GBIT, Topology

ROOT = Path(__file__).resolve().parents[1]


def gpt3(*sets):
    return load_scenario(ROOT / "scenarios" / "gpt3.yaml", list(sets))


def test_groups_see_the_links_they_cross():
    topo = Topology(gpt3())
    tp, dp, pp = topo.group_link("tp"), topo.group_link("dp"), topo.group_link("pp")
    assert tp.nodes == 1 and tp.bw == pytest.approx(2400 * GBIT)  # NVSwitch inside a DGX
    assert dp.nodes == 8 and dp.bw == pytest.approx(200 * GBIT)  # one rail NIC per GPU
    assert pp.nodes == 16


def test_fat_tree_oversubscription_divides_cross_leaf_bandwidth():
    # pipeline neighbours sit 8 nodes apart, so pipeline rings cross leaves (16 nodes each)
    full = Topology(gpt3("cluster.inter_node.fabric=fat-tree")).group_link("pp")
    slim = Topology(gpt3("cluster.inter_node.fabric=fat-tree", "cluster.inter_node.oversubscription=4")).group_link("pp")
    assert full.bw == pytest.approx(200 * GBIT)  # non-blocking: the NIC is the bottleneck
    assert slim.bw < full.bw


def test_slow_link_fault_is_the_bottleneck():
    fault = Topology(scenario_from_dict({**gpt3().model_dump(), "faults": [{"link": {"node": 3, "nic_gbps": 50}}]}))
    assert fault.group_link("dp", rank=3 * 8).bw == pytest.approx(50 * GBIT)


def test_ring_all_reduce_closed_form():
    link = Topology(gpt3()).group_link("tp")
    n, size = 8, 1 << 30
    # A100 NVLink: measured ring busbw 230 of 300 GB/s; Hockney n_1/2 of 8 MiB inside a node
    eff, moved = 230 / 300, size + NVLINK_N_HALF_BYTES
    assert link.intra_efficiency == pytest.approx(eff) and link.nvls_busbw is None
    ring = 2 * (n - 1) * link.latency + 2 * (n - 1) / n * moved / (link.bw * eff)
    got = collective_time("all_reduce", size, link)
    assert got.algorithm == "ring"  # inside a node, large buffers: ring's 2(n-1)/n beats the tree's 2
    assert got.seconds == pytest.approx(ring, rel=1e-12)
    assert collective_time("all_gather", size, link).seconds == pytest.approx(
        (n - 1) * link.latency + (n - 1) / n * moved / (link.bw * eff))


def test_h100_all_reduce_matches_measured_busbw():
    """Every 8-GPU H100 all-reduce of validation/nccl.csv from 16 MiB up within 10%: NVLS where
    NCCL ran NVLS, ring where the measurement forced NCCL_ALGO=RING."""
    link = Topology(gpt3("cluster.gpu=h100-sxm", "cluster.intra_node.gbps=3600")).group_link("tp")
    ring_only = replace(link, nvls_busbw=None)
    rows = pd.read_csv(ROOT / "validation" / "nccl.csv")
    rows = rows[(rows.collective == "all_reduce") & (rows.num_gpus == 8) & rows.system.str.contains("H100")
                & (rows.size_bytes >= 16 * 2**20)]
    assert len(rows) >= 8
    for system, size, busbw in zip(rows.system, rows.size_bytes, rows.busbw_gb_s):
        ring = "RING" in system
        got = collective_time("all_reduce", size, ring_only if ring else link)
        assert got.algorithm == ("ring" if ring else "nvls")
        predicted = size / got.seconds * 2 * 7 / 8 / 1e9
        assert predicted == pytest.approx(busbw, rel=0.10), (system, size)


def test_tree_wins_for_small_messages_on_many_nodes():
    link = Topology(gpt3("parallel.tp=1", "parallel.dp=64")).group_link("dp")
    assert collective_time("all_reduce", 1024, link).algorithm in ("tree", "hierarchical")
    big = collective_time("all_reduce", 1 << 30, link)
    # a node's 8 NICs together must carry 2(nodes-1)/nodes of the buffer (all-reduce lower bound)
    nodes = link.nodes
    bound = 2 * (nodes - 1) / nodes * (1 << 30) / (link.per_node * link.inter_bw * NETWORK_EFFICIENCY)
    assert big.seconds >= bound


def test_faster_network_never_slows_a_collective():
    slow = Topology(gpt3("cluster.inter_node.nic_gbps=100")).group_link("dp")
    fast = Topology(gpt3("cluster.inter_node.nic_gbps=400")).group_link("dp")
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert collective_time(op, 1 << 28, fast).seconds < collective_time(op, 1 << 28, slow).seconds
    moe = ROOT / "scenarios" / "moe-1024.yaml"
    slow, fast = (Topology(load_scenario(moe, [f"cluster.inter_node.nic_gbps={gbps}"])).group_link("ep")
                  for gbps in (100, 400))
    assert slow.nodes > 1
    assert collective_time("all_to_all", 1 << 28, fast).seconds < collective_time("all_to_all", 1 << 28, slow).seconds


def test_roofline_gemm_time_matches_peak_and_efficiency():
    s = gpt3()
    costs = CostModel(s)
    qkv = next(op for op in layer_ops(s) if op.name == "qkv")
    t = costs.compute_model.op_time(qkv)
    # GPT-3 qkv at tp 8: m=2048 tokens, n=3*12288/8=4608, k=12288. 128x256 tiles: 16*18=288
    # tiles over 108 SMs = 2.67 waves; split-K 3 makes 864 = 8 whole waves of depth 4096;
    # k-loop efficiency 4096/(4096+128); A100 best-shape (MAMF) efficiency 0.869 at the
    # clock random-data 8192^3 GEMMs hold back to back: 230 / (271.2 x 0.9827) = 0.863.
    assert qkv.gemm == (2048, 4608, 12288)
    efficiency = 0.869 * (230.0 / (271.2 * 0.982696)) * (4096 / (4096 + 128))
    assert t.fwd == pytest.approx(qkv.fwd_flops / (312e12 * efficiency) + 3e-6)


def test_gemm_shape_efficiency_wave_quantization():
    k = 256  # too shallow to split: only wave quantization and the k-loop overhead act
    assert gemm_shape_efficiency(128 * 12, 256 * 11, k, 132) == pytest.approx(k / (k + 128))  # 132 tiles
    assert gemm_shape_efficiency(128 * 12, 256 * 11 + 1, k, 132) == pytest.approx(
        (128 * 12 * (256 * 11 + 1)) / (144 * 128 * 256) * 144 / 264 * k / (k + 128))  # 144 tiles: 2 waves
    # a deep k lets split-K fill the second wave
    assert gemm_shape_efficiency(128 * 12, 256 * 11 + 1, 1 << 14, 132) > 0.75  # vs 0.5 without split
    assert gemm_shape_efficiency(4096, 4096, 128, 132) < gemm_shape_efficiency(4096, 4096, 8192, 132)


def test_grouped_gemm_pads_per_group_and_shares_the_waves():
    """Experts in one grouped kernel: 132 groups of one exact tile fill 132 SMs in one wave;
    one group more needs a second wave; a group's rows that stick out of its last tile are
    padding, however many groups share the kernel."""
    k = 256
    assert gemm_shape_efficiency(128, 256, k, 132, groups=132) == pytest.approx(k / (k + 128))
    assert gemm_shape_efficiency(128, 256, k, 132, groups=133) == pytest.approx(133 / 264 * k / (k + 128))
    assert gemm_shape_efficiency(129, 256, k, 132, groups=66) == pytest.approx(129 / 256 * k / (k + 128))
    assert gemm_shape_efficiency(128 * 12, 256 * 11, k, 132, groups=1) == gemm_shape_efficiency(128 * 12, 256 * 11, k, 132)


def test_transformer_engine_runs_experts_as_gemms_four_at_a_time():
    """Transformer Engine's grouped linear launches one cuBLAS GEMM per expert over 4 streams.
    16 experts of one [128 x 256] tile each, k 256 (no split-K) on the A100's 108 SMs: one
    grouped kernel runs all 16 tiles in a single wave (16/108 of the SMs busy), TE runs 4 rounds
    of 4 tiles (4/108 busy), 4 times as long, and pays 4 launches instead of 1."""
    from sim3d.model.op import Op
    flops = 16 * 2.0 * 128 * 256 * 256
    op = Op("expert_up", flops, flops, flops, 0.0, gemm=(16 * 128, 256, 256), gemm_groups=16)
    te = CostModel(gpt3()).compute_model.op_time(op).fwd
    grouped = CostModel(gpt3("training.kernels.stack=compiled")).compute_model.op_time(op).fwd
    clock = 230.0 / (271.2 * 0.982696)  # the A100's GEMMs run back to back (cluster/gpus.py)
    wave = 108 * 2.0 * 128 * 256 * 256 / (312e12 * 0.869 * clock * 256 / (256 + 128))  # one tile's time on an SM
    assert grouped == pytest.approx(wave + 3e-6)
    assert te == pytest.approx(4 * wave + 4 * 3e-6)


def test_fp8_changes_only_the_te_linear_gemms():
    bf16 = gpt3("cluster.gpu=h100-sxm", "training.precision=bf16")
    fp8 = gpt3("cluster.gpu=h100-sxm", "training.precision=fp8")
    c16, c8 = CostModel(bf16).compute_model, CostModel(fp8).compute_model
    for a, b in zip(layer_ops(bf16) + head_ops(bf16), layer_ops(fp8) + head_ops(fp8)):
        assert a.name == b.name
        t16, t8 = c16.op_time(a), c8.op_time(b)
        if a.name in ("qkv", "out_proj", "mlp_up", "mlp_down"):
            assert b.fp8 and t8.fwd < t16.fwd and t8.bwd_input < t16.bwd_input and t8.bwd_weight < t16.bwd_weight
        else:  # attention, norms, LM head, loss: 16-bit, identical
            assert not b.fp8 and (t8.fwd, t8.bwd_input, t8.bwd_weight) == (t16.fwd, t16.bwd_input, t16.bwd_weight)


def test_recompute_adds_a_forward_to_the_backward():
    none, full = CostModel(gpt3("training.recompute=none")), CostModel(gpt3())
    assert full.action(3, "B").seconds == pytest.approx(none.action(3, "B").seconds + none.action(3, "F").seconds,
                                                        rel=1e-9)


def test_measured_blocks_replace_per_op_costs(tmp_path):
    s = load_scenario(ROOT / "scenarios" / "tiny.yaml")
    shape = block_shape(s)
    rows = []
    for op, fwd, bwd in (("block", 1e-3, 2e-3), ("embedding_block", 1e-4, 2e-4), ("head_block", 5e-4, 5e-4)):
        for p, sec in (("fwd", fwd), ("bwd", bwd)):
            rows.append(dict(op=op, kind="block", **{"pass": p}, shape=shape, m=64, n=64, k=256, numel=4096,
                             dtype="fp32", device="cpu", seconds=sec))
    path = tmp_path / "blocks.csv"
    pd.DataFrame([{c: r.get(c, "") for c in COLUMNS} for r in rows]).to_csv(path, index=False)
    costs = CostModel(s, profile=Profile.load(path))
    layers = s.stage_layers[0]
    assert costs.action(0, "F").seconds == pytest.approx(1e-4 + layers * 1e-3 + 5e-4)
    assert costs.action(0, "B").seconds == pytest.approx(2e-4 + layers * 2e-3 + 5e-4)
    bi, bw = costs.action(0, "BI").seconds, costs.action(0, "BW").seconds
    assert bi + bw == pytest.approx(costs.action(0, "B").seconds) and 0 < bw < bi + bw
    assert any("measured whole" in what for what, _ in costs.explain())
    # a different shape does not match: back to per-op costs (here the analytical roofline)
    other = CostModel(load_scenario(ROOT / "scenarios" / "tiny.yaml", ["model.hidden=128"]), profile=costs.profile)
    other.action(0, "F")
    assert not any("measured whole" in what for what, _ in other.explain())


def test_committed_cpu_profile_drives_the_tiny_scenario():
    path = ROOT / "calibrate" / "profiles" / "cpu-amd-epyc.csv"
    s = load_scenario(ROOT / "scenarios" / "tiny.yaml")
    costs = CostModel(s, profile=Profile.load(path))
    costs.action(0, "F")
    sources = dict(costs.explain())
    assert all("profile" in source for what, source in sources.items() if what.startswith("compute")), sources
    assert sum(len(op.kernels) + (op.gemm is not None) for op in embedding_ops(s) + head_ops(s)) > 0


@pytest.mark.parametrize("gpus_per_node,nics", [(4, 8), (8, 3), (8, 8), (8, 4)])
def test_every_gpu_reaches_the_network_through_one_nic(gpus_per_node, nics):
    """8 NICs on a 4-GPU node (and 3 NICs for 8 GPUs) used to leave GPUs without a NIC edge
    and crash path finding; the node's network bandwidth is kept whatever the split."""
    s = gpt3(f"cluster.gpus_per_node={gpus_per_node}", f"cluster.inter_node.nics_per_node={nics}",
             f"cluster.nodes={1024 // gpus_per_node}")
    topo = Topology(s)
    for local in range(gpus_per_node):
        path = topo.path(local, gpus_per_node + local)  # gpu-nic-leaf(-spine-leaf)-nic-gpu
        assert path[0][1][0] == "nic" and len(path) in (4, 6)
    node_bw = sum(topo.graph.edges[("nic", 0, i), next(v for v in topo.graph[("nic", 0, i)] if v[0] == "leaf")]["bw"]
                  for i in range(topo.nics))
    assert node_bw == pytest.approx(nics * s.nic_gbps * GBIT)


def test_every_covered_nccl_row_within_10_percent_but_the_named_two():
    """validation/nccl.csv priced by the simulator's own topology and collective model. The
    two misses are named so that a fix (or a regression) shows: at 1 MiB NCCL's own tuning
    model for its LL protocol (which we price small messages with) gives 51 GB/s where 67 were
    measured; the 1 GiB A100 row (another vendor's system) is approximate and still rising. The 2-node H100 ring row checks that a group's node crossings use
    every NIC its members drive (NCCL channels with PXN): one NIC would give 45 GB/s, not ~400."""
    from sim3d.validation.nccl_check import check_all
    checks = check_all()
    misses = {(c.gpus, int(c.size)) for c in checks if c.error is not None and abs(c.error) > 0.10}
    assert misses == {(8, 2**20), (8, 2**30)}
    assert all(c.predicted is not None for c in checks)  # every system has a preset, the H800 too
    h800 = next(c for c in checks if "H800" in c.system)
    assert h800.algorithm == "nvls" and abs(h800.error) < 0.02  # H100's NVLS fraction of a 200 GB/s link
    two_nodes = next(c for c in checks if c.gpus == 16)
    assert two_nodes.predicted > 300


def test_small_messages_inside_a_node_take_nccls_low_latency_protocols():
    """A 64 KiB all-reduce over 8 H100 is priced as NCCL's tuner prices ring LL: 6.6 us +
    14 steps x 0.6 us, and the bus bytes at a quarter of the Simple protocol's bus bandwidth,
    at most 87.7 GB/s. Large buffers stay with Simple (the n_1/2 model) or NVLS."""
    s = scenario_from_dict({"model": {"layers": 2, "hidden": 1024, "heads": 8, "vocab": 32000, "seq_len": 1024},
                            "parallel": {"tp": 8}, "training": {"micro_batch": 1, "global_batch": 1},
                            "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}})
    link = Topology(s).group_link("tp")
    size = 64 * 2**10
    simple_bw = link.bw * link.intra_efficiency
    got = collective_time("all_reduce", size, link)
    assert got.algorithm == "ring LL"
    assert got.seconds == pytest.approx(6.6e-6 + 14 * 0.6e-6 + 2 * 7 / 8 * size / min(simple_bw / 4, 87.7e9))
    assert collective_time("all_reduce", 1 << 30, link).algorithm == "nvls"
    assert collective_time("all_gather", 1 << 30, link).algorithm == "ring"


def test_the_low_latency_protocol_follows_a_hop_latency_what_if():
    """NCCL's LL constants hold at the default 2 us hop; a slower hop slows LL's steps too, so a
    small all-reduce costs more and a large one is not handed to LL."""
    def link(latency_us):
        s = scenario_from_dict({"model": {"layers": 2, "hidden": 1024, "heads": 8, "vocab": 32000, "seq_len": 1024},
                                "parallel": {"tp": 8}, "training": {"micro_batch": 1, "global_batch": 1},
                                "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8,
                                            "intra_node": {"latency_us": latency_us}}})
        return Topology(s).group_link("tp")
    small = 4 * 2**10
    assert collective_time("all_reduce", small, link(500)).seconds > 10 * collective_time("all_reduce", small, link(2)).seconds
    assert collective_time("all_reduce", 64 * 2**20, link(500)).algorithm != "ring LL"


def test_tied_embedding_gradients_are_all_reduced_between_the_first_and_last_stage():
    """Megatron all-reduces the tied word embedding's gradients between the ranks of the
    first and the last stage before the optimizer step. gpt3.yaml: 51200 / 8 x 12288 fp16
    gradients (Megatron's default width for fp16) between stage 0 and stage 15 of one
    pipeline (different nodes, one 200 Gb/s NIC each way): a two-rank ring moves the buffer
    once per rank. Llama unties its head, and a rank holding both ends (V schedules) has
    nothing to exchange."""
    s = load_scenario("scenarios/gpt3.yaml")
    costs = CostModel(s)
    first, last = costs.placement.rank(pp=0, dp=3, tp=5), costs.placement.rank(pp=s.pp - 1, dp=3, tp=5)
    nbytes = 51200 / 8 * 12288 * 2
    expected = nbytes / (200 * GBIT * NETWORK_EFFICIENCY)
    assert costs.embedding_sync(first, (0,)) == pytest.approx(expected, rel=0.005)
    assert costs.embedding_sync(last, (s.num_stages - 1,)) == costs.embedding_sync(first, (0,))
    middle = costs.placement.rank(pp=7)
    assert costs.embedding_sync(middle, (7,)) == 0.0 and costs.embedding_sync(first, (0, s.num_stages - 1)) == 0.0
    llama = CostModel(load_scenario("scenarios/llama3.1-70b.yaml"))
    assert llama.embedding_sync(llama.placement.rank(pp=0), (0,)) == 0.0


def test_folded_embedding_sync_under_a_slow_node_is_the_slowest_pipelines():
    """Folded, one pipeline stands for all, so under a network fault each cost is the
    slowest replica's: the embedding all-reduce too. With node 123's NICs at 20 Gb/s, the
    folded cost is that of the pipeline whose last stage sits on node 123 (every rank's own
    cost, at full fidelity)."""
    s = load_scenario("scenarios/gpt3.yaml", ["faults=[{link: {node: 123, nic_gbps: 20}}]"])
    folded, every = CostModel(s), CostModel(s, folded=False)
    first = [every.placement.rank(pp=0, dp=d, tp=t) for d in range(s.dp) for t in range(s.tp)]
    own = [every.embedding_sync(rank, (0,)) for rank in first]
    assert max(own) > 5 * min(own)  # the slow node is on some pipelines' path only
    assert folded.embedding_sync(0, (0,)) == pytest.approx(max(own), rel=1e-12)


@pytest.mark.parametrize("fp32_grads,ratio", [(None, 2.0), (True, 2.0), (False, 1.0)])
def test_gradients_are_reduced_at_their_buffers_width_parameters_gathered_at_theirs(fp32_grads, ratio):
    """Megatron reduces bf16 runs' gradients from its fp32 buffer (arguments.py forces
    accumulate_allreduce_grads_in_fp32 for bf16) and gathers the bf16 parameters; with
    --grad-reduce-in-bf16 both move two bytes. A reduce-scatter and an all-gather of the same
    group put (n-1)/n of their buffer on the wire, so the bytes compare as the widths."""
    sets = [f"training.grad_reduce_in_fp32={'null' if fp32_grads is None else str(fp32_grads).lower()}"]
    s = load_scenario("scenarios/gpt-13b.yaml", sets)
    costs = CostModel(s)
    _, reduced = costs.dp_reduce(0, 0, 1)
    _, gathered = costs.param_gather(0, 0, 1)
    assert s.training.precision == "bf16" and s.parallel.distributed_optimizer
    assert reduced == pytest.approx(ratio * gathered, rel=1e-12)


@pytest.mark.parametrize("sets,shard_bytes,local_bytes", [
    ([], 6 + 8 + 4 + 28 + 6, 2),  # fp16: cast its fp16 grads, unscale, norm, Adam, master copy; zero fp16 grads
    (["training.grad_reduce_in_fp32=true"], 8 + 4 + 28 + 6, 4),  # fp32 main grads: nothing to cast
    (["training.precision=bf16"], 4 + 28 + 6, 4),  # bf16: fp32 grads, no loss scale
    (["training.precision=bf16", "training.grad_reduce_in_fp32=false"], 6 + 4 + 28 + 6, 2)])
def test_the_optimizer_step_moves_the_bytes_of_megatrons_kernels(sets, shard_bytes, local_bytes):
    """Megatron's optimizer step per parameter (optimizer_step.py): half-precision gradients
    are first cast into fp32 main grads (read 2, write 4); fp16 unscales them (8); the norm
    reads them (4); Adam moves 28; the master copy 6; then the gradient buffer is zeroed at
    its own width. gpt3.yaml has no distributed optimizer, so the shard is the rank's whole
    stage; the middle stage holds no embedding."""
    from sim3d.model.params import stage_params
    s = load_scenario("scenarios/gpt3.yaml", sets)
    costs = CostModel(s)
    params = stage_params(s, (7,)).total
    hbm = costs.compute_model.memory_time
    expected = hbm(params * shard_bytes) + hbm(params * local_bytes)
    assert costs.optimizer(costs.placement.rank(pp=7), (7,)) == pytest.approx(expected, rel=1e-12)


def _one_node(dp: int, cp: int, *sets: str):
    raw = {"name": "grads", "model": {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 4096},
           "parallel": {"tp": 1, "pp": 1, "dp": dp, "cp": cp, "distributed_optimizer": True},
           "training": {"micro_batch": 1, "global_batch": 8 * dp, "precision": "bf16", "attention_backend": "flash"},
           "cluster": {"nodes": 1, "gpus_per_node": dp * cp, "gpu": "h100-sxm"}}
    return scenario_from_dict(raw, list(sets))


def test_gradients_are_reduced_over_data_and_context_parallel_ranks_together():
    """Context-parallel ranks hold the same weights and see different tokens, so Megatron
    reduces gradients, and shards the distributed optimizer, over dp x cp ranks
    (distributed_data_parallel.py: the dense buffers take intra_dp_cp_group). On one NVSwitch
    node a group's cost is set by its size alone, so dp 2 x cp 2 costs what dp 4 does, and
    cp 2 alone (dp 1) still reduces, over two ranks, what dp 2 reduces."""
    def costs(dp, cp):
        c = CostModel(_one_node(dp, cp))
        return (*c.dp_reduce(0, 0, 1), *c.param_gather(0, 0, 1), c.optimizer(0, (0,)))
    assert costs(2, 2) == pytest.approx(costs(4, 1), rel=1e-12)
    assert costs(1, 2) == pytest.approx(costs(2, 1), rel=1e-12)
    seconds, wire, *_ = costs(1, 2)
    assert seconds > 0
    s = _one_node(1, 2)
    from sim3d.model.params import stage_params
    grads = stage_params(s, (0,)).total * 4  # fp32 gradient buffer, reduce-scattered: half on the wire
    assert wire == pytest.approx(grads / 2, rel=1e-12)
    assert costs(2, 2)[-1] < costs(2, 1)[-1]  # the optimizer's shard is a quarter, not a half


def test_a_straggler_holds_back_the_gradient_reduction_of_its_context_parallel_peers():
    """At full fidelity the context-parallel peers of a straggler wait for it at every
    gradient bucket (they are one reduction group), even with no data parallelism."""
    import sim3d
    sets = ["training.overlap_grad_reduce=true"]
    healthy = sim3d.simulate(_one_node(1, 2, *sets), full_fidelity=True).sim
    slow = sim3d.simulate(_one_node(1, 2, *sets, "faults=[{straggler: {rank: 1, slowdown: 2.0}}]"),
                          full_fidelity=True).sim
    reduce_start = lambda r, rank: r.trace().query(f"rank == {rank} and kind == 'DP_REDUCE'").start_s.min()  # noqa: E731
    assert reduce_start(slow, 0) > reduce_start(healthy, 0)
    assert reduce_start(slow, 0) == pytest.approx(reduce_start(slow, 1), rel=1e-12)

"""MoE parallel folding: the experts' own grid (etp x ep x edp) over a stage's tp*cp*dp ranks,
as Megatron-Core lays it out, checked against a written-out rank generator and closed forms."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim3d
from sim3d.model.params import layer_params
from sim3d.model.ops import Dims, ops_for
from sim3d.cluster.placement import Placement
from sim3d.scenario.load import ScenarioError, scenario_from_dict

ORDERS = ["tp-cp-ep-dp-pp", "tp-cp-dp-ep-pp", "dp-tp-cp-ep-pp", "tp-cp-ep-pp-dp"]


def megatron_groups(sizes: dict[str, int], order: str, axis: str) -> list[list[int]]:
    """Megatron's RankGenerator written out: ranks count through the order's axes, innermost
    first; a group along `axis` is every rank that agrees on all the other coordinates."""
    axes = order.split("-")
    groups: dict[tuple, list[int]] = {}
    for rank, coords in enumerate(itertools.product(*[range(sizes[a]) for a in reversed(axes)])):
        at = dict(zip(reversed(axes), coords))
        groups.setdefault(tuple(at[a] for a in axes if a != axis), []).append(rank)
    return sorted(groups.values())


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
       st.sampled_from(ORDERS), st.data())
def test_expert_groups_are_megatrons(tp, cp, dp, pp, order, data):
    """The expert grid uses the dense grid's order over (etp, ep, edp, pp) with cp 1
    (parallel_state.py, initialize_model_parallel); expert groups follow from it, and the two
    grids agree on pipelines exactly where Megatron's assertion holds."""
    etp = data.draw(st.sampled_from([1, tp]))
    stage = tp * cp * dp
    ep = data.draw(st.sampled_from([e for e in (1, 2, 4, 8) if stage % (etp * e) == 0]))
    placement = Placement(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, order=order, etp=etp)
    expert = {"tp": etp, "cp": 1, "ep": ep, "dp": stage // (etp * ep), "pp": pp}
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    assert sorted(placement.groups("ep")) == megatron_groups(expert, order, "ep")
    assert sorted(placement.groups("edp")) == megatron_groups(expert, order, "dp")
    agree = megatron_groups(expert, order, "pp") == megatron_groups(dense, order, "pp")
    assert placement.pipelines_agree == agree
    assert placement.expert_data_parallel == expert["dp"]
    # Megatron: equal pipelines, and pp last (or 1) or edp == dp; sim3d: equal TP groups when etp > 1
    runs = agree and (order.endswith("pp") or pp == 1 or expert["dp"] == dp) and (
        etp == 1 or megatron_groups(expert, order, "tp") == megatron_groups(dense, order, "tp"))
    assert (placement.expert_grid_problem is None) == runs
    for rank in range(placement.world_size):
        group = placement.group("ep", rank)
        assert placement.group_leader("ep", rank) == group[0]
        assert group[placement.coords(rank)["ep"]] == rank


def moe(tp=2, dp=4, ep=4, etp=None, sp=True, **parallel):
    raw = {"name": "fold", "model": {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 2048,
                                     "activation": "swiglu", "moe": {"experts": 16, "top_k": 2,
                                                                     "expert_ffn_hidden": 768}},
           "parallel": {"tp": tp, "dp": dp, "ep": ep, "sequence_parallel": sp, **parallel,
                        **({"etp": etp} if etp is not None else {})},
           "training": {"micro_batch": 1, "global_batch": 4 * dp, "precision": "bf16", "attention_backend": "flash"},
           "cluster": {"nodes": 1, "gpus_per_node": tp * dp, "gpu": "h100-sxm"}}
    return raw


@pytest.mark.parametrize("etp,ep", [(1, 8), (1, 4), (1, 2), (2, 4), (2, 2)])
def test_expert_work_and_weights_per_rank_match_closed_forms(etp, ep):
    """Whatever the expert grid, a stage's ranks together compute every token copy once: dp
    micro-batches of b*s tokens, top_k copies each, 2*h*(3*f) FLOPs per copy (SwiGLU's three
    GEMMs); a rank holds experts/ep whole experts split over etp, and with etp 1 no expert
    collective runs on the TP group."""
    s = scenario_from_dict(moe(etp=etp, ep=ep))
    d = Dims.of(s)
    ops = ops_for(d, moe_layer=True)
    expert_flops = sum(op.fwd_flops for op in ops if op.name in ("expert_up", "expert_down"))
    h, f, top_k = 1024, 768, 2
    assert expert_flops * s.tp * s.dp == pytest.approx(s.dp * 1 * 2048 * top_k * 2 * h * 3 * f, rel=1e-12)
    assert layer_params(d, True).expert == pytest.approx(16 / ep * 3 * h * f / etp, rel=1e-12)
    tp_collectives = [op.name for op in ops if op.group == "tp" and op.name.startswith("moe_tp")]
    assert tp_collectives == ([] if etp == 1 else ["moe_tp_gather", "moe_tp_scatter"])
    assert Placement.of(s).expert_data_parallel == s.tp * s.dp // (etp * ep)


def test_folded_expert_groups_span_tensor_parallel_ranks_and_simulate():
    """tp 2 x dp 4 with etp 1 and ep 8: one expert group holds the whole stage (it could not
    before: ep had to divide dp). Folded, at full fidelity and on the flow network the step is
    the same symmetric step."""
    s = scenario_from_dict(moe(etp=1, ep=8))
    assert Placement.of(s).groups("ep") == [list(range(8))]
    folded = sim3d.simulate(s)
    full = sim3d.simulate(s, full_fidelity=True)
    flow = sim3d.simulate(s, sets=("costs.network=flow",), full_fidelity=True)
    assert full.step_time == pytest.approx(folded.step_time, rel=1e-9)
    assert flow.step_time == pytest.approx(folded.step_time, rel=0.01)  # one node, little to contend
    assert folded.summary["etp"] == 1 and folded.breakdown["ep"] > 0
    with pytest.raises(ScenarioError, match="must divide"):
        scenario_from_dict(moe(ep=8))  # etp = tp = 2: ep 8 does not divide dp 4


@pytest.mark.parametrize("raw,words", [
    (moe(tp=4, dp=2, ep=2, etp=2), "expert tensor parallelism of 1 or tp=4"),
    (moe(etp=1, ep=4, sp=False), "needs sequence parallelism"),
    (moe(etp=1, ep=16), "etp\\*ep = 1\\*16 must divide tp\\*cp\\*dp = 8"),
    (moe(etp=1, ep=4, order="tp-cp-ep-pp-dp", pp=2, dp=2), "pipelines or data parallelism apart"),
    (moe(ep=2, order="pp-tp-cp-ep-dp", pp=2), "pipelines or data parallelism apart"),  # edp 2, dp 4
    (moe(ep=2, order="dp-tp-cp-ep-pp"), "tensor-parallel groups apart"),
])
def test_expert_grids_sim3d_cannot_lay_out_are_named(raw, words):
    if raw["parallel"].get("pp"):
        raw["cluster"]["gpus_per_node"] = raw["parallel"]["tp"] * raw["parallel"]["dp"] * raw["parallel"]["pp"]
    with pytest.raises(ScenarioError, match=words):
        scenario_from_dict(raw)


def test_megatron_expert_tensor_parallel_flag_round_trips():
    from sim3d.scenario.importers import from_megatron
    from sim3d.scenario.megatron_export import to_megatron_args
    args = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "1", "--global-batch-size", "16",
            "--num-experts", "16", "--moe-router-topk", "2", "--tensor-model-parallel-size", "2",
            "--sequence-parallel", "--expert-model-parallel-size", "8", "--expert-tensor-parallel-size", "1"]
    imported = from_megatron(args, name="fold", gpu="h100-sxm", gpus=8, gpus_per_node=8)
    assert imported.unmapped == []
    s = scenario_from_dict(imported.scenario)
    assert (s.tp, s.etp, s.ep, s.dp) == (2, 1, 8, 4)
    exported = [str(a) for a in to_megatron_args(s)]
    assert exported[exported.index("--expert-tensor-parallel-size") + 1] == "1"


def test_expert_replicas_reduce_their_gradients_even_without_data_parallelism():
    """tp 2, dp 1, ep 1, etp 1: both TP ranks hold every expert whole, so the experts'
    gradients are reduced over those two ranks (edp 2) though the dense gradient group has one
    member: a reduce-scatter of the expert bucket ((n-1)/n of it on the wire), a gather of
    the parameters, and an optimizer that shards expert state over the two, as the memory
    model does."""
    from sim3d.costs.cost_model import CostModel
    from sim3d.costs.optimizer_step import step_bytes
    from sim3d.model.memory import memory_per_rank
    from sim3d.model.params import stage_params
    from sim3d.step import step_schedule
    raw = moe(tp=2, dp=1, ep=1, etp=1, distributed_optimizer=True)
    s = scenario_from_dict(raw)
    assert (s.dp * s.cp, s.edp) == (1, 2)
    costs = CostModel(s)
    params = stage_params(s, (0,))
    seconds, wire = costs.dp_reduce(0, 0, 1)
    assert seconds > 0 and wire == pytest.approx(params.expert * 4 / 2, rel=1e-12)  # fp32 gradients
    assert costs.param_gather(0, 0, 1)[1] == pytest.approx(params.expert * 2 / 2, rel=1e-12)
    assert any(a.kind.value == "PARAM_GATHER" for a in step_schedule(s).ranks[0])
    hbm = costs.compute_model.memory_time
    moved = {"shard": 0.0, "local": 0.0}
    for nbytes, per in step_bytes(s.training).values():
        moved[per] += nbytes * (params.dense + params.expert / 2 if per == "shard" else params.total)
    assert costs.optimizer(0, (0,)) == pytest.approx(hbm(moved["shard"]) + hbm(moved["local"]), rel=1e-12)
    optimizer_bytes = 12 * (params.dense + params.expert / 2)  # fp32 grads: 12 bytes per sharded parameter
    assert memory_per_rank(s)[0].optimizer == pytest.approx(optimizer_bytes, rel=1e-12)


@pytest.mark.parametrize("etp,ep", [(1, 2), (2, 2)])
def test_expert_gradients_go_over_their_own_replicas(etp, ep):
    """tp 2 x dp 4, ep 2: with etp 2 the expert replicas are the 2 of each TP rank's dp
    index pairs; with etp 1 they are 4 ranks spanning both TP ranks. The expert bucket's
    reduction is priced on that group (its size sets the wire bytes)."""
    from sim3d.costs.cost_model import CostModel
    from sim3d.model.params import stage_params
    s = scenario_from_dict(moe(etp=etp, ep=ep, distributed_optimizer=True))
    edp = s.tp * s.dp // (etp * ep)
    assert Placement.of(s).group_size("edp") == edp == len(Placement.of(s).group("edp", 0))
    costs = CostModel(s)
    params = stage_params(s, (0,))
    dense = costs.gradient_collective("reduce-scatter", costs._link("dp-cp", 0), 0, 1, expert=False)
    expert = costs.gradient_collective("reduce-scatter", costs._link("edp", 0), 0, 1, expert=True)
    assert expert[1] == pytest.approx(params.expert * 4 * (edp - 1) / edp, rel=1e-12)
    assert costs.dp_reduce(0, 0, 1) == pytest.approx((dense[0] + expert[0], dense[1] + expert[1]), rel=1e-12)


def test_expert_replicas_across_tensor_parallel_ranks_need_no_rendezvous_of_their_own():
    """With etp 1 < tp the experts' replicas (here all 8 ranks) reach outside each dense gradient
    group, yet the engine meets only over dp x cp before a bucket: every replica's TP peer is in
    the other dense groups, and TP peers end each backward together, so all dense groups start
    the bucket at once and the experts' collectives start and end together, as a rendezvous of
    their own would make them. A straggler tests it; every rank is replayed."""
    from sim3d.engine.run import replay_step

    s = scenario_from_dict(dict(moe(tp=2, dp=4, ep=1, etp=1), faults=[dict(straggler=dict(rank=0, slowdown=1.5))]))
    run = replay_step(s, full_fidelity=True, fold=False)
    assert run.costs.placement.group("edp", 3) == list(range(8))
    assert run.costs.placement.group("dp-cp", 3) == [1, 3, 5, 7]
    rows = run.result.trace()
    ends = rows[rows.kind == "DP_REDUCE"].pivot_table(index="microbatch", columns="rank", values="end_s")
    assert list(ends.columns) == list(range(8))
    assert (ends.max(axis=1) - ends.min(axis=1)).max() < 1e-12
    healthy = replay_step(scenario_from_dict(moe(tp=2, dp=4, ep=1, etp=1)), full_fidelity=True, fold=False).result.trace()
    assert ends.iloc[-1, 0] > healthy[healthy.kind == "DP_REDUCE"].end_s.max()  # the straggler did hold them back

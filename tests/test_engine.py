"""The simpy engine against the schedule IR's reference evaluator (independent implementations)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim3d.costs.action_cost import ActionCost
from sim3d.costs.cost_model import CostModel
from sim3d.engine import Engine
from sim3d.engine import replay_step as simulate
from sim3d.cluster.placement import Placement
from sim3d.scenario.load import scenario_from_dict
from sim3d.schedule import build, lower
from sim3d.schedule.evaluate import evaluate
from sim3d.schedule.specs import SCHEDULES


class UnitCosts:
    """F=1, B=2 (BI=1, BW=1) per stage, free communication and optimizer."""

    def __init__(self, pp, forward=1.0, backward=2.0, input_grad=1.0, transfer=0.0):
        self.placement = Placement(pp=pp)
        self.table = {"F": forward, "B": backward, "BI": input_grad, "BW": backward - input_grad}
        self.transfer_s = transfer
        self.p2p_bytes = 0.0

    def compute(self, rank, stage, kind):
        return ActionCost(self.table[kind])

    def transfer(self, src, dst):
        return self.transfer_s

    def dp_reduce(self, *args):
        return 0.0, 0.0

    param_gather = dp_reduce

    def optimizer(self, *args):
        return 0.0

    embedding_sync = optimizer


def tiny_scenario(pp=4, m=8, schedule="1f1b", vpp=1, **training):
    return scenario_from_dict({
        "name": "uniform", "schedule": schedule,
        "model": {"layers": pp * vpp * 8, "hidden": 2048, "heads": 16, "vocab": 64, "seq_len": 1024},
        "parallel": {"tp": 1, "pp": pp, "dp": 1, "vpp": vpp},
        "training": {"micro_batch": 1, "global_batch": m, "precision": "bf16", **training},
        "cluster": {"gpu": "h100-sxm", "nodes": pp, "gpus_per_node": 1,
                    "intra_node": {"gbps": 1e9, "latency_us": 0}, "inter_node": {"nic_gbps": 1e9, "latency_us": 0}},
    })


def compute_spans(result):
    trace = result.trace()
    compute = trace[trace.stream == "compute"]
    return compute


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(list(SCHEDULES)),
       pp=st.integers(1, 8), groups=st.integers(1, 4), data=st.data())
def test_engine_equals_reference_evaluator(name, pp, groups, data):
    vpp = data.draw(st.integers(1, 3)) if name == "interleaved-1f1b" else SCHEDULES[name].default_vpp
    m = pp * groups * max(1, SCHEDULES[name].min_microbatches_per_pp)
    transfer = data.draw(st.sampled_from([0.0, 0.25]))
    schedule = lower(build(name, pp, m, vpp))
    costs = UnitCosts(pp, transfer=transfer)
    result = Engine(schedule, costs).run()
    reference = evaluate(schedule, lambda rank, a: costs.table[a.kind.value], transfer=transfer)
    assert result.step_time == pytest.approx(reference.step_time, abs=1e-9)
    if transfer == 0.0:
        assert result.bubble_fraction == pytest.approx(reference.bubble_fraction, abs=1e-9)
    # every compute action starts and ends exactly where the evaluator puts it
    spans = compute_spans(result)
    by_key = {(r.rank, r.kind, r.microbatch, r.chunk): (r.start_s, r.end_s) for r in spans.itertuples()}
    for (rank, index), (start, end) in reference.spans.items():
        a = schedule.ranks[rank][index]
        got = by_key[(rank, a.kind.value, a.mb, a.chunk)]
        assert got == pytest.approx((start, end), abs=1e-9)


@pytest.mark.parametrize("name,vpp", [("1f1b", 1), ("interleaved-1f1b", 2), ("zbv", 2), ("dualpipev", 2)])
def test_arrival_and_rendezvous_tables_end_empty(name, vpp):
    """Every output has exactly one consumer and every rendezvous fills, so once the step is
    over the engine's arrival and rendezvous tables are empty: they hold what is in flight,
    not the step's history (at full fidelity that history was millions of entries). So is
    the trace's table of receives and messages that wait for each other. The V schedules
    hand outputs to a consumer on the same rank."""
    from sim3d.costs.cost_model import CostModel
    from sim3d.engine.replay import ReplayOptions
    from sim3d.step import step_schedule

    engine = Engine(lower(build(name, 4, 8, vpp)), UnitCosts(4, transfer=0.25))
    engine.run()
    assert len(engine.arrivals) == 0 and len(engine.rendezvous) == 0 and engine.trace.unmatched == 0
    s = scenario_from_dict({
        "name": "rendezvous", "schedule": name, "model": {"layers": 16, "hidden": 512, "heads": 8, "vocab": 1024,
                                                          "seq_len": 256},
        "parallel": {"tp": 2, "pp": 2, "dp": 2, "vpp": vpp}, "training": {"micro_batch": 1, "global_batch": 16},
        "cluster": {"nodes": 1, "gpus_per_node": 8}})
    engine = Engine(step_schedule(s), CostModel(s), ReplayOptions.of(s), full_fidelity=True)
    result = engine.run()
    assert len(result.ranks) == 8 and len(engine.arrivals) == 0 and len(engine.rendezvous) == 0
    assert engine.trace.unmatched == 0


@pytest.mark.parametrize("schedule,vpp,expected", [
    ("gpipe", 1, 3 / 11), ("1f1b", 1, 3 / 11), ("interleaved-1f1b", 2, 3 / 19)])
def test_uniform_scenario_bubble_matches_closed_form(schedule, vpp, expected):
    """A real scenario with uniform layers, a tiny vocabulary and near-free links: the
    engine's compute timeline reproduces the evaluator's, and the bubble is the textbook one."""
    s = tiny_scenario(pp=4, m=8, schedule=schedule, vpp=vpp)
    run = simulate(s)
    costs = run.costs
    reference = evaluate(run.schedule, lambda rank, a: costs.action(run.schedule.stage_of(rank, a), a.kind.value).seconds,
                         transfer=costs.transfer(0, 1))
    compute = compute_spans(run.result)
    core = compute[compute.kind.isin(["F", "B"])]
    assert core.end_s.max() == pytest.approx(reference.step_time, rel=1e-9)
    # embedding and LM head make the first and last stage a little slower: not exactly uniform
    assert reference.bubble_fraction == pytest.approx(expected, abs=0.01)


def test_deterministic():
    s = tiny_scenario()
    a, b = simulate(s).result, simulate(s).result
    assert a.rows == b.rows and a.step_time == b.step_time


def test_folded_equals_full_fidelity_for_symmetric_layouts():
    s = scenario_from_dict({
        "name": "sym", "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256},
        "parallel": {"tp": 2, "pp": 2, "dp": 2}, "training": {"micro_batch": 1, "global_batch": 8},
        "cluster": {"nodes": 1, "gpus_per_node": 8}})
    folded, full = simulate(s).result, simulate(s, full_fidelity=True).result
    # on one node both pipelines' transfers take the same time: full fidelity replays one
    # pipeline's TP rank 0, standing for its TP peer and for the other pipeline
    assert full.ranks == [0, 4] and full.represented == {1: 0, 2: 0, 3: 0, 5: 4, 6: 4, 7: 4}
    assert len(folded.ranks) == 2 and full.step_time == pytest.approx(folded.step_time, rel=1e-9)


def test_pipelines_fold_by_their_transfer_times_and_equal_every_rank_replayed():
    """On a fat tree 16 servers share a leaf: with 24 one-GPU servers, pipelines (d, d + 12)
    stay under one leaf for d < 4 and cross the spine for the rest, so the healthy pipelines
    fold into two twin sets (plus the straggler's, replayed alone) and the step, every
    replayed rank's finish and every stood-for rank's finish equal replaying all 24 ranks."""
    from sim3d.engine.run import unfolded_pipelines
    s = scenario_from_dict({
        "name": "leaves", "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256},
        "parallel": {"tp": 1, "pp": 2, "dp": 12}, "training": {"micro_batch": 1, "global_batch": 48},
        "cluster": {"nodes": 24, "gpus_per_node": 1, "inter_node": {"fabric": "fat-tree", "nics_per_node": 1}},
        "faults": [{"straggler": {"rank": 7, "slowdown": 1.3}}]})
    every, folded = _replay(s, None), _replay(s, unfolded_pipelines(s))
    # pipelines (0, 12) for the twins under one leaf, (4, 16) for those across, (7, 19) the straggler's
    assert sorted(folded.ranks) == [0, 4, 7, 12, 16, 19]
    assert folded.step_time == pytest.approx(every.step_time, rel=1e-12) and every.step_time > 0
    for rank in range(24):
        assert every.finish[rank] == pytest.approx(folded.finish[folded.represented.get(rank, rank)], rel=1e-12)


def test_straggler_slows_the_step_and_needs_every_gpu():
    base = {"name": "slow", "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256},
            "parallel": {"tp": 2, "pp": 2, "dp": 2}, "training": {"micro_batch": 1, "global_batch": 8},
            "cluster": {"nodes": 1, "gpus_per_node": 8}}
    normal = simulate(scenario_from_dict(base)).result
    slow = simulate(scenario_from_dict({**base, "faults": [{"straggler": {"rank": 5, "slowdown": 1.5}}]})).result
    assert 5 in slow.ranks and len(slow.ranks) + len(slow.represented) == 8
    assert slow.step_time > normal.step_time * 1.2


def test_dp_reduction_overlaps_with_backward_when_asked():
    kw = dict(pp=2, m=4)
    s_overlap = scenario_from_dict({**tiny_scenario(**kw).model_dump(), "parallel": {"tp": 1, "pp": 2, "dp": 2},
                                    "cluster": {"gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 1},
                                    "training": {"micro_batch": 1, "global_batch": 8, "overlap_grad_reduce": True}})
    s_serial = scenario_from_dict({**s_overlap.model_dump(),
                                   "training": {"micro_batch": 1, "global_batch": 8, "overlap_grad_reduce": False}})
    overlap, serial = simulate(s_overlap).result, simulate(s_serial).result
    assert overlap.step_time < serial.step_time
    assert max(overlap.dp_tail.values()) < max(serial.dp_tail.values())


def test_cost_model_tp_collectives_inside_compute():
    s = scenario_from_dict({
        "model": {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 1024, "seq_len": 512},
        "parallel": {"tp": 4, "pp": 1, "dp": 1}, "training": {"global_batch": 4}, "cluster": {"gpus_per_node": 4}})
    costs = CostModel(s)
    forward = costs.action(0, "F")
    assert forward.comm["tp"] > 0 and forward.seconds > forward.comm["tp"]


P2P_BASE = {"name": "p2p", "model": {"layers": 8, "hidden": 1024, "heads": 8, "vocab": 1024, "seq_len": 1024},
            "parallel": {"tp": 1, "pp": 4, "dp": 1}, "training": {"micro_batch": 2, "global_batch": 16},
            "cluster": {"nodes": 4, "gpus_per_node": 1, "inter_node": {"nic_gbps": 10}}}


def p2p_run(overlap: bool, vpp: int = 1):
    raw = {**P2P_BASE, "parallel": {**P2P_BASE["parallel"], "vpp": vpp},
           "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b",
           "training": {**P2P_BASE["training"], "overlap_p2p": overlap}}
    return simulate(scenario_from_dict(raw)).result


def test_blocking_sends_expose_pipeline_transfers():
    overlapped, blocking = p2p_run(True, vpp=2), p2p_run(False, vpp=2)
    assert blocking.step_time > overlapped.step_time
    assert max(blocking.p2p_wait.values()) > max(overlapped.p2p_wait.values())


def test_the_one_chunk_1f1b_always_blocks_on_its_sends():
    """Megatron-LM overlaps pipeline transfers under the interleaved schedule alone (without a
    virtual pipeline its arguments.py turns overlap_p2p_comm off), and torch's Schedule1F1B waits
    each fused send/receive: asking for overlap changes nothing there."""
    asked, off = p2p_run(True), p2p_run(False)
    assert asked.step_time == off.step_time
    assert max(asked.p2p_wait.values()) == max(off.p2p_wait.values()) > 0


def test_full_fidelity_progress_reaches_the_end_without_changing_the_result():
    s = scenario_from_dict({
        "name": "sym", "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256},
        "parallel": {"tp": 2, "pp": 2, "dp": 2}, "training": {"micro_batch": 1, "global_batch": 8},
        "cluster": {"nodes": 1, "gpus_per_node": 8}})
    seen = []
    with_progress = simulate(s, full_fidelity=True, progress=seen.append).result
    assert seen and seen[-1] == 1.0 and seen == sorted(seen)
    assert with_progress.step_time == simulate(s, full_fidelity=True).result.step_time


def test_engine_reports_a_deadlock_with_the_waiting_rank():
    from sim3d.engine import DeadlockError
    from sim3d.schedule import Kind
    schedule = lower(build("1f1b", 2, 4))
    rank0 = [a for a in schedule.ranks[0] if not (a.kind is Kind.SEND_F and a.mb == 2)]
    broken = schedule.with_ranks([rank0, schedule.ranks[1]])
    with pytest.raises(DeadlockError, match=r"rank 0 at action \d+ \(B2\); rank 1 at action \d+ \(F2\)"):
        Engine(broken, UnitCosts(2)).run()


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
       st.sampled_from(["tp-cp-ep-dp-pp", "dp-tp-cp-ep-pp", "pp-dp-cp-ep-tp"]), st.data())
def test_group_leaders_and_the_gradient_groups(tp, pp, dp, cp, order, data):
    from sim3d.cluster.placement import Placement
    ep = data.draw(st.sampled_from([e for e in (1, 2, 4) if (dp * cp) % e == 0]))
    placement = Placement(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, order=order)
    for axis in ("tp", "cp", "dp", "pp", "ep", "dp-cp"):
        for rank in range(tp * pp * dp * cp):
            assert placement.group_leader(axis, rank) == placement.group(axis, rank)[0]
    # the gradient group: every rank of one (tp, pp) coordinate, each once, whatever the order
    groups = placement.groups("dp-cp")
    assert sorted(r for g in groups for r in g) == list(range(tp * pp * dp * cp))
    for group in groups:
        coords = [placement.coords(r) for r in group]
        assert len(group) == dp * cp == placement.gradient_group_size
        assert len({(c["tp"], c["pp"]) for c in coords}) == 1
        assert len({(c["dp"], c["cp"]) for c in coords}) == dp * cp


def test_recv_rows_mean_what_the_trace_contract_says():
    """A RECV row runs from the later of its post and the transfer's start until the message
    is there (sim3d.trace): never before its SEND started, never ending before it arrived."""
    run = simulate(tiny_scenario(pp=4, m=8, schedule="interleaved-1f1b", vpp=2))
    trace = run.result.trace()
    sends = trace[trace.kind.str.startswith("SEND")]
    recvs = trace[trace.kind.str.startswith("RECV")]
    assert len(sends) == len(recvs) > 0
    arrival = {(r["rank"], r.peer, r.kind[-1], r.microbatch, r.stage + (1 if r.kind == "SEND_F" else -1)):
               (r.start_s, r.end_s) for _, r in sends.iterrows()}
    for _, r in recvs.iterrows():
        start, end = arrival[(r.peer, r["rank"], r.kind[-1], r.microbatch, r.stage)]
        assert r.start_s >= start and r.end_s >= end and r.end_s >= r.start_s
        assert r.end_s == end or r.start_s == r.end_s  # arrived after the post, or was there already


def _replay(s, unfolded):
    from sim3d.engine.replay import ReplayOptions
    from sim3d.step import step_schedule
    costs = CostModel(s, folded=False)
    return Engine(step_schedule(s), costs, ReplayOptions.of(s), True, unfolded=unfolded).run()


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_full_fidelity_folded_equals_every_rank_replayed(data):
    """TP peers and pipelines no fault reaches are twins: replaying TP rank 0 for its group and
    one pipeline for its twins gives the step of replaying every rank, on random layouts,
    schedules and overlap switches, with stragglers on random ranks (their pipelines are
    replayed rank by rank)."""
    from sim3d.engine.run import unfolded_pipelines
    tp, pp, dp = data.draw(st.sampled_from([1, 2, 4])), data.draw(st.sampled_from([2, 4])), data.draw(st.sampled_from([1, 2, 3]))
    cp = data.draw(st.sampled_from([1, 1, 2]))  # context-parallel peers share the gradient rendezvous
    schedule = data.draw(st.sampled_from(["1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "gpipe"]))
    world = tp * pp * dp * cp
    stragglers = data.draw(st.lists(st.integers(0, world - 1), max_size=2, unique=True))
    raw = {"name": "fold", "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256},
           "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "vpp": 2 if schedule == "interleaved-1f1b" else 1,
                        "distributed_optimizer": data.draw(st.booleans())},
           "training": {"micro_batch": 1, "global_batch": 4 * dp, "overlap_grad_reduce": data.draw(st.booleans())},
           "schedule": schedule, "cluster": {"nodes": -(-world // 8), "gpus_per_node": min(8, world)},
           "faults": [{"straggler": {"rank": r, "slowdown": data.draw(st.sampled_from([1.2, 2.0]))}} for r in stragglers]}
    if world % 8 and world > 8:
        return
    s = scenario_from_dict(raw)
    every, folded = _replay(s, None), _replay(s, unfolded_pipelines(s))
    assert folded.step_time == pytest.approx(every.step_time, rel=1e-12)
    for rank in folded.ranks:
        assert folded.finish[rank] == pytest.approx(every.finish[rank], rel=1e-12)
    for peer, twin in folded.represented.items():
        assert every.finish[peer] == pytest.approx(every.finish[twin], rel=1e-12)
    assert set(folded.ranks) | set(folded.represented) == set(every.ranks)
    critical = folded.critical_rank
    assert folded.breakdown() == pytest.approx(every.breakdown(critical), rel=1e-12, abs=1e-15)
    assert every.finish[critical] == pytest.approx(every.step_time, rel=1e-12)


@pytest.mark.parametrize("pp", [2, 4])
def test_the_planners_estimate_prices_blocking_sends_as_the_engine_does(pp):
    """One-chunk 1F1B on a slow network: each send holds the compute stream, one per
    micro-batch on a two-stage pipeline's ranks, two on a middle stage's."""
    from sim3d.studies.estimate import Estimator
    from sim3d.studies.space import Layout, Space
    base = scenario_from_dict({
        "name": "slow-network", "schedule": "1f1b",
        "model": {"layers": 16, "hidden": 1024, "heads": 8, "vocab": 1024, "seq_len": 512},
        "training": {"micro_batch": 1, "global_batch": 128},
        "cluster": {"gpu": "a100-80gb", "nodes": 4, "gpus_per_node": 8, "inter_node": {"nic_gbps": 10}}})
    space = Space(base, 32, {})
    dp = 32 // (2 * pp)
    layout = Layout(tp=2, pp=pp, dp=dp, cp=1, ep=1, vpp=1, micro_batch=1, schedule="1f1b", recompute="none",
                    sequence_parallel=False, zero=0, tp_comm_overlap=False, order="tp-cp-ep-dp-pp", dp_shard=dp)
    s = space.scenario(layout)
    assert Estimator(space).estimate(layout, s).step_s == pytest.approx(simulate(s).result.step_time, rel=0.06)

"""Schedule IR: generators against closed forms, validator against mutations, text/CSV round trips."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim3d.schedule import (Action, Kind, Schedule, ScheduleConstraint, ScheduleError, StageMap,
                            build, lower, parse_action, prove)
from sim3d.schedule.evaluate import evaluate, uniform_costs
from sim3d.schedule.specs import SCHEDULES

pp_s = st.integers(1, 16)
m_s = st.integers(1, 64)
vpp_s = st.integers(1, 4)


@settings(max_examples=60, deadline=None)
@given(pp=pp_s, m=m_s)
def test_gpipe_and_1f1b_bubble_and_memory(pp, m):
    for name in ("gpipe", "1f1b"):
        schedule = build(name, pp, m)
        lowered = lower(schedule)
        report = prove(lowered)
        timeline = evaluate(lowered, uniform_costs(1, 2))
        assert timeline.bubble_fraction == pytest.approx((pp - 1) / (m + pp - 1), abs=1e-12)
        assert timeline.step_time == pytest.approx(3 * (m + pp - 1))
        expected = [m] * pp if name == "gpipe" else [min(pp - r, m) for r in range(pp)]
        assert list(report.peak_inflight) == expected


@settings(max_examples=60, deadline=None)
@given(pp=pp_s, groups=st.integers(1, 4), vpp=vpp_s)
def test_interleaved_bubble(pp, groups, vpp):
    m = pp * groups
    lowered = lower(build("interleaved-1f1b", pp, m, vpp))
    report = prove(lowered)
    timeline = evaluate(lowered, uniform_costs(1, 2))
    assert timeline.bubble_fraction == pytest.approx((pp - 1) / (vpp * m + pp - 1), abs=1e-12)
    # Megatron's warm-up plus the forward that starts the steady state (schedules.md section 7)
    expected = [min(2 * (pp - 1 - r) + (vpp - 1) * pp + 1, m * vpp) for r in range(pp)]
    assert list(report.peak_inflight) == expected


def test_interleaved_needs_multiple_of_pp():
    with pytest.raises(ScheduleConstraint, match="multiple of pp"):
        build("interleaved-1f1b", 4, 6, 2)


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(1, 8), extra=st.integers(0, 16), data=st.data())
def test_zb_h1_step_time(pp, extra, data):
    """Qi et al. 2024: m(tF+tI+tW) + (p-1)(tF+tI-tW), which holds while tW <= min(tF, tI), m >= p."""
    m = pp + extra
    tf = data.draw(st.floats(0.5, 2.0))
    ti = data.draw(st.floats(0.5, 2.0))
    tw = data.draw(st.floats(0.1, min(tf, ti)))
    lowered = lower(build("zb-h1", pp, m))
    report = prove(lowered)
    timeline = evaluate(lowered, uniform_costs(tf, ti + tw, ti, tw))
    assert timeline.step_time == pytest.approx(m * (tf + ti + tw) + (pp - 1) * (tf + ti - tw))
    assert max(report.peak_inflight) == min(pp, m)


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(1, 8), m=st.integers(1, 24))
def test_zbv_validates_and_beats_1f1b(pp, m):
    lowered = lower(build("zbv", pp, m, 2))
    report = prove(lowered)
    # two chunks per rank, half a stage each: compare with 1F1B on the same model
    zbv = evaluate(lowered, uniform_costs(1, 2)).step_time
    one_f_one_b = evaluate(build("1f1b", pp, m), uniform_costs(2, 4)).step_time
    assert zbv <= one_f_one_b + 1e-9
    assert max(report.peak_inflight) <= 2 * pp


def test_zbv_matches_closed_form_when_m_is_large():
    pp, m = 4, 16
    timeline = evaluate(build("zbv", pp, m, 2), uniform_costs(1, 2))
    assert timeline.step_time == pytest.approx(6 * m + pp - 1)  # schedules.md section 7


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(1, 8), extra=st.integers(0, 16))
def test_dualpipev_validates_with_pp_plus_one_activations(pp, extra):
    """DualPipe README: activations per device PP+1 (PP = 2*pp stages, in chunk units)."""
    m = 2 * pp + extra
    report = prove(lower(build("dualpipev", pp, m, 2)))
    assert max(report.peak_inflight) == min(2 * pp + 1, 2 * m)


def test_dualpipev_needs_two_microbatches_per_stage_pair():
    with pytest.raises(ScheduleConstraint, match="at least 2\\*pp"):
        build("dualpipev", 4, 7, 2)


def test_v_stage_map():
    stages = StageMap(4, 2, "v")
    assert [stages.stage(r, 0) for r in range(4)] == [0, 1, 2, 3]
    assert [stages.stage(r, 1) for r in range(4)] == [7, 6, 5, 4]
    assert all(stages.locate(stages.stage(r, c)) == (r, c) for r in range(4) for c in range(2))


def test_1f1b_table_matches_megatron():
    text = build("1f1b", 4, 8).to_text()
    assert text.splitlines()[0] == "rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"
    assert text.splitlines()[3] == "rank 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"


def test_megatron_prefix_sum_invariant():
    """Megatron's order encoding (+chunk forward, -chunk backward): every prefix sum per
    chunk stays >= 0 and ends at 0, i.e. never a backward before its forward."""
    for rank in build("interleaved-1f1b", 4, 8, 3).ranks:
        for chunk in range(3):
            total = 0
            for a in rank:
                if a.chunk == chunk:
                    total += 1 if a.kind is Kind.F else -1
                    assert total >= 0
            assert total == 0


@pytest.mark.parametrize("token", ["F3", "B2.1", "BI0", "BW7.1", "SEND_F3.1@2", "RECV_B0@1", "DP_REDUCE#4", "DP_REDUCE#5.1",
                                   "PARAM_GATHER#0", "OPT_STEP"])
def test_token_round_trip(token):
    assert str(parse_action(token)) == token


def test_pytorch_aliases_and_bad_tokens():
    assert parse_action("I3") == Action(Kind.BI, 3)
    assert parse_action("W2.1") == Action(Kind.BW, 2, 1)
    for bad in ("X1", "SEND_F3", "DP_REDUCE", "F", "F1.x"):
        with pytest.raises(ValueError):
            parse_action(bad)


@pytest.mark.parametrize("name,pp,m,vpp", [("1f1b", 4, 8, 1), ("interleaved-1f1b", 4, 8, 2), ("zbv", 3, 6, 2)])
def test_csv_round_trip(name, pp, m, vpp):
    lowered = lower(build(name, pp, m, vpp), buckets_per_chunk=2, param_gather=True)
    again = Schedule.from_csv(lowered.to_csv())
    assert again.ranks == lowered.ranks and again.stages == lowered.stages and again.lowered


def _mutate(schedule: Schedule, rank: int, actions: list[Action]) -> Schedule:
    ranks = list(schedule.ranks)
    ranks[rank] = tuple(actions)
    return schedule.with_ranks(ranks)


def test_validator_names_a_dropped_send():
    lowered = lower(build("1f1b", 4, 8))
    actions = list(lowered.ranks[1])
    index = next(i for i, a in enumerate(actions) if a.kind is Kind.SEND_F)
    dropped = actions.pop(index)
    with pytest.raises(ScheduleError, match=rf"rank 2 .*no matching SEND_F on rank 1|{dropped}"):
        prove(_mutate(lowered, 1, actions))


def test_validator_names_backward_before_forward():
    schedule = build("1f1b", 4, 8)
    actions = list(schedule.ranks[3])
    actions[0], actions[1] = actions[1], actions[0]  # B0 before F0 on the last stage
    with pytest.raises(ScheduleError, match=r"rank 3 action 0 \(B0\): backward before its forward F0"):
        prove(_mutate(schedule, 3, actions))


def test_validator_names_a_cycle():
    """Rank 0 waits for B0 before sending F1; rank 1 needs F1 before it can send B0 back."""
    lowered = lower(build("1f1b", 2, 4))
    actions = list(lowered.ranks[0])
    b0 = next(i for i, a in enumerate(actions) if a.kind is Kind.B and a.mb == 0)
    send_f1 = next(i for i, a in enumerate(actions) if a.kind is Kind.SEND_F and a.mb == 1)
    f1 = next(i for i, a in enumerate(actions) if a.kind is Kind.F and a.mb == 1)
    block = actions[f1:send_f1 + 1]
    del actions[f1:send_f1 + 1]
    at = next(i for i, a in enumerate(actions) if a.kind is Kind.B and a.mb == 0) + 1
    actions[at:at] = block
    rank1 = list(lowered.ranks[1])
    # rank 1 runs F1 before it sends B0 back: swap so the cycle is real
    i_f1 = next(i for i, a in enumerate(rank1) if a.kind is Kind.F and a.mb == 1)
    i_b0 = next(i for i, a in enumerate(rank1) if a.kind is Kind.B and a.mb == 0)
    if i_f1 > i_b0:
        rank1.insert(i_b0, rank1.pop(i_f1))
    bad = lowered.with_ranks([actions, rank1])
    with pytest.raises(ScheduleError, match=r"deadlock: cyclic wait .*rank 0 .*rank 1|rank 1 .*rank 0") as err:
        prove(bad)
    assert b0 is not None and "F1" in str(err.value)


def test_validator_rejects_swapped_receives():
    lowered = lower(build("1f1b", 3, 6))
    actions = list(lowered.ranks[1])
    recvs = [i for i, a in enumerate(actions) if a.kind is Kind.RECV_F]
    i, j = recvs[0], recvs[1]
    actions[i], actions[j] = actions[j], actions[i]
    with pytest.raises(ScheduleError, match="receives match sends in order|posted later"):
        prove(_mutate(lowered, 1, actions))


def test_random_mutations_never_pass_silently():
    """Dropping any compute action from any rank must be caught."""
    rng = random.Random(0)
    schedule = build("interleaved-1f1b", 4, 8, 2)
    for _ in range(25):
        rank = rng.randrange(4)
        actions = list(schedule.ranks[rank])
        actions.pop(rng.randrange(len(actions)))
        with pytest.raises(ScheduleError):
            prove(_mutate(schedule, rank, actions))


def test_gradient_buckets_carry_their_chunk():
    schedule = lower(build("interleaved-1f1b", 2, 4, 2), buckets_per_chunk=3, param_gather=True)
    assert schedule.buckets_per_chunk == 3
    for actions in schedule.ranks:
        bucketed = [a for a in actions if a.kind in (Kind.DP_REDUCE, Kind.PARAM_GATHER)]
        assert len(bucketed) == 2 * 2 * 3
        assert all(a.chunk == a.bucket // 3 for a in bucketed)
        for a in (a for a in bucketed if a.kind is Kind.DP_REDUCE):  # after its chunk's last backward
            position = actions.index(a)
            assert sum(b.kind is Kind.B and b.chunk == a.chunk for b in actions[:position]) == 4
    assert Schedule.from_csv(schedule.to_csv()) == schedule
    assert parse_action(str(schedule.ranks[0][-1])) == schedule.ranks[0][-1]


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(list(SCHEDULES)), pp=st.integers(2, 6),
       groups=st.integers(1, 3))
def test_dependency_rules_are_one_relation(name, pp, groups):
    """input_of and output_to describe the same edges from both ends, for every schedule
    family (V placements included), and every SEND goes where output_to says."""
    from sim3d.schedule.dependencies import input_of, output_to
    m = pp * groups * 2
    vpp = SCHEDULES[name].default_vpp
    lowered = lower(build(name, pp, m, vpp))
    stages = lowered.stages
    edges_in, edges_out = set(), set()
    for rank, actions in enumerate(lowered.ranks):
        for a in actions:
            if a.is_compute:
                here = stages.stage(rank, a.chunk)
                src, dst = input_of(stages, rank, a), output_to(stages, rank, a)
                if src is not None:
                    assert stages.stage(src.rank, src.chunk) == src.stage
                    edges_in.add((src.stage, here, src.family, a.mb))
                if dst is not None:
                    edges_out.add((here, dst.stage, dst.family, a.mb))
            elif a.kind in (Kind.SEND_F, Kind.SEND_B):
                assert output_to(stages, rank, a).rank == a.peer
    assert edges_in == edges_out
    assert len(edges_in) == 2 * m * (stages.num_stages - 1)  # one activation and one gradient per boundary


def test_interpreter_teaches_every_kind_once():
    """Every IR kind has a method, and an interpreter that lacks one cannot be built: a new
    kind added to METHOD breaks the engine and the executor until both implement it."""
    from sim3d.schedule.interpreter import METHOD, Interpreter
    assert set(METHOD) == set(Kind)

    class Partial(Interpreter):
        def compute(self, action):
            return action.kind

        forward = backward = backward_input = backward_weight = compute

    with pytest.raises(TypeError, match="send"):
        Partial()

    class Whole(Partial):
        send = recv = reduce_gradients = gather_parameters = optimizer_step = Partial.compute

    assert Whole().dispatch(Action(Kind.BI, 0)) is Kind.BI


@pytest.mark.parametrize("name,vpp", [(name, spec.default_vpp) for name, spec in SCHEDULES.items()])
def test_every_chunk_reduces_its_gradients_once_after_its_last_backward(name, vpp):
    """DualPipeV mixes full backwards (B) with split ones (BI + BW): a chunk's gradients are
    complete after its m-th B or BW, whichever kind each micro-batch used. Lowering once
    counted only one kind and dropped every DP reduction of such schedules."""
    from sim3d.schedule import lower
    from sim3d.schedule.ir import Kind
    pp, m, buckets = 4, 16, 3
    sched = lower(build(name, pp, m, vpp), buckets_per_chunk=buckets)
    for actions in sched.ranks:
        for chunk in range(vpp):
            grads = [i for i, a in enumerate(actions) if a.chunk == chunk and a.kind in (Kind.B, Kind.BW)]
            reduces = [i for i, a in enumerate(actions) if a.kind is Kind.DP_REDUCE and a.chunk == chunk]
            assert len(grads) == m and len(reduces) == buckets
            assert min(reduces) > max(grads)

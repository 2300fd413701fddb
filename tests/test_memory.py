"""Memory model against Korthikanti et al. 2022 (arXiv:2205.05198) and Megatron-LM's
distributed-optimizer table."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim3d.model import (GIB, fits_in_memory, layer_activation_bytes, memory_per_rank, memory_report,
                         model_params)
from sim3d.report.memory_plot import memory_table, plot_memory
from sim3d.scenario.load import load_scenario, scenario_from_dict
from sim3d.schedule.specs import SCHEDULES

EVERY_SCHEDULE = [(name, spec.default_vpp) for name, spec in SCHEDULES.items()]


def make(layers=4, hidden=256, heads=8, seq=128, vocab=1024, mb=1, gb=4, tp=1, pp=1, cp=1, dp=1, vpp=1,
         sp=False, recompute="none", precision="bf16", schedule="1f1b", dist_opt=False, backend="unfused",
         dropout=0.1, fp32_grads=None):
    """Korthikanti's formulas describe Megatron's unfused attention with dropout: the default here."""
    return scenario_from_dict(dict(
        name="t", model=dict(layers=layers, hidden=hidden, heads=heads, vocab=vocab, seq_len=seq,
                             hidden_dropout=dropout, attention_dropout=dropout),
        parallel=dict(tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp, sequence_parallel=sp, distributed_optimizer=dist_opt),
        training=dict(micro_batch=mb, global_batch=gb, recompute=recompute, precision=precision,
                      attention_backend=backend, grad_reduce_in_fp32=fp32_grads),
        schedule=schedule, cluster=dict(gpu="a100-80gb", nodes=1, gpus_per_node=tp * pp * cp * dp)))


# ---- per-layer activations: Korthikanti Table 2 ---------------------------------------------

@given(heads=st.sampled_from([8, 16, 32, 64, 96]), head_dim=st.sampled_from([64, 128]),
       seq=st.sampled_from([128, 1024, 2048, 4096]), b=st.integers(1, 8), t=st.sampled_from([1, 2, 4, 8]))
@settings(max_examples=60, deadline=None)
def test_layer_activations_match_korthikanti(heads, head_dim, seq, b, t):
    h, s, a = heads * head_dim, seq, heads
    sbh = s * b * h
    kw = dict(hidden=h, heads=heads, seq=s, mb=b, gb=b, tp=t)

    def act(sp, recompute):
        return layer_activation_bytes(make(**kw, sp=sp), recompute=recompute)

    if t == 1:
        assert act(False, "none") == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert act(False, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert act(False, "selective") == pytest.approx(sbh * (10 + 24 / t))
    assert act(False, "full") == pytest.approx(2 * sbh)
    if t > 1:  # sequence parallelism needs tp > 1
        assert act(True, "none") == pytest.approx(sbh / t * (34 + 5 * a * s / h))
        assert act(True, "selective") == pytest.approx(34 * sbh / t)
        assert act(True, "full") == pytest.approx(2 * sbh / t)


def test_context_parallel_divides_activations():
    ref = layer_activation_bytes(make(hidden=1024, heads=16, seq=4096, mb=1, gb=1, tp=2, sp=True))
    cp = layer_activation_bytes(make(hidden=1024, heads=16, seq=4096, mb=1, gb=1, tp=2, sp=True, cp=2))
    assert cp == pytest.approx(ref / 2)


# ---- Korthikanti Figure 1 (profiled GiB per GPU, via shared/validation/published_dev.csv) ---

def korthikanti(layers, h, heads, pp, vpp, mb, gb, sp=False, recompute="none", schedule=None):
    return scenario_from_dict(dict(
        name=f"kor-{layers}", model=dict(layers=layers, hidden=h, heads=heads, vocab=51200, seq_len=2048),
        parallel=dict(tp=8, pp=pp, dp=1, vpp=vpp, sequence_parallel=sp),
        training=dict(micro_batch=mb, global_batch=gb, recompute=recompute, precision="bf16",
                      attention_backend="unfused"),
        schedule=schedule or ("interleaved-1f1b" if vpp > 1 else "1f1b"),
        cluster=dict(gpu="a100-80gb", nodes=pp, gpus_per_node=8)))


# (model args, activations none/no-SP, activations selective+SP, param+grad+opt) in GiB.
# The 175B and 530B runs use 3 interleaved chunks per rank (Calculon's reproduction setting;
# Korthikanti section 4.2.3: the first stage then holds p(1 + (p-1)/(p*v)) micro-batches).
FIGURE1 = {
    "22B": ((48, 6144, 64, 1, 1, 4, 4), 59.25, 9.5625, 45.5625),
    "175B": ((96, 12288, 96, 8, 3, 1, 64), 66.84375, 12.3515625, 45.5625),
    "1T": ((128, 25600, 160, 64, 1, 1, 512), 131.25, 26.5625, 32.958984375),
}


@pytest.mark.parametrize("name", list(FIGURE1))
def test_korthikanti_figure1(name):
    args, pub_act, pub_sel, pub_states = FIGURE1[name]
    base = memory_per_rank(korthikanti(*args))
    sel = memory_per_rank(korthikanti(*args, sp=True, recompute="selective"))
    first, mid = base[0], base[len(base) // 2]
    ours_act = first.activations / GIB
    ours_sel = (sel[0].activations - sel[0].recompute_working) / GIB
    print(f"\n{name}: activations {ours_act:.2f} GiB (published {pub_act}), "
          f"selective+SP {ours_sel:.2f} GiB + working {sel[0].recompute_working / GIB:.2f} "
          f"(published {pub_sel}), states first {first.model_states / GIB:.2f} / middle "
          f"{mid.model_states / GIB:.2f} GiB (published {pub_states}), in-flight {first.inflight}")
    # The published numbers come from the same closed forms, so 1% leaves room only for
    # rounding: a wrong in-flight count or GB-vs-GiB would be off by >= 7%.
    assert ours_act == pytest.approx(pub_act, rel=0.01)
    assert ours_sel == pytest.approx(pub_sel, rel=0.01)
    # Published states count transformer layers only. A middle rank (no embedding) matches to
    # 1%; the first rank holds exactly the vocab-parallel word embedding (V*h/t) and the
    # replicated learned positions (s*h) more, at 18 bytes per parameter (with pp=1 the tied
    # LM head adds nothing, the final norm 2h).
    h = args[1]
    embedding = 18 * (51200 * h / 8 + 2048 * h)
    if len(base) > 1:
        assert mid.model_states / GIB == pytest.approx(pub_states, rel=0.01)
        assert first.model_states - mid.model_states == pytest.approx(embedding)
    else:
        assert (first.model_states - embedding - 18 * 2 * h) / GIB == pytest.approx(pub_states, rel=0.01)


def test_175b_interleaving_raises_first_stage_activations_by_korthikanti_factor():
    """1F1B holds p micro-batches of L/p layers on the first stage; interleaving with v chunks
    multiplies that by 1 + (p-1)/(p*v) (Korthikanti section 4.2.3)."""
    plain = memory_per_rank(korthikanti(96, 12288, 96, 8, 1, 1, 64))[0].activations
    inter = memory_per_rank(korthikanti(96, 12288, 96, 8, 3, 1, 64))[0].activations
    print(f"\n175B first stage: 1F1B {plain / GIB:.2f} GiB, interleaved v=3 {inter / GIB:.2f} GiB")
    assert plain / GIB == pytest.approx(51.75, rel=1e-9)  # 96 layers x sbh(10+24/8+5as/(8h))
    assert inter / plain == pytest.approx(1 + 7 / 24, rel=1e-9)


# ---- model states: Megatron distrib_optimizer.md -------------------------------------------

# The table's "4 + 16/d" for half-precision gradients counts the fp32 copy of the gradient
# shard that distrib_optimizer.py makes inside the step only (after the activations are freed):
# at the activation peak the sharded part is 12/d.
@pytest.mark.parametrize("precision,fp32_grads,plain,dist", [
    ("bf16", None, 18, (6, 12)),  # "float16 param, fp32 grads": Megatron forces fp32 grads for bf16
    ("fp16", None, 20, (4, 12)),  # "float16 param, float16 grads": fp16's default
    ("fp16", True, 18, (6, 12)),  # --accumulate-allreduce-grads-in-fp32
    ("bf16", False, 20, (4, 12)),  # --grad-reduce-in-bf16
    ("fp32", None, 16, (8, 8))])
def test_bytes_per_parameter_follow_megatron_table(precision, fp32_grads, plain, dist):
    d = 4
    kw = dict(layers=4, hidden=512, heads=8, seq=128, mb=1, gb=8, precision=precision, dp=d)
    r = memory_per_rank(make(**kw, fp32_grads=fp32_grads))[0]
    assert r.model_states == pytest.approx(plain * r.params)
    rd = memory_per_rank(make(**kw, dist_opt=True, fp32_grads=fp32_grads))[0]
    assert rd.model_states == pytest.approx((dist[0] + dist[1] / d) * rd.params)


def test_gpt3_yaml_states_and_stage_imbalance():
    rows = memory_per_rank(load_scenario("scenarios/gpt3.yaml"))
    assert len(rows) == 16
    # fp16 with Megatron's default fp16 gradients and no distributed optimizer: 20 B per
    # parameter; 6 layers of 12h^2 params / tp 8 = 1.36B params per middle rank, 25.3 GiB
    for r in rows:
        assert r.model_states == pytest.approx(20 * r.params), r
        assert 25 < r.model_states / GIB < 28
    middle = rows[1:-1]
    assert len({round(r.weights) for r in middle}) == 1
    assert rows[0].weights > middle[0].weights  # vocab-parallel embedding
    assert rows[-1].weights > middle[0].weights  # LM head (Megatron's copy of the tied embedding)
    assert rows[0].other > 0 and rows[-1].other > 0 and all(r.other == 0 for r in middle)
    # 1F1B: rank r holds pp - r micro-batches in flight
    assert [r.inflight for r in rows] == list(range(16, 0, -1))
    assert rows[0].activations > rows[8].activations > rows[-1].activations
    ok, reason = fits_in_memory(load_scenario("scenarios/gpt3.yaml"))
    assert ok and reason.startswith("fits")


def test_175b_on_one_gpu_does_not_fit_and_says_why():
    sc = scenario_from_dict(dict(
        name="gpt3-175b", model=dict(layers=96, hidden=12288, heads=96, vocab=51200, seq_len=2048),
        training=dict(micro_batch=1, global_batch=1), cluster=dict(gpu="a100-80gb", nodes=1, gpus_per_node=1)))
    ok, reason = fits_in_memory(sc)
    print("\n" + reason)
    assert not ok
    assert "weights" in reason and "optimizer" in reason and "175" in reason
    assert 174e9 < model_params(sc) < 176e9
    # 18 bytes x 174.6B params = 2927 GiB
    assert memory_report(sc).rows[0].model_states / GIB == pytest.approx(18 * model_params(sc) / GIB)


def test_activation_dominated_failure_names_activations():
    sc = korthikanti(96, 12288, 96, 8, 3, 1, 64)  # 175B, no recompute: ~114 GiB
    ok, reason = fits_in_memory(sc)
    assert not ok and "largest part activations" in reason and "recompute" in reason
    ok2, _ = fits_in_memory(korthikanti(96, 12288, 96, 8, 3, 1, 64, sp=True, recompute="selective"))
    assert ok2


def test_v_schedule_rank0_holds_first_and_last_stage():
    sc = make(layers=16, hidden=512, heads=8, seq=256, mb=1, gb=16, pp=4, vpp=2, schedule="zbv")
    rows = memory_per_rank(sc)
    assert rows[0].stages == (0, 7) and rows[3].stages == (3, 4)
    assert rows[0].other > 0 and all(r.other == 0 for r in rows[1:])
    # tied embedding held once when the first and last stage share a rank
    assert rows[0].weights > rows[1].weights


def test_full_recompute_activations():
    sc = make(layers=8, hidden=1024, heads=16, seq=512, mb=2, gb=16, pp=2, tp=2, sp=True, recompute="full")
    r0 = memory_per_rank(sc)[0]
    per_layer = 2 * 512 * 2 * 1024 / 2
    assert r0.activations - r0.recompute_working == pytest.approx(r0.inflight * 4 * per_layer)
    assert r0.recompute_working == pytest.approx(
        layer_activation_bytes(sc, recompute="none") - per_layer)


def test_plot_and_table(tmp_path):
    report = memory_report(load_scenario("scenarios/gpt3.yaml"))
    path = plot_memory(report, tmp_path / "mem.png", "GPT-3 175B memory per pipeline rank")
    assert path.stat().st_size > 10_000
    plot_memory(list(report.rows), tmp_path / "mem.pdf", "pdf", hbm_gib=80)
    table = memory_table(list(report.rows), 80)
    assert table.row_count == 16


@settings(max_examples=60, deadline=None)
@given(schedule=st.sampled_from(EVERY_SCHEDULE + [("interleaved-1f1b", 3)]),
       pp=st.integers(1, 6), rounds=st.integers(1, 4), data=st.data())
def test_the_live_frontier_finds_the_peak_a_full_walk_finds(schedule, pp, rounds, data):
    """The memory model prices a rank's activation peak from the frontier of its live-chunk
    counts; replaying every action (the definition) must give the same bytes, split as at one
    of the points that reach them (two points may tie in bytes and differ in split)."""
    import numpy as np

    from sim3d.model.memory import _live_frontier, activation_peaks
    from sim3d.schedule import ScheduleConstraint, build
    from sim3d.schedule.dependencies import activation_changes
    name, vpp = schedule
    m = rounds * pp * max(1, SCHEDULES[name].min_microbatches_per_pp)
    try:
        sched = build(name, pp, m, vpp)
    except ScheduleConstraint:
        return
    weights = st.floats(0, 1e9, allow_nan=False)
    for rank, actions in enumerate(sched.ranks):
        per_chunk = [(data.draw(weights), data.draw(weights)) for _ in range(vpp)]
        live, best, points = [0.0, 0.0], (0.0, 0.0), [(0.0, 0.0)]
        for a, change in activation_changes(actions):
            live = [live[0] + change * per_chunk[a.chunk][0], live[1] + change * per_chunk[a.chunk][1]]
            if change > 0:
                points.append(tuple(live))
                if sum(live) > sum(best):
                    best = tuple(live)
        frontier = np.array(_live_frontier(actions, vpp), dtype=float)[None]
        layers, other = activation_peaks(frontier, np.array([[c[0] for c in per_chunk]]),
                                         np.array([[c[1] for c in per_chunk]]))
        got = (layers[0], other[0])
        assert sum(got) == pytest.approx(sum(best), rel=1e-12, abs=1e-3)
        assert any(got == pytest.approx(p, rel=1e-12, abs=1e-3) for p in points if
                   sum(p) == pytest.approx(sum(best), rel=1e-12, abs=1e-3))


@settings(max_examples=40, deadline=None)
@given(schedule=st.sampled_from(EVERY_SCHEDULE + [("interleaved-1f1b", v) for v in (3, 6, 12)]),
       pp=st.integers(1, 8), extra=st.integers(0, 200))
def test_a_layout_search_may_replay_fewer_micro_batches_with_the_same_peaks(schedule, pp, extra):
    """`steady_microbatches` shortens a long schedule for the layout search's memory model:
    every rank's live-chunk frontier must be the full schedule's, and where the full one is
    refused the short one must be too. GPipe keeps every micro-batch alive and is never shortened."""
    from sim3d.model.memory import _live_frontier, steady_microbatches
    from sim3d.schedule import ScheduleConstraint, build
    name, vpp = schedule
    m = 2 * pp + extra
    short = steady_microbatches(name, pp, m)
    try:
        full = build(name, pp, m, vpp)
    except ScheduleConstraint:
        with pytest.raises(ScheduleConstraint):
            build(name, pp, short, vpp)
        return
    shortened = build(name, pp, short, vpp)
    assert [_live_frontier(a, vpp) for a in full.ranks] == [_live_frontier(a, vpp) for a in shortened.ranks]

"""Sampled steps (engine/sampled.py, studies/monte_carlo.py) against the simpy replay and
against closed forms of maxima of random variables."""

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim3d.engine import replay_step
from sim3d.errors import ScenarioError
from sim3d.scenario.load import load_scenario, scenario_from_dict
from sim3d.studies.monte_carlo import Sampler, _InverseCdf, sample_steps
from sim3d.scenario.variability import Jitter

SCENARIOS = sorted(Path("scenarios").glob("*.yaml"))


def small(tp=1, pp=1, dp=1, variability=None, faults=(), m=4, schedule="1f1b", vpp=1, **training):
    world = tp * pp * dp
    return scenario_from_dict({
        "name": "mc", "schedule": schedule,
        "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256},
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "vpp": vpp},
        "training": {"micro_batch": 1, "global_batch": m * dp, **training},
        "cluster": {"nodes": -(-world // 8), "gpus_per_node": min(8, world)},
        "faults": list(faults), "variability": variability})


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_without_variability_every_sample_is_todays_step(path):
    """Bit for bit: the sampled replay performs the simpy replay's floating-point operations."""
    s = load_scenario(path)
    if s.costs.network == "flow" or s.network_asymmetric:
        pytest.skip("sampled steps need the analytical, symmetric network")
    today = replay_step(s).result.step_time
    steps = Sampler(s, seed=0).run(list(range(3)))[0]
    assert (steps == today).all(), (steps, today)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_sampled_replay_equals_the_simpy_replay_on_random_layouts(data):
    """Random layouts, schedules, overlap switches and ZeRO stages, with stragglers on random
    ranks and no other variability: every sample is the full-fidelity simpy step."""
    tp, pp, dp = data.draw(st.sampled_from([1, 2, 4])), data.draw(st.sampled_from([1, 2, 4])), data.draw(st.sampled_from([1, 2, 3]))
    cp = data.draw(st.sampled_from([1, 1, 2]))
    schedule = data.draw(st.sampled_from(["1f1b", "interleaved-1f1b", "zb-h1", "gpipe"] if pp > 1 else ["1f1b"]))
    world = tp * pp * dp * cp
    if world % 8 and world > 8:
        return
    stragglers = data.draw(st.lists(st.integers(0, world - 1), max_size=2, unique=True))
    zero = data.draw(st.sampled_from([0, 1, 2, 3]))
    s = scenario_from_dict({
        "name": "mc", "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256},
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "vpp": 2 if schedule == "interleaved-1f1b" else 1,
                     "zero": zero},
        "training": {"micro_batch": 1, "global_batch": 4 * dp, "overlap_grad_reduce": data.draw(st.booleans()),
                     "overlap_p2p": data.draw(st.booleans()),
                     "overlap_param_gather": zero >= 1 and data.draw(st.booleans())},
        "schedule": schedule, "cluster": {"nodes": -(-world // 8), "gpus_per_node": min(8, world)},
        "faults": [{"straggler": {"rank": r, "slowdown": data.draw(st.sampled_from([1.2, 2.0]))}} for r in stragglers]})
    simpy_step = replay_step(s, full_fidelity=True, fold=False).result.step_time
    steps = Sampler(s, seed=0).run([0, 1])[0]
    assert steps.tolist() == [simpy_step, simpy_step]


def test_every_sample_with_one_slowed_rank_is_the_straggler_run():
    s = load_scenario("scenarios/gpt3.yaml", ['faults=[{"straggler": {"rank": 300, "slowdown": 1.5}}]'])
    straggler_run = replay_step(s).result.step_time
    out = sample_steps(s, samples=5, seed=3)
    assert out.deterministic == straggler_run
    assert (out.steps == straggler_run).all()
    assert straggler_run > replay_step(load_scenario("scenarios/gpt3.yaml")).result.step_time * 1.2


def test_slow_gpus_drawn_everywhere_equal_a_straggler_on_every_rank():
    """fraction 1: every GPU is slowed in every sample, as if each were a straggler."""
    faults = [{"straggler": {"rank": r, "slowdown": 1.25}} for r in range(8)]
    everyone = replay_step(small(tp=2, pp=2, dp=2, faults=faults)).result.step_time
    s = small(tp=2, pp=2, dp=2, variability={"slow_gpus": {"fraction": 1.0, "slowdown": 1.25}})
    out = sample_steps(s, samples=4, seed=0)
    assert (out.steps == everyone).all()
    assert all(len(g) == 8 for g in out.slow_gpus)


def _expected_max_of_lognormals(sigma: float, n: int) -> float:
    """E[max of n iid lognormal(-sigma^2/2, sigma)] = integral of exp(mu + sigma z) n Phi^(n-1) phi dz."""
    z = np.linspace(-10, 10, 200_001)
    pdf = np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    f = np.exp(sigma * z - sigma ** 2 / 2) * n * cdf ** (n - 1) * pdf
    return float(np.sum((f[1:] + f[:-1]) / 2 * np.diff(z)))


@pytest.mark.parametrize("pp,m", [(1, 6), (4, 1)])
def test_a_tp_group_takes_the_expected_maximum_of_its_members_at_every_compute(pp, m):
    """tp = 8, every compute on the step's critical path (one rank's computes in a row, or a
    pipeline of one micro-batch: forwards down, backwards up): each lasts its TP group's
    slowest member's jittered time, so the mean step is the deterministic one plus every
    compute's priced time times (E[max of 8 lognormals] - 1)."""
    sigma, tp = 0.1, 8
    s = small(tp=tp, pp=pp, m=m, variability={"jitter": {"lognormal_sigma": sigma}})
    sampler = Sampler(s, seed=11)
    computes = sum(op[2] for program in sampler.replay.programs for op in program if op[0] == 0)
    deterministic = replay_step(s).result.step_time
    steps = sample_steps(s, samples=400, seed=11).steps
    expected = deterministic + computes * (_expected_max_of_lognormals(sigma, tp) - 1)
    error = steps.std(ddof=1) / math.sqrt(len(steps))
    assert abs(steps.mean() - expected) < 4 * error, (steps.mean(), expected, error)
    assert steps.mean() > deterministic + 0.1 * computes  # E[max of 8] is ~1.14 at sigma 0.1


def test_data_parallel_replicas_meet_at_the_slowest_at_each_bucket():
    """tp = pp = 1, dp = 8, one micro-batch, reduction after the backward: every replica waits
    for the slowest one's forward + backward, so the step is the deterministic one plus the
    maximum over replicas of F (J1 - 1) + B (J2 - 1) -- drawn here independently with numpy."""
    sigma, dp = 0.2, 8
    s = small(dp=dp, m=1, variability={"jitter": {"lognormal_sigma": sigma}}, overlap_grad_reduce=False)
    sampler = Sampler(s, seed=5)
    forward, backward = [op[2] for op in sampler.replay.programs[0] if op[0] == 0]
    deterministic = replay_step(s).result.step_time
    steps = sample_steps(s, samples=600, seed=5).steps - deterministic
    rng = np.random.default_rng(0)
    j = rng.lognormal(-sigma ** 2 / 2, sigma, size=(200_000, dp, 2))
    reference = (forward * (j[..., 0] - 1) + backward * (j[..., 1] - 1)).max(axis=1)
    error = math.hypot(steps.std(ddof=1) / math.sqrt(len(steps)), reference.std() / math.sqrt(len(reference)))
    assert abs(steps.mean() - reference.mean()) < 4 * error, (steps.mean(), reference.mean(), error)
    assert abs(np.quantile(steps, 0.9) - np.quantile(reference, 0.9)) < 0.1 * reference.std() + 8 * error


def test_the_slowest_of_n_draws_is_drawn_at_once_from_the_maximum_distribution():
    rng = np.random.default_rng(1)
    inverse = _InverseCdf(Jitter(lognormal_sigma=0.3))
    at_once = inverse(rng.random(200_000) ** (1 / 8))
    each = rng.lognormal(-0.045, 0.3, size=(200_000, 8)).max(axis=1)
    assert np.quantile(at_once, [0.1, 0.5, 0.9, 0.99]) == pytest.approx(np.quantile(each, [0.1, 0.5, 0.9, 0.99]), rel=0.01)
    assert inverse(rng.random(400_000)).mean() == pytest.approx(1.0, abs=0.002)  # mean 1 by construction
    measured = _InverseCdf(Jitter(quantiles=[0.9, 1.0, 1.3]))
    assert measured(np.array([0.0, 0.25, 0.5, 1.0])).tolist() == pytest.approx([0.9, 0.95, 1.0, 1.3])


def test_samples_depend_on_the_seed_alone_not_on_chunks_or_workers():
    s = small(tp=2, pp=2, dp=2, variability={"jitter": {"lognormal_sigma": 0.05},
                                             "slow_gpus": {"fraction": 0.2, "slowdown": 1.3}})
    ten = sample_steps(s, samples=10, seed=42)
    thirty = sample_steps(s, samples=30, seed=42, workers=2)
    assert thirty.steps[:10].tolist() == ten.steps.tolist()
    assert [g.tolist() for g in thirty.slow_gpus[:10]] == [g.tolist() for g in ten.slow_gpus]
    assert sample_steps(s, samples=10, seed=43).steps.tolist() != ten.steps.tolist()
    assert len(set(thirty.steps.tolist())) > 20  # jitter makes every sample its own


def test_flaky_nodes_slow_only_the_transfers_that_leave_a_node(monkeypatch):
    """pp 2 over two nodes of 8 GPUs: with every node degraded 3x, each pipeline transfer
    takes 3x its price (they all cross) and nothing else changes."""
    from sim3d.costs.cost_model import CostModel
    s = small(tp=8, pp=2, variability={"flaky_links": {"probability": 1.0, "slowdown": 3.0}})
    steps = sample_steps(s, samples=2, seed=0).steps
    priced = CostModel.transfer
    monkeypatch.setattr(CostModel, "transfer", lambda self, src, dst: priced(self, src, dst) * 3.0)
    assert steps.tolist() == [replay_step(small(tp=8, pp=2)).result.step_time] * 2
    monkeypatch.undo()
    one_node = small(tp=4, pp=2, variability={"flaky_links": {"probability": 1.0, "slowdown": 3.0}})
    assert sample_steps(one_node, samples=2, seed=0).steps.tolist() == [replay_step(one_node).result.step_time] * 2


def test_samples_are_refused_where_they_cannot_share_one_replay():
    with pytest.raises(ScenarioError, match="flow"):
        sample_steps(small(tp=2, pp=2, variability={"jitter": {"lognormal_sigma": 0.1}}).model_copy(
            update={"costs": small().costs.model_copy(update={"network": "flow"})}), samples=2)


@pytest.mark.parametrize("bad,message", [
    ({"jitter": {}}, "one of lognormal_sigma or quantiles"),
    ({"jitter": {"quantiles": [1.1, 1.0]}}, "must not decrease"),
    ({"jitter": {"quantiles": [0.01, 0.01]}}, "from at most 1 to at least 1"),
    ({"jitter": {"quantiles": [1.05, 1.2]}}, "from at most 1 to at least 1"),
    ({"slow_gpus": {"fraction": 1.5, "slowdown": 2}}, "less than or equal to 1"),
    ({"preset": "nope"}, "unknown preset"),
    ({"preset": [1]}, "unknown preset"),
])
def test_bad_variability_is_refused_with_its_field(bad, message):
    with pytest.raises(ScenarioError, match=message):
        small(variability=bad)


def test_a_recorded_sample_without_variability_has_the_simpy_trace():
    """The recorded trace of a sample whose factors are 1 has the simpy replay's compute,
    send, bucket and optimizer rows, times included."""
    s = small(tp=2, pp=4, dp=2, m=8, schedule="interleaved-1f1b", vpp=2)
    simpy_rows = replay_step(s).result.rows
    wanted = {"compute", "pp", "dp"}
    pipeline = {row.rank for row in simpy_rows}
    expected = sorted(r for r in simpy_rows if r.stream in wanted and not r.kind.startswith("RECV")
                      and not r.kind.endswith("_COMM"))
    recorded = sorted(r for r in Sampler(s, seed=0).trace(0) if r.rank in pipeline)
    assert recorded == expected


# ---- the command ----------------------------------------------------------------------------
def _invoke(*args):
    from typer.testing import CliRunner
    from sim3d.cli.app import app
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_run_samples_writes_the_distribution_its_samples_and_the_worst_gantt(tmp_path):
    import csv
    import json
    varied = 'variability={"jitter": {"lognormal_sigma": 0.05}, "slow_gpus": {"fraction": 0.1, "slowdown": 1.5}}'
    result = _invoke("run", "scenarios/mesh-32.yaml", "--set", varied, "--samples", 40, "--seed", 9, "--worst-gantt",
                     "--json", "--out", tmp_path)
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    dist = summary["step_distribution"]
    assert dist["samples"] == 40 and dist["seed"] == 9
    assert dist["deterministic_step_s"] == summary["step_time_s"]
    for name in ("mean", "p50"):
        low, high = dist["intervals_s"][name]
        assert low <= dist[f"{name}_s"] <= high
    for name in ("p95", "p99"):  # 40 samples cannot bound these from above
        low, high = dist["intervals_s"][name]
        assert low <= dist[f"{name}_s"] and high is None
    assert dist["p50_s"] <= dist["p95_s"] <= dist["p99_s"] <= dist["max_s"]
    rows = list(csv.DictReader((tmp_path / "samples.csv").open()))
    steps = [float(r["step_time_s"]) for r in rows]
    assert len(rows) == 40 and max(steps) == dist["max_s"] and sum(steps) / 40 == pytest.approx(dist["mean_s"])
    assert all(float(r["step_time_s"]) > summary["step_time_s"] for r in rows if r["slow_gpus"])
    for name in ("step_distribution.png", "gantt_worst.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    assert json.loads((tmp_path / "summary.json").read_text())["step_distribution"] == dist
    again = _invoke("run", "scenarios/mesh-32.yaml", "--no-plots", "--json", "--out", tmp_path)
    assert again.exit_code == 0
    assert not (tmp_path / "samples.csv").exists()  # an earlier run's samples would pass for this run's


def test_run_samples_without_variability_says_so_and_every_sample_is_the_step(tmp_path):
    result = _invoke("run", "scenarios/tiny.yaml", "--samples", 5, "--no-plots", "--out", tmp_path)
    assert result.exit_code == 0
    assert "draws no variability: every sample is the deterministic step" in result.stdout
    import csv
    steps = {r["step_time_s"] for r in csv.DictReader((tmp_path / "samples.csv").open())}
    assert len(steps) == 1


@pytest.mark.parametrize("args,message", [
    (("--samples", 0), "--samples 0: give at least 1"),
    (("--samples", 3, "--seed", -1), "--seed -1"),
    (("--samples", 3, "--backend", "slurm"), "expected local or ray"),
    (("--worst-gantt",), "give --samples too"),
    (("--seed", 3), "--seed only mean something with --samples"),
    (("--samples", 10**9), "SIM3D_MAX_SAMPLE_WORK"),
    (("--samples", 3, "--set", "costs.network=flow"), "costs.network is flow"),
])
def test_run_samples_refuses_bad_input_before_any_work(tmp_path, args, message):
    result = _invoke("run", "scenarios/tiny.yaml", *args, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_samples_on_ray_are_the_local_samples_with_at_most_workers_in_flight(monkeypatch):
    """A stand-in `ray` module runs each task in this process when its result is asked for."""
    import sys
    import types
    in_flight, peak = [0], [0]

    def remote_fn(fn):
        def submit(*args):
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            return args

        return types.SimpleNamespace(remote=submit)

    def get(args):
        in_flight[0] -= 1
        return remote_fn.target(*args)

    from sim3d.studies import monte_carlo
    remote_fn.target = monte_carlo._ray_chunk
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(init=lambda **kw: None, remote=remote_fn, get=get))
    s = small(tp=2, pp=2, dp=2, variability={"jitter": {"lognormal_sigma": 0.05}})
    monkeypatch.setattr(monte_carlo.Sampler, "chunk", lambda self, samples, workers: 4)
    on_ray = sample_steps(s, samples=18, seed=2, workers=2, backend="ray")
    assert on_ray.steps.tolist() == sample_steps(s, samples=18, seed=2).steps.tolist()
    assert peak[0] == 2


def test_percentile_intervals_cover_the_true_percentile_as_often_as_they_claim():
    """Order-statistic intervals against known quantiles of a lognormal: over 400 trials of
    150 samples each, p50's and p95's intervals hold the true value at least 95% of the time
    (less sampling error), and say they cannot bound p99 from above."""
    from sim3d.studies.step_distribution import binomial_cdf, quantile_interval
    assert binomial_cdf(10, 0.3)[-1] == pytest.approx(1.0) and binomial_cdf(10, 0.3)[3] == pytest.approx(0.6496107184)
    rng = np.random.default_rng(0)
    truth = {0.5: 1.0, 0.95: math.exp(1.6448536269514722 * 0.5)}
    hits = {q: 0 for q in truth}
    for _ in range(400):
        steps = np.sort(rng.lognormal(0.0, 0.5, size=150))
        for q, value in truth.items():
            low, high = quantile_interval(steps, q)
            hits[q] += low is not None and high is not None and low <= value <= high
        assert quantile_interval(steps, 0.99)[1] is None
    assert hits[0.5] / 400 >= 0.93 and hits[0.95] / 400 >= 0.93, hits


def test_the_tail_is_the_slowest_five_percent_even_when_samples_tie():
    from sim3d.studies.monte_carlo import StepSamples
    from sim3d.studies.step_distribution import describe
    from sim3d.cluster.placement import Placement
    steps = np.array([1.0] * 95 + [2.0] * 5)
    samples = StepSamples(1.0, 0, steps, np.zeros(100, dtype=int), [np.array([], int)] * 95 + [np.array([3])] * 5,
                          [np.array([], int)] * 100)
    tail = describe(samples, Placement(tp=2, pp=2))["tail"]
    assert tail["samples"] == 5 and tail["slow_gpus_per_sample"] == {"tail": 1.0, "all": 0.05}
    same = StepSamples(1.0, 0, np.ones(100), np.zeros(100, dtype=int), [np.array([], int)] * 100,
                       [np.array([], int)] * 100)
    assert describe(same, Placement(tp=2, pp=2))["tail"]["samples"] == 5


def test_a_key_beside_a_preset_replaces_that_key_only():
    s = small(variability={"preset": "megascale-slow-nodes", "slow_gpus": {"slowdown": 1.5}})
    assert (s.variability.slow_gpus.fraction, s.variability.slow_gpus.slowdown) == (0.005, 1.5)


def test_flaky_links_slow_the_sharded_collectives_inside_computes():
    """ZeRO-3 gathers and reduce-scatters run inside the computes: a degraded network stretches
    their exposed time there too (and not at all within one node)."""
    for zero in (0, 3):
        s = small(dp=16, m=2, variability={"flaky_links": {"probability": 1.0, "slowdown": 3.0}}).model_copy(
            update={"parallel": small(dp=16).parallel.model_copy(update={"zero": zero})})
        out = sample_steps(s, samples=2, seed=0)
        assert (out.steps > out.deterministic * 1.05).all(), (zero, out.steps, out.deterministic)


def test_tp_groups_across_a_leaf_boundary_fold_to_their_slowest_member():
    """tp 8 on nodes of 4 GPUs, a fat tree of 5-node leaves: TP members' transfers and data-
    parallel rings differ; the lane takes its slowest member's, as the full-fidelity replay."""
    s = scenario_from_dict({
        "name": "leaf", "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 1024, "seq_len": 256},
        "parallel": {"tp": 8, "pp": 2, "dp": 2}, "training": {"micro_batch": 1, "global_batch": 8},
        "cluster": {"nodes": 8, "gpus_per_node": 4,
                    "inter_node": {"fabric": "fat-tree", "nodes_per_leaf": 5, "oversubscription": 4.0}}})
    every_rank = replay_step(s, full_fidelity=True, fold=False).result.step_time
    assert Sampler(s, seed=0).run([0])[0].tolist() == [every_rank]


def test_samples_from_python_take_a_path_and_overrides():
    import sim3d
    out = sim3d.sample_steps("scenarios/tiny.yaml", 30, seed=1,
                             sets=['variability={"jitter": {"lognormal_sigma": 0.1}}'])
    stats = out.describe()
    assert stats["samples"] == 30 and stats["min_s"] < stats["mean_s"] < stats["max_s"]
    assert stats["deterministic_step_s"] == sim3d.simulate("scenarios/tiny.yaml").summary["step_time_s"]


def test_samples_beyond_the_work_limit_are_refused_from_python_too():
    from sim3d.scenario.limits import WorkLimitExceeded
    with pytest.raises(WorkLimitExceeded, match="SIM3D_MAX_SAMPLE_WORK"):
        sample_steps(small(tp=2, pp=2, dp=2), samples=10**9)


def test_the_mean_of_equal_steps_is_that_step():
    """np.mean of many equal floats can round above them; the summary's mean stays in [min, max]."""
    from sim3d.studies.step_distribution import bounded_mean
    steps = np.full(1000, 51.23098030755565)
    assert steps.mean() > steps.max()  # the rounding guarded against
    assert bounded_mean(steps) == steps.max()
    assert bounded_mean(np.array([1.0, 2.0, 4.0])) == pytest.approx(7 / 3)


def test_the_bootstrap_interval_of_equal_steps_is_that_step():
    """Issue 49: the bootstrap's resampled means rounded 1 ulp above the samples' max."""
    from sim3d.studies.step_distribution import NORMAL_FROM, mean_interval
    value = 51.23098030755565
    n = next(n for n in range(2, NORMAL_FROM) if np.full(n, value).mean() > value)  # rounds above
    assert mean_interval(np.full(n, value), seed=0) == [value, value]


def test_many_samples_of_a_small_step_count_what_each_sample_costs():
    """Issue 49 item 16: the work estimate counted only lane-actions, 10 a sample of tiny.yaml,
    so 5 x 10^7 samples passed (~40 min, ~40 GB); each sample's own cost counts too."""
    from sim3d.scenario.limits import SAMPLE_WORK, WorkLimitExceeded
    from sim3d.studies.monte_carlo import SAMPLE_OVERHEAD_ACTIONS, check_work, step_schedule
    from sim3d.scenario.load import load_scenario
    schedule = step_schedule(load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "tiny.yaml"))
    actions = sum(len(a) for a in schedule.ranks)
    assert 5 * 10**7 * actions <= SAMPLE_WORK.default  # what let it through before
    with pytest.raises(WorkLimitExceeded, match="for the sample itself"):
        check_work(5 * 10**7, schedule, 1)
    check_work(SAMPLE_WORK.default // (actions + SAMPLE_OVERHEAD_ACTIONS), schedule, 1)

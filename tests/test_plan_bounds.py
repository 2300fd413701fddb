"""The bounded tier one of `sim3d plan` (studies/tier_one.py): a layout's floor never exceeds its
estimate, and the search that leaves layouts unpriced by their floors keeps the same best
estimates, in the same order, as the exhaustive one."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import pandas as pd
import pytest

from sim3d.scenario.load import scenario_from_dict
from sim3d.studies.estimate import Pipeline, PIPELINE_FLOOR, PIPELINE_TIME, _zb_h1
from sim3d.studies.space import Space
from sim3d.studies.tier_one import WORKER, price, space_key, worker_state
from sim3d.schedule.specs import BUBBLE_RULES

SMALL = {  # tiny's model on 8-GPU nodes, with a batch that divides many ways
    "name": "small", "schedule": "1f1b",
    "model": {"layers": 8, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 64},
    "training": {"micro_batch": 1, "global_batch": 16, "precision": "bf16"},
    "cluster": {"gpu": "a100-80gb", "nodes": 1, "gpus_per_node": 8},
}
MOE = {**SMALL, "name": "small-moe",
       "model": {**SMALL["model"], "layers": 4, "moe": {"experts": 8, "top_k": 2}}}
# a count of recomputed layers (the floor prices every layer unrecomputed) under eager PyTorch,
# whose blocks depend on the pipeline and the sharding too
COUNTED = {**SMALL, "name": "small-counted",
           "training": {**SMALL["training"], "recompute": "full", "recompute_num_layers": 1,
                        "kernels": {"stack": "eager"}}}
ONE_ORDER = {"order": ("tp-cp-ep-dp-pp",)}
SPACES = {"dense": (SMALL, 8, {}), "moe": (MOE, 8, ONE_ORDER),
          "counted, eager": (COUNTED, 8, {"micro_batch": (1, 2), "zero": (1, 3), **ONE_ORDER}),
          "dense, 2 nodes": (SMALL, 16, {"tp_comm_overlap": (False,), **ONE_ORDER})}
# for the cache-key test: HSDP groups (their own shard links and plans), and experts over fewer micro-batches
KEYS = {"hsdp": (SMALL, 16, {"dp_shard": (2, 4, "all"), "micro_batch": (1, 2), "tp_comm_overlap": (False,)}),
        "moe, few micro-batches": (MOE, 8, {"micro_batch": (1, 2), **ONE_ORDER})}


def _space(case: str) -> Space:
    spec, gpus, choices = KEYS[case] if case in KEYS else SPACES[case]
    return Space(scenario_from_dict(spec), gpus, choices)


@pytest.mark.parametrize("case", list(SPACES))
def test_no_layout_is_estimated_below_its_floor(case):
    space = _space(case)
    layouts, _ = space.layouts()
    estimator = worker_state(space_key(space), space.base, space.gpus, space.choices)[1]
    checked = 0
    for layout in layouts:
        floor = estimator.floor(layout)
        estimate = estimator.estimate(layout, space.scenario(layout)).step_s
        assert 0 < floor <= estimate, layout
        checked += 1
    assert checked > 500
    schedules = {layout.schedule for layout in layouts}
    assert {"1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipev"} <= schedules


@pytest.mark.parametrize("case", list(SPACES))
def test_the_bounded_search_keeps_the_exhaustive_searchs_best_estimates(case):
    space = _space(case)
    layouts, _ = space.layouts()
    exhaustive = price(space, layouts)
    for keep in (1, 7, 60):
        bounded = price(space, layouts, keep=keep)
        assert len(bounded) == len(exhaustive) == len(layouts)
        priced = bounded["fits"].notna()
        assert priced.sum() < len(layouts)  # something was left out, or the test shows nothing
        best = exhaustive.head(keep).reset_index(drop=True)
        pd.testing.assert_frame_equal(bounded.head(keep).reset_index(drop=True).astype(best.dtypes.to_dict()), best)
        # every layout it did price carries the exhaustive search's verdict and estimate
        merged = bounded[priced].astype(best.dtypes.to_dict()).merge(exhaustive, on=list(best.columns), how="left",
                                                                     indicator=True)
        assert (merged["_merge"] == "both").all()
        assert bounded.loc[~priced, "why_not"].str.startswith("not priced").all()


def test_what_a_bounded_search_prices_does_not_depend_on_its_workers():
    """The same rows, priced or not, whether one process or two workers finishing in any
    order price them: candidates.csv is reproducible."""
    space = _space("moe")
    layouts, _ = space.layouts()
    here = price(space, layouts, keep=25)
    WORKER.clear()  # forked workers must start cold, not from this process's caches
    with ProcessPoolExecutor(max_workers=2) as pool:
        there = price(space, layouts, pool, 2, keep=25)
    assert here["fits"].isna().sum() > len(layouts) // 2
    pd.testing.assert_frame_equal(there, here)


def test_every_bubble_rule_has_a_floor():
    assert set(PIPELINE_FLOOR) == set(PIPELINE_TIME) == set(BUBBLE_RULES)


def test_a_weight_gradient_longer_than_its_forward_and_input_gradient_never_shortens_zb_h1():
    """ZB-H1 fills its bubble with weight-gradient passes (Qi et al. 2023: (p-1)(F+B-W)); one
    longer than F + B fills it whole, and the step is then the busiest rank's m passes."""
    ranks = [{"F": 1.0, "B": 5.0, "BI": 1.0, "BW": 4.0}] * 4  # BW > F + BI: exposed reduce-scatters
    work = [r["F"] + r["BI"] + r["BW"] for r in ranks]
    assert _zb_h1(Pipeline("zb-h1", 4, 8, 1, ranks, work)) == pytest.approx(8 * 6.0)
    ranks = [{"F": 1.0, "B": 2.0, "BI": 1.0, "BW": 1.0}] * 4  # the paper's case: bubble 3 (F + BI - BW)
    work = [3.0] * 4
    assert _zb_h1(Pipeline("zb-h1", 4, 8, 1, ranks, work)) == pytest.approx(8 * 3.0 + 3 * 1.0)


@pytest.mark.parametrize("case", ["moe, few micro-batches", "dense, 2 nodes", "hsdp"])
def test_an_estimate_from_the_shared_caches_is_the_estimate_of_a_fresh_estimator(case):
    """The estimator's caches are keyed by the layout fields each part depends on: a key that
    leaves one out hands a layout another's price (ZeRO-2 and ZeRO-3 share a shard group), or
    another's floor."""
    import random

    from sim3d.studies.estimate import Estimator
    space = _space(case)
    layouts, _ = space.layouts()
    shared = Estimator(space)
    for layout in layouts:  # every layout through the shared caches first, in the search's order
        shared.estimate(layout, space.scenario(layout))
    for layout in layouts:
        shared.floor(layout)
    for layout in random.Random(7).sample(layouts, 150):
        assert shared.estimate(layout, space.scenario(layout)) == Estimator(space).estimate(
            layout, space.scenario(layout)), layout
        assert shared.floor(layout) == Estimator(space).floor(layout), layout


def test_plan_says_which_layouts_it_left_unpriced_and_why(tmp_path):
    import json

    from typer.testing import CliRunner

    from sim3d.cli.app import app
    path = tmp_path / "small.yaml"
    path.write_text(json.dumps(SMALL))
    result = CliRunner().invoke(app, ["plan", str(path), "--gpus", "8", "--workers", "1", "--finalists", "5",
                                      "--fix", "training.recompute=none", "--json", "--no-plots",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    candidates = pd.read_csv(tmp_path / "out" / "candidates.csv")
    unpriced = candidates["fits"].isna()
    assert len(candidates) == report["considered"] > report["priced"] == (~unpriced).sum()
    assert candidates.loc[unpriced, "why_not"].str.contains("above the slowest of the 5 best estimates").all()
    assert candidates.loc[unpriced, "est_step_s"].isna().all() and report["simulated"] == 5


def test_a_bounded_search_keeps_at_least_one_estimate():
    space = _space("dense")
    with pytest.raises(ValueError, match="at least one"):
        price(space, space.layouts()[0], keep=0)


class _Clock:
    """time.perf_counter as a counter: each reading one second after the last."""
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


def test_a_bounded_search_refuses_itself_from_its_floors_measured_rate(monkeypatch):
    # one worker deals the floors into about 8 batches: after the first (a tenth or more), one
    # second has passed for its share of them, and the floors alone take the rest at that rate
    import math
    import re
    from sim3d.scenario.limits import WorkLimitExceeded
    from sim3d.studies import tier_one
    monkeypatch.setattr(tier_one, "time", _Clock())
    monkeypatch.setenv("SIM3D_MAX_PLAN_SECONDS", "5")
    space = _space("dense")
    layouts, _ = space.layouts()
    with pytest.raises(WorkLimitExceeded, match=rf"the floors of {len(layouts):,} layouts") as refused:
        price(space, layouts, keep=7)
    done, seconds = re.search(r"([0-9,]+) done in 1.0 s = ([0-9,]+) seconds", str(refused.value)).groups()
    done = int(done.replace(",", ""))
    assert len(layouts) / 9 < done < len(layouts) / 5 and int(seconds) == math.ceil(len(layouts) / done)
    monkeypatch.setenv("SIM3D_MAX_PLAN_SECONDS", seconds)  # at the limit: the search goes on
    assert price(space, layouts, keep=7)["fits"].notna().sum() < len(layouts)


def test_a_bounded_search_refuses_itself_from_its_first_waves_rate(monkeypatch):
    # the clock reads 1 at the start, 2 when the first wave starts and 3 after it: with one
    # priced layout a second, the rest under the bound is counted from the sorted floors
    from sim3d.scenario.limits import WorkLimitExceeded
    from sim3d.studies import tier_one
    monkeypatch.setattr(tier_one, "time", _Clock())
    monkeypatch.setattr(tier_one, "FLOORS_CHECKED_AT", 2.0)  # never: the wave's check alone
    import math
    import re
    monkeypatch.setenv("SIM3D_MAX_PLAN_SECONDS", "1")
    space = _space("dense, 2 nodes")
    layouts, _ = space.layouts()
    with pytest.raises(WorkLimitExceeded, match="then at most") as refused:
        price(space, layouts, keep=60)  # 1,050 priced: 800 in the first wave, then more
    priced, left, seconds = re.search(r"2.0 s for the floors and ([0-9,]+) layouts, then at most ([0-9,]+) more "
                                      r"under the bound .* = ([0-9,]+) seconds", str(refused.value)).groups()
    priced, left = int(priced.replace(",", "")), int(left.replace(",", ""))
    monkeypatch.setenv("SIM3D_MAX_PLAN_SECONDS", "1000000")
    unpriced = price(space, layouts, keep=60)["fits"].isna().sum()  # the same search, not refused
    assert 0 < priced < len(layouts) - unpriced <= priced + left  # "at most": an upper bound
    assert int(seconds) == math.ceil(2 + left / priced)


def test_a_bounded_search_done_in_one_wave_is_not_refused_after_the_fact(monkeypatch):
    # keep 7 of the dense space: its first wave (16 chunks of 50) holds every layout under the
    # bound, so there is nothing left to extrapolate, whatever the clock says the work took
    from sim3d.studies import tier_one
    monkeypatch.setattr(tier_one, "time", _Clock())
    monkeypatch.setattr(tier_one, "FLOORS_CHECKED_AT", 2.0)
    monkeypatch.setenv("SIM3D_MAX_PLAN_SECONDS", "1")
    space = _space("dense")
    layouts, _ = space.layouts()
    priced = price(space, layouts, keep=7)["fits"].notna().sum()
    assert priced == tier_one.CHUNKS_PER_WAVE * tier_one.BOUNDED_CHUNK[0] < len(layouts)


def test_the_pilot_leaves_a_bounded_search_under_twice_the_limit_to_the_search(monkeypatch):
    # the pilot's estimate prices every layout with its cold batches' rate (an upper bound of
    # a bounded search); at 1.5x the limit it refuses an exhaustive search, not a bounded one
    from sim3d.scenario.limits import PLAN_SECONDS, WorkLimitExceeded
    from sim3d.studies import pilot, tier_one
    space = _space("dense")
    layouts, _ = space.layouts()
    key = space_key(space)
    monkeypatch.setattr(pilot, "_rest_of_tier_one", lambda *a: (1.5 * PLAN_SECONDS.value, "estimated"))
    run = lambda bounded: pilot.pilot(tier_one.layout_groups(layouts), lambda chunk: tier_one.price_batch(
        (key, space.base, space.gpus, space.choices, chunk)), 1, bounded=bounded)
    sample, rows, rate = run(True)
    assert len(rows) == len(sample) > pilot.PILOT_PLACES
    with pytest.raises(WorkLimitExceeded, match="estimated"):
        run(False)
    monkeypatch.setattr(pilot, "_rest_of_tier_one", lambda *a: (2.5 * PLAN_SECONDS.value, "estimated"))
    with pytest.raises(WorkLimitExceeded, match="place.s. of the search"):  # far over: early, both ways
        run(True)

"""ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241): checked against
the paper's definition at unit and unequal costs, not against any throughput table. With
m >= 2p - 1 every rank is busy without a gap from its first action to its last (the
parallelogram), so one step takes the least any synchronous schedule can, m(tF + tI + tW) +
(p - 1) tF; it holds up to 2p - 1 micro-batches in flight, twice 1F1B's."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.schedule.evaluate import evaluate, uniform_costs
from sim3d.schedule.generators import build
from sim3d.schedule.lowering import lower
from sim3d.schedule.proof import prove


def gaps(timeline, rank: int) -> float:
    spans = sorted(span for (r, _), span in timeline.spans.items() if r == rank)
    return sum(later[0] - earlier[1] for earlier, later in zip(spans, spans[1:]))


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 10), extra=st.integers(0, 20))
def test_a_parallelogram_at_the_least_step_any_schedule_can_take(p, extra):
    m = 2 * p - 1 + extra
    timeline = evaluate(build("zb-h2", p, m), uniform_costs(1.0, 2.0))  # F = BI = BW = 1
    assert timeline.step_time == 3 * m + (p - 1)
    assert all(gaps(timeline, r) == 0 for r in range(p))
    assert max(prove(lower(build("zb-h2", p, m))).peak_inflight) == 2 * p - 1


def test_a_weight_gradient_cheaper_than_the_input_gradient_is_where_h2_beats_h1():
    """tF, tI, tW = 1, 1, 0.5 on 8 ranks, 32 micro-batches: ZB-H1 takes m(tF+tI+tW) +
    (p-1)(tF+tI-tW) = 80 + 10.5; ZB-H2 the bound m(tF+tI+tW) + (p-1)tF = 80 + 7."""
    cost = uniform_costs(1.0, 1.5, input_grad=1.0, weight_grad=0.5)
    assert evaluate(build("zb-h1", 8, 32), cost).step_time == pytest.approx(90.5)
    assert evaluate(build("zb-h2", 8, 32), cost).step_time == pytest.approx(87.0)


def test_few_micro_batches_still_give_a_proven_schedule():
    for p, m in ((4, 1), (4, 3), (8, 4)):
        schedule = build("zb-h2", p, m)
        assert prove(lower(schedule)).peak_inflight
        assert evaluate(schedule, uniform_costs(1.0, 2.0)).step_time >= 3 * m + (p - 1)


def test_the_cli_prints_a_proven_schedule():
    result = CliRunner().invoke(app, ["schedule", "zb-h2", "--pp", "8", "--microbatches", "24", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["peak_inflight"] == [15] * 8
    assert report["step_units"] == pytest.approx(3 * 24 + 7)


def test_its_activations_are_held_for_2p_minus_1_micro_batches():
    """Every rank keeps the activations of 2p - 1 micro-batches under ZB-H2 and of p under ZB-H1
    (each frees a micro-batch's at its BW): pp 4, 7 against 4, on every rank."""
    def validated(name):
        args = ["validate", "scenarios/tiny.yaml", "--json", "--set", "parallel.pp=4", "--set",
                "cluster.gpus_per_node=4", "--set", "training.global_batch=16", "--set", "model.layers=8",
                "--set", f"schedule={name}"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)
    h1, h2 = validated("zb-h1"), validated("zb-h2")
    assert h1["peak_inflight"] == [4] * 4 and h2["peak_inflight"] == [7] * 4
    for one, two in zip(h1["memory_gib"], h2["memory_gib"]):
        assert two["activations"] == pytest.approx(one["activations"] * 7 / 4, rel=1e-9)

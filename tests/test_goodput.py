"""sim3d goodput: Young/Daly on a case worked by hand, the fleet model against the Llama 3
report it comes from, and the command's outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.model.params import model_params
from sim3d.scenario.load import load_scenario
from sim3d.studies import goodput as g

ROOT = Path(__file__).resolve().parents[1]
LLAMA_405B = ROOT / "scenarios" / "llama3.1-405b.yaml"


def test_young_and_daly_on_a_case_worked_by_hand():
    """C = 1 min to checkpoint, one interruption every 3 h, 10 min to restart. By hand:
    Young sqrt(2 * 60 * 10800) = 1138.42 s; Daly's correction, C/2M = 1/360:
    1138.42 * (1 + 0.052705 / 3 + 0.0027778 / 9) - 60 = 1098.77 s; and the useful share,
    1098.77 / (10800 e^(600/10800) (e^(1158.77/10800) - 1)) = 1098.77 / 1293.11 = 0.84972."""
    assert g.young_interval(60, 10_800) == pytest.approx(1138.42, abs=0.01)
    assert g.daly_interval(60, 10_800) == pytest.approx(1098.77, abs=0.01)
    assert g.effective_fraction(1098.77, 60, 600, 10_800) == pytest.approx(0.84972, abs=2e-5)
    assert g.daly_interval(30_000, 10_000) == 10_000  # a checkpoint longer than 2M: once per M


@given(interval=st.floats(1, 1e5), checkpoint=st.floats(0, 1e4), restart=st.floats(0, 1e4))
def test_without_failures_only_the_checkpoints_cost(interval, checkpoint, restart):
    assert g.effective_fraction(interval, checkpoint, restart, 1e15) == pytest.approx(
        interval / (interval + checkpoint), rel=1e-6)


def test_the_fleet_model_gives_back_the_llama3_reports_interruptions_at_its_size():
    mtbf = g.llama3_failures().job_mtbf_s(16_384, 8)
    assert 54 * 24 * 3600 / mtbf == pytest.approx(419)
    # a smaller job is interrupted proportionally less often (both parts scale with size)
    assert g.llama3_failures().job_mtbf_s(1024, 8) == pytest.approx(16 * mtbf)


def test_daly_is_the_optimum_of_the_expected_fraction():
    s = load_scenario(LLAMA_405B)
    run = g.goodput(s, 16_384)
    best = g.effective_fraction(run.interval_s, run.checkpoint_s, run.restart_s, run.mtbf_s)
    for factor in (0.8, 0.9, 1.1, 1.25):
        assert g.effective_fraction(run.interval_s * factor, run.checkpoint_s, run.restart_s, run.mtbf_s) < best


def test_a_checkpoint_holds_weights_master_copy_and_both_moments():
    s = load_scenario(LLAMA_405B)
    assert g.checkpoint_bytes(s) == pytest.approx(14 * model_params(s))
    assert 400e9 < model_params(s) < 410e9


def test_more_gpus_lose_more_time():
    s = load_scenario(LLAMA_405B)
    shares = [g.goodput(s, n).effective for n in g.gpu_counts(8)]
    assert shares == sorted(shares, reverse=True) and len(shares) == 8


def test_the_command_writes_the_table_and_plot_and_names_its_assumptions(tmp_path):
    done = CliRunner().invoke(app, ["goodput", str(LLAMA_405B), "--gpus", "16384", "--out", str(tmp_path), "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["gpus"] == 16_384 and 0.5 < data["effective_fraction"] < 1
    assert data["interval_steps"] is None  # another size than the scenario's: no step to count in
    assert any("restart" in note and "assumed" in note for note in data["assumptions"])
    table = pd.read_csv(tmp_path / "goodput.csv")
    assert list(table["gpus"]) == g.gpu_counts(8) and (tmp_path / "goodput.png").stat().st_size > 0
    row = table[table["gpus"] == 16_384].iloc[0]
    assert row["effective_fraction"] == pytest.approx(data["effective_fraction"])


def test_a_job_that_is_not_whole_servers_is_refused(tmp_path):
    done = CliRunner().invoke(app, ["goodput", str(LLAMA_405B), "--gpus", "1001", "--out", str(tmp_path)])
    assert done.exit_code == 2 and "whole number" in done.output


def test_the_interval_in_steps_uses_the_scenarios_own_step(tmp_path):
    done = CliRunner().invoke(app, ["goodput", str(ROOT / "scenarios" / "tiny.yaml"), "--out", str(tmp_path),
                                    "--json", "--no-plots"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["interval_steps"] == pytest.approx(data["interval_min"] * 60 / data["step_time_s"])
    assert math.isfinite(data["hours_lost_per_day"])


def test_samples_price_the_interval_and_the_run_in_the_sampled_mean_step(tmp_path):
    """The checkpoint interval in steps and a run's length come from the sampled step's mean
    with --samples (they came from the deterministic step), and --run-days counts that run."""
    args = ["goodput", str(ROOT / "scenarios" / "tiny.yaml"), "--set", "variability.preset=megascale-slow-nodes",
            "--json", "--no-plots", "--run-days", "30"]
    plain = json.loads(CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")]).stdout)
    sampled = json.loads(CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b"), "--samples", "64"]).stdout)
    assert plain["step_source"] == "the deterministic step" and "64 sampled steps" in sampled["step_source"]
    assert sampled["step_time_s"] > plain["step_time_s"]  # slow nodes only ever slow a step
    s = load_scenario(ROOT / "scenarios" / "tiny.yaml")
    run = sampled["run"]
    assert run["training_days"] == pytest.approx(30 * sampled["effective_fraction"])
    assert run["steps"] == pytest.approx(30 * 86400 * sampled["effective_fraction"] / sampled["step_time_s"])
    assert run["tokens"] == pytest.approx(run["steps"] * s.training.global_batch * s.model.seq_len)
    assert run["interruptions"] == pytest.approx(30 * sampled["interruptions_per_day"])
    assert sampled["interval_steps"] == pytest.approx(sampled["interval_min"] * 60 / sampled["step_time_s"])


@pytest.mark.parametrize("option", [["--write-gb-s", "nan"], ["--write-gb-s", "inf"], ["--checkpoint-seconds", "0"]])
def test_a_cost_that_is_no_real_cost_is_refused(tmp_path, option):
    done = CliRunner().invoke(app, ["goodput", str(LLAMA_405B), "--out", str(tmp_path), "--no-plots", *option])
    assert done.exit_code == 2 and "expected a finite number above 0" in done.stderr, done.output


def test_extreme_costs_give_a_fraction_not_a_crash():
    """A restart of 1e5 minutes against hours between failures overflowed exp()."""
    assert g.effective_fraction(600.0, 10.0, 6e6, 3600.0) == 0.0
    near = g.effective_fraction(600.0, 10.0, 60.0, 3600.0)
    assert 0 < near < 1 and near == pytest.approx(600 / (3600 * math.exp(60 / 3600) * math.expm1(610 / 3600)))


def test_the_jobs_own_size_is_in_the_table_beyond_the_powers_of_two(tmp_path):
    done = CliRunner().invoke(app, ["goodput", str(LLAMA_405B), "--gpus", "262144", "--out", str(tmp_path),
                                    "--no-plots", "--json"])
    assert done.exit_code == 0, done.output
    assert 262144 in [row["gpus"] for row in json.loads(done.stdout)["by_gpus"]]


def test_an_expected_count_below_one_is_not_printed_as_none():
    from sim3d.cli.goodput_command import _expected
    assert [_expected(x) for x in (0.5, 0.0018, 3.46, 15.2, 1234.0)] == ["0.5", "0.0018", "3.5", "15", "1,234"]


def test_a_restart_longer_than_a_week_is_refused_not_printed_as_inf():
    from typer.testing import CliRunner
    from sim3d.cli.app import app
    result = CliRunner().invoke(app, ["goodput", "scenarios/tiny.yaml", "--restart-minutes", "1e308", "--no-plots"])
    assert result.exit_code == 2 and "0.0<=x<=10080.0" in result.output.replace("\n", "").replace("│", "").replace(" ", "")

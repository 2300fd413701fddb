"""Hostile and careless input, round four (issue 49): conflicting measurements refused with
their rows, messages that name the file and what is wrong with it, the breakdown saying why an
optimizer step is cheap."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.costs.profile import CONFLICT_RATIO, Profile, ProfileError

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "calibrate" / "profiles" / "h100-sxm5-80gb.csv"
TINY = ROOT / "scenarios" / "tiny.yaml"
runner = CliRunner()


def _with_duplicate(tmp_path: Path, factor: float) -> Path:
    table = pd.read_csv(H100)
    row = table[table["kind"] == "gemm"].iloc[[0]].assign(seconds=lambda r: r["seconds"] * factor)
    out = tmp_path / f"dup{factor:g}.csv"
    pd.concat([table, row]).to_csv(out, index=False)
    return out


def test_conflicting_measurements_are_refused_with_their_rows(tmp_path):
    """Item 5: a shape timed twice, 1000x apart, was averaged (a step from 12.2 s to 333 s)."""
    with pytest.raises(ProfileError) as info:
        Profile.load(_with_duplicate(tmp_path, 1000.0))
    rows = len(pd.read_csv(H100)) + 1
    assert f"data rows 1, {rows} time the same gemm" in str(info.value) and "keep one" in str(info.value)
    ran = runner.invoke(app, ["run", str(TINY), "--set", f"costs.profile={_with_duplicate(tmp_path, 1000.0)}",
                              "--no-plots", "--out", str(tmp_path / "r")])
    assert ran.exit_code == 2 and "time the same gemm" in ran.stderr


def test_repeated_timings_within_noise_are_kept_and_medianed(tmp_path):
    profile = Profile.load(_with_duplicate(tmp_path, 1.03))
    first = pd.read_csv(H100).query("kind == 'gemm'").iloc[0]
    m, n, k = int(first["m"]), int(first["n"]), int(first["k"])
    assert profile.gemm_seconds(m, n, k, first["dtype"], first["pass"]) == pytest.approx(first["seconds"] * 1.015)
    assert CONFLICT_RATIO < 1000.0


def test_a_profile_that_is_a_fifo_or_a_folder_is_named_as_such(tmp_path):
    fifo = tmp_path / "profile.csv"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        ran = runner.invoke(app, ["validate", str(TINY), "--set", f"costs.profile={path}"])
        assert ran.exit_code == 2 and f"{path} is not a regular file" in ran.stderr, ran.stderr


def test_an_imported_value_that_does_not_load_names_the_file(tmp_path):
    config = tmp_path / "nan.toml"
    config.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = nan\nlocal_batch_size = 1\n')
    ran = runner.invoke(app, ["import", "torchtitan", str(config), "--gpu", "h100-sxm", "--gpus", "8"])
    assert ran.exit_code == 2 and ran.stderr.startswith(f"error: {config}: ") and "model.seq_len" in ran.stderr


def test_the_breakdown_says_the_optimizer_state_is_sharded():
    """Item 12: a sharded optimizer made weak scaling and FSDP look faster with no word of why."""
    from sim3d.analysis.summary import breakdown_table
    from rich.console import Console
    sharded = sim3d.simulate(TINY, sets=["parallel.dp=4", "parallel.zero=1", "cluster.gpus_per_node=4"]).summary
    plain = sim3d.simulate(TINY, sets=["parallel.dp=4", "cluster.gpus_per_node=4"]).summary
    assert (sharded["optimizer_shards"], plain["optimizer_shards"]) == (4, 1)
    assert sharded["breakdown"]["optimizer"] < plain["breakdown"]["optimizer"]

    def text(summary):
        console = Console(width=120, record=True)
        console.print(breakdown_table(summary))
        return console.export_text()
    assert "optimizer step (its state sharded over 4 ranks)" in text(sharded)
    assert "sharded" not in text(plain)


def test_a_profile_edited_while_a_sweep_runs_is_refused(tmp_path):
    """Item 9: a profile edited mid-sweep mixed two cost models in results.csv, exit 0."""
    from sim3d.errors import ScenarioError
    from sim3d.studies.sweep import run_sweep
    profile = tmp_path / "p.csv"
    profile.write_bytes(H100.read_bytes())
    scenario = tmp_path / "s.yaml"
    scenario.write_text(TINY.read_text() + f"\ncosts: {{profile: {profile}}}\n")

    def edit_after_the_first(count, total):
        if count == 1:
            table = pd.read_csv(profile)
            table.assign(seconds=table["seconds"] * 2).to_csv(profile, index=False)
    with pytest.raises(ScenarioError, match=f"{profile} changed while the sweep ran"):
        run_sweep(scenario, {"training.micro_batch": ["1", "2"]}, tmp_path / "out", workers=1,
                  progress=edit_after_the_first)
    untouched = run_sweep(scenario, {"training.micro_batch": ["1", "2"]}, tmp_path / "again", workers=1)
    assert len(pd.read_csv(untouched)) == 2


def test_a_searched_fit_takes_an_even_spread_of_many_rows():
    """Item 17: `calibrate --fit` priced every row at every step of its searches, 11k rows 92 s;
    above SEARCHED_ROWS it fits an even spread over sizes, the smallest and largest kept."""
    from sim3d.costs.fit import SEARCHED_ROWS, _spread
    rows = list(range(5000, 0, -1))
    picked = _spread(rows, lambda r: r)
    assert len(picked) == SEARCHED_ROWS and picked[0] == 1 and picked[-1] == 5000
    assert picked == sorted(set(picked))  # distinct, in size order
    assert _spread(rows[:10], lambda r: r) == rows[:10]

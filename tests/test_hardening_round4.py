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


def test_a_sweeps_table_says_which_points_shard_the_optimizer(tmp_path):
    """Item 12, in a sweep: results.csv had no optimizer_shards column."""
    ran = runner.invoke(app, ["sweep", str(TINY), "--set", "parallel.dp=4", "--set", "cluster.gpus_per_node=4",
                              "--grid", "parallel.zero=0,1", "--out", str(tmp_path / "s")])
    assert ran.exit_code == 0, ran.output
    table = pd.read_csv(tmp_path / "s" / "results.csv")
    assert dict(zip(table["parallel.zero"], table["optimizer_shards"])) == {0: 1, 1: 4}


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


# ---- the hostile pass re-run on this round's fixes ------------------------------------------
def test_an_import_never_replaces_the_file_it_read_even_with_force(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_bytes((ROOT / "tests" / "fixtures" / "nemo_llama31_70b.yaml").read_bytes())
    link = tmp_path / "link.yaml"
    link.symlink_to(recipe)
    for out in (recipe, link):
        ran = runner.invoke(app, ["import", "nemo", str(recipe), "--gpu", "h100-sxm", "--gpus", "64",
                                  "--out", str(out), "--force"])
        assert ran.exit_code == 2 and "is the file imported from" in ran.stderr or "symbolic link" in ran.stderr
    assert recipe.read_bytes() == (ROOT / "tests" / "fixtures" / "nemo_llama31_70b.yaml").read_bytes()


def test_outputs_never_land_in_the_home_folder_or_above_the_working_directory(tmp_path, monkeypatch):
    home = tmp_path / "home"
    work = home / "project"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for out in (str(home), "..", str(tmp_path)):
        ran = runner.invoke(app, ["run", str(TINY), "--no-plots", "--out", out])
        assert ran.exit_code == 2, (out, ran.output)
        assert "home folder" in ran.stderr or "holds the working directory" in ran.stderr
    assert sorted(p.name for p in home.iterdir()) == ["project"]


def test_goodput_refuses_a_run_length_that_is_not_a_number(tmp_path):
    ran = runner.invoke(app, ["goodput", str(TINY), "--run-days", "nan", "--json", "--out", str(tmp_path / "g")])
    assert ran.exit_code == 2 and "--run-days" in ran.stderr


def test_brackets_in_toml_strings_and_comments_are_not_nesting(tmp_path):
    text = (ROOT / "tests" / "fixtures" / "torchtitan_llama3_70b.toml").read_text()
    config = tmp_path / "c.toml"
    config.write_text(text + "\n# " + "[" * 40 + "\n[sim3d_test]\ndescription = \"" + "[" * 40 + "\"\n")
    ran = runner.invoke(app, ["import", "torchtitan", str(config), "--gpu", "h100-sxm", "--gpus", "64"])
    assert ran.exit_code == 0, ran.output
    config.write_text(text + "\n[sim3d_test]\nx = " + "[" * 40 + "]" * 40 + "\n")
    refused = runner.invoke(app, ["import", "torchtitan", str(config), "--gpu", "h100-sxm", "--gpus", "64"])
    assert refused.exit_code == 2 and "nested 40 levels deep" in refused.stderr


def test_a_name_of_letters_of_any_script_is_a_name():
    from sim3d.report.outputs import folder_name
    assert sim3d.load_scenario(TINY, ["name=é"]).name == "é" and folder_name("é") == "é"
    assert folder_name("a/b") == "a-b"


def test_kernel_prices_take_numpy_integers_and_refuse_tensors_no_gpu_holds():
    import numpy as np
    from sim3d.errors import ScenarioError
    assert sim3d.kernel_seconds("h100-sxm", "gemm", m=np.int64(512), n=512, k=512).seconds > 0
    with pytest.raises(ScenarioError, match="more than one kernel takes"):
        sim3d.kernel_seconds("h100-sxm", "gemm", m=10**8, n=10**8, k=10**7)  # 2.4e16 bytes of operands
    with pytest.raises(ScenarioError, match="nbytes=100,000,000,000,000,000,000,000 exceeds"):  # not rounded
        sim3d.kernel_seconds("h100-sxm", "all_reduce", nbytes=10**23, group=8)


def test_a_fifo_or_folder_as_a_profile_is_named_as_such_by_every_command(tmp_path):
    fifo = tmp_path / "p.csv"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        kernel = runner.invoke(app, ["kernel", "gemm", "m=64", "n=64", "k=64", "--gpu", "h100-sxm", "--profile", str(path)])
        fit = runner.invoke(app, ["calibrate", "--fit", "--profile", str(path)])
        for ran in (kernel, fit):
            assert ran.exit_code == 2 and "not a regular file" in ran.stderr, ran.stderr


@pytest.mark.parametrize("quantiles", [[0.05, 1.0], [0.01] * 9 + [1.0], [0.6, 0.7, 0.8, 1.0]])
def test_jitter_faster_than_the_price_is_refused(quantiles):
    from sim3d.errors import ScenarioError
    with pytest.raises(ScenarioError, match="not jitter"):
        sim3d.simulate(TINY, sets=[f'variability={{"jitter": {{"quantiles": {quantiles}}}}}'])
    sim3d.simulate(TINY, sets=['variability={"jitter": {"quantiles": [0.97, 1.0, 1.1]}}'])  # a real spread


def test_calibrate_from_a_trace_never_replaces_a_csv_it_did_not_write(tmp_path):
    mine = tmp_path / "prof.csv"
    mine.write_text("mine\n")
    trace = ROOT / "tests" / "fixtures" / "traces" / "two_rank_rank0.json"
    ran = runner.invoke(app, ["calibrate", "--from-trace", str(trace), "--out", str(mine)])
    assert ran.exit_code == 2 and "not a profile sim3d wrote" in ran.stderr and mine.read_text() == "mine\n"
    ours = tmp_path / "ours.csv"
    for _ in range(2):  # sim3d's own profile is replaced
        assert runner.invoke(app, ["calibrate", "--from-trace", str(trace), "--out", str(ours)]).exit_code == 0


def test_schedule_never_replaces_a_file_it_did_not_write(tmp_path):
    """Defect G of the re-run: `schedule --csv mine.csv` and `--gantt mine.png` replaced the
    user's files; sim3d's own (a schedule CSV, a matplotlib figure) are replaced as before."""
    mine_csv, mine_png = tmp_path / "mine.csv", tmp_path / "mine.png"
    mine_csv.write_text("a,b\n1,2\n")
    mine_png.write_bytes(b"\x89PNG\r\n\x1a\nnot sim3d's")
    for option, path in (("--csv", mine_csv), ("--gantt", mine_png)):
        ran = runner.invoke(app, ["schedule", "1f1b", "--pp", "2", "-m", "2", option, str(path)])
        assert ran.exit_code == 2 and "is not a file sim3d wrote" in ran.stderr, ran.output
    assert mine_csv.read_text() == "a,b\n1,2\n"
    ours_csv, ours_png = tmp_path / "ours.csv", tmp_path / "ours.png"
    for _ in range(2):
        assert runner.invoke(app, ["schedule", "1f1b", "--pp", "2", "-m", "2", "--csv", str(ours_csv),
                                   "--gantt", str(ours_png)]).exit_code == 0
    forced = runner.invoke(app, ["schedule", "1f1b", "--pp", "2", "-m", "2", "--csv", str(mine_csv), "--force"])
    assert forced.exit_code == 0 and mine_csv.read_text().startswith("# schedule=")


def test_a_lock_that_cannot_be_written_is_not_left_behind(tmp_path, monkeypatch):
    """Defect H of the re-run: on a full disk run and goodput left a 0-byte .sim3d.lock."""
    import errno
    from sim3d.util import safe_files

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(safe_files.os, "pwrite", full)
    with pytest.raises(OSError):
        safe_files.folder_lock(tmp_path, "run")
    assert not (tmp_path / safe_files.LOCK_NAME).exists()


@pytest.mark.parametrize("close", [">&-", "2>&-"])
def test_a_closed_standard_stream_is_not_a_crash(tmp_path, close):
    """Hostile re-run, defect E: `run ... >&-` died with AttributeError (exit 1, nothing written),
    `2>&-` exited 1 after writing."""
    import subprocess
    import sys
    out = tmp_path / "out"
    done = subprocess.run(["bash", "-c", f'"{sys.executable}" -m sim3d run "{TINY}" --samples 8 --out "{out}" '
                           f"--no-plots {close}"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert (out / "summary.json").is_file() and (out / "samples.csv").is_file()


def test_numpy_true_is_a_full_fidelity_flag():
    """Hostile re-run, M8: simulate(..., full_fidelity=np.bool_(True)) raised TypeError."""
    import numpy as np
    assert sim3d.simulate(TINY, full_fidelity=np.bool_(True)).full_fidelity is True
    with pytest.raises(TypeError):
        sim3d.simulate(TINY, full_fidelity="no")


@pytest.mark.parametrize("option, says", [(["--checkpoint-seconds", "1e308"], "--checkpoint-seconds"),
                                          (["--gpus", "99999999999"], "SIM3D_MAX_GPUS")])
def test_goodput_refuses_what_no_job_is(tmp_path, option, says):
    """Hostile re-run, defect F: a 1e308 s checkpoint printed a 300-digit time, exit 0."""
    ran = runner.invoke(app, ["goodput", str(TINY), *option, "--no-plots", "--out", str(tmp_path / "g")])
    assert ran.exit_code == 2 and says in ran.output, ran.output


def test_a_fit_says_what_it_is_fitting_before_it_starts(tmp_path):
    """Item 17: `calibrate --fit` on 669k rows was silent for a minute."""
    import shutil
    for suffix in (".csv", ".json"):
        shutil.copyfile(ROOT / "calibrate" / "profiles" / f"cpu-amd-epyc{suffix}", tmp_path / f"p{suffix}")
    ran = runner.invoke(app, ["calibrate", "--fit", "--profile", str(tmp_path / "p.csv"), "--json"])
    rows = len(pd.read_csv(tmp_path / "p.csv"))
    assert ran.exit_code == 0 and f"fitting the analytical model to {rows:,} profile rows" in ran.stderr, ran.output


def test_two_overrides_that_shard_differently_are_refused_in_either_order(tmp_path):
    """Hostile re-run, defect G: --set parallel.zero=3 --set parallel.distributed_optimizer=false
    ran as ZeRO 0 (the last won), the reverse order as ZeRO 3, with no word."""
    from sim3d.errors import ScenarioError
    llama = ROOT / "scenarios" / "llama3.1-8b.yaml"
    for sets in (["parallel.zero=3", "parallel.distributed_optimizer=false"],
                 ["parallel.distributed_optimizer=false", "parallel.zero=3"]):
        with pytest.raises(ScenarioError, match="both set how data parallelism shards"):
            sim3d.simulate(llama, sets=sets)
    with pytest.raises(ScenarioError, match="both set how data parallelism shards"):  # zero 1 or 2, by order
        sim3d.simulate(llama, sets=["parallel.zero=2", "parallel.distributed_optimizer=true"])
    with pytest.raises(ScenarioError, match="not a sharding setting"):  # the value's own message
        sim3d.simulate(llama, sets=["parallel.zero=5"])
    assert sim3d.simulate(llama, sets=["parallel.zero=1", "parallel.zero=2"]).scenario.parallel.zero == 2
    ran = runner.invoke(app, ["plan", str(TINY), "--set", "parallel.distributed_optimizer=true", "--gpus", "2",
                              "--no-plots", "--json", "--out", str(tmp_path / "plan")])
    assert ran.exit_code == 0, ran.output  # the planner's own parallel.zero replaces the user's spelling


def test_a_fit_of_fp8_rows_without_provenance_says_what_is_missing(tmp_path):
    """Hostile re-run, defect H: a profile copied without its .json failed with "x-fitted has no
    fp8 tensor cores"."""
    import shutil
    shutil.copyfile(H100, tmp_path / "x.csv")
    ran = runner.invoke(app, ["calibrate", "--fit", "--profile", str(tmp_path / "x.csv")])
    assert ran.exit_code == 2 and "keep x.json" in ran.stderr and "tensor cores" not in ran.stderr, ran.output


def test_a_huge_byte_count_is_echoed_as_its_magnitude():
    """Hostile re-run, cosmetic: nbytes=1e300 was echoed as a 300-digit number."""
    ran = runner.invoke(app, ["kernel", "all_reduce", "nbytes=1e300", "group=8", "nodes=1"])
    assert ran.exit_code == 2 and "nbytes=1e+300 exceeds" in ran.stderr, ran.output


@pytest.mark.parametrize("command", [["run", "--no-plots"], ["validate"], ["plan", "--gpus", "8"]])
def test_a_key_set_twice_with_two_values_is_refused_not_left_to_the_last(command, tmp_path):
    """`--set parallel.tp=2 --set parallel.tp=4` ran tp 4 without a word; the same key in
    another spelling (Megatron's) counts as the same key."""
    for second in ("parallel.tp=4", "parallel.tensor_model_parallel_size=4"):
        ran = runner.invoke(app, [command[0], str(TINY), "--set", "parallel.tp=2", "--set", second, *command[1:],
                                  *(["--out", str(tmp_path / "o")] if command[0] != "validate" else [])])
        assert ran.exit_code == 2, ran.output
        message = " ".join(ran.output.split())
        assert "parallel.tp is set twice" in message and "give it once" in message
    same = runner.invoke(app, ["validate", str(TINY), "--set", "parallel.tp=2", "--set",
                               "parallel.tensor_model_parallel_size=2", "--set", "cluster.gpus_per_node=2"])
    assert same.exit_code == 0, same.output

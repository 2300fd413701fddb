"""Output folders that cannot be hijacked, mixed or left torn (issue 35, items 1, 2, 4 and 7):
links and FIFOs among the outputs are refused, one sim3d command writes into a folder at a
time, a run removes what an earlier run left and it did not write, and a full disk names its
file, exits 3 and leaves no half-written output."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.util.safe_files import LOCK_NAME, MANIFEST_NAME, TEMP_PREFIX, record_outputs

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "tiny.yaml"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def one_line(text: str) -> str:
    return " ".join(text.split())  # rich may wrap a long path across lines


def run(out, *extra):
    return invoke("run", TINY, "--out", out, *extra)


def sweep(out, *extra):
    return invoke("sweep", TINY, "--grid", "training.micro_batch=1,2", "--out", out, "--workers", "1", *extra)


def plan(out, *extra):
    return invoke("plan", TINY, "--gpus", "2", "--workers", "1", "--finalists", "2", "--out", out, *extra)


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(TEMP_PREFIX)]


# ---- item 1: never through a link, never into a non-regular file -------------------------

@pytest.mark.parametrize("name, dangling, extra", [("trace.json", False, ["--no-plots"]),
                                                   ("trace.json", True, ["--no-plots"]),
                                                   ("summary.json", False, ["--no-plots"]),
                                                   ("gantt.png", True, [])])
def test_a_link_among_run_outputs_is_refused_and_not_followed(tmp_path, name, dangling, extra):
    out, outside = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    outside.mkdir()
    victim = outside / "victim"
    if not dangling:
        victim.write_text("precious\n")
    (out / name).symlink_to(victim)
    result = run(out, *extra)
    assert result.exit_code == 2, result.output
    assert str(out / name) in one_line(result.stderr) and "symbolic link" in result.stderr
    assert (victim.read_text() == "precious\n") if not dangling else not victim.exists()
    assert sorted(p.name for p in outside.iterdir()) == ([] if dangling else ["victim"])
    assert not (out / "summary.json").exists() or name == "summary.json"  # refused before any work


def test_a_hard_link_at_an_output_is_replaced_not_written_through(tmp_path):
    """A link the checks cannot see (a hard link is a regular file) is still safe: the new
    file is renamed over the folder's entry, so the other name keeps the old bytes."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.csv"
    victim.write_text("precious\n")
    os.link(victim, out / "trace.csv")
    # not sim3d's file (tests/test_foreign_outputs.py), so replaced only with --force
    assert run(out, "--no-plots", "--trace", "none", "--force").exit_code == 0
    assert victim.read_text() == "precious\n"
    assert (out / "trace.csv").read_text().startswith("rank,")


def test_a_fifo_named_like_an_output_is_refused_at_once(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "summary.json")
    # a process of its own: before the fix the run blocked forever opening the FIFO
    done = subprocess.run([sys.executable, "-m", "sim3d", "run", str(TINY), "--out", str(out), "--no-plots"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    assert str(out / "summary.json") in one_line(done.stderr) and "FIFO" in done.stderr


@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_at_sweeps_results_table_is_refused(tmp_path, dangling):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.csv"
    if not dangling:
        victim.write_text("")  # empty: a table with rows would be refused as another sweep's
    (out / "results.csv").symlink_to(victim)
    result = sweep(out)
    assert result.exit_code == 2 and str(out / "results.csv") in one_line(result.stderr), result.output
    assert (victim.read_text() == "") if not dangling else not victim.exists()


def test_a_fifo_at_sweeps_results_table_is_refused_at_once(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "results.csv")
    done = subprocess.run([sys.executable, "-m", "sim3d", "sweep", str(TINY), "--grid", "training.micro_batch=1,2",
                           "--out", str(out), "--workers", "1"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2, done.stderr
    assert str(out / "results.csv") in one_line(done.stderr) and "FIFO" in done.stderr


def test_a_link_at_plans_candidates_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.csv"
    victim.write_text("precious\n")
    (out / "candidates.csv").symlink_to(victim)
    result = plan(out, "--no-plots")
    assert result.exit_code == 2 and str(out / "candidates.csv") in one_line(result.stderr), result.output
    assert victim.read_text() == "precious\n"
    assert not (out / "finalists.csv").exists()


# ---- item 2: one command per folder ------------------------------------------------------

def hold_lock(folder: Path, holder: str = "4242 run") -> int:
    """The lock as a second sim3d process holds it (flock on the folder's lock file)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.pwrite(fd, f"{holder}\n".encode(), 0)
    return fd


def lock_is_free(folder: Path) -> bool:
    """Released, and its file gone with it: a finished command leaves only its outputs."""
    if not (folder / LOCK_NAME).exists():
        return True
    fd = os.open(folder / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.parametrize("command", [lambda out: run(out, "--no-plots"), sweep, lambda out: plan(out, "--no-plots"),
                                     lambda out: invoke("execute", TINY, "--out", out, "--steps", "1")],
                         ids=["run", "sweep", "plan", "execute"])
def test_a_folder_another_sim3d_writes_into_is_refused(tmp_path, command):
    out = tmp_path / "out"
    fd = hold_lock(out)
    try:
        result = command(out)
    finally:
        os.close(fd)
    assert result.exit_code == 2, result.output
    message = one_line(result.stderr)
    assert str(out) in message and "another sim3d command is writing here" in message and "process 4242" in message
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]


def test_runs_lock_is_released_after_success_and_after_an_error(tmp_path):
    out = tmp_path / "out"
    assert run(out, "--no-plots").exit_code == 0
    assert lock_is_free(out) and not (out / LOCK_NAME).exists()
    late = run(out, "--gantt-window", "1000,2000")  # refused after the step is simulated
    assert late.exit_code == 2 and "after the step ends" in late.stderr
    assert lock_is_free(out)


# ---- item 4: no stale files --------------------------------------------------------------

def test_a_run_removes_what_an_earlier_run_wrote_and_it_did_not(tmp_path):
    out = tmp_path / "out"
    assert run(out).exit_code == 0
    for name in ("trace.json", "gantt.png", "memory.png", "links.png"):
        assert (out / name).exists()
    (out / "notes.txt").write_text("mine\n")
    with (out / "links.png").open("ab") as f:  # edited since: the user's now
        f.write(b"\0")
    result = run(out, "--no-plots", "--trace", "none")
    assert result.exit_code == 0, result.output
    assert not any((out / name).exists() for name in ("trace.json", "gantt.png", "memory.png"))
    assert (out / "links.png").exists() and (out / "notes.txt").read_text() == "mine\n"
    removed = one_line(result.stderr)
    assert "removed trace.json, gantt.png, memory.png from" in removed and "links.png" not in removed
    listed = [f["name"] for f in json.loads((out / MANIFEST_NAME).read_text())["files"]]
    assert "trace.json" not in listed and "summary.json" in listed


def test_a_manifest_never_removes_a_file_outside_its_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    st = outside.stat()
    entry = {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    (out / MANIFEST_NAME).write_text(json.dumps({"files": [{"name": "../outside.txt", **entry},
                                                           {"name": str(outside), **entry}]}))
    (out / "summary.json").write_text("{}\n")
    assert record_outputs(out, [out / "summary.json"], {"written_by": "test"}, {"../outside.txt", str(outside)}) == []
    assert outside.read_text() == "precious\n"


# ---- item 7: a full disk -----------------------------------------------------------------

def _disk_fills_while_writing(df, path, table=None):
    with open(path, "w") as f:
        f.write("rank,start_s,")  # half a file, then the disk is full
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("earlier", [False, True])
def test_a_full_disk_names_the_file_exits_3_and_tears_nothing(tmp_path, monkeypatch, earlier):
    out = tmp_path / "out"
    if earlier:
        assert run(out, "--no-plots", "--trace", "none").exit_code == 0
    before = (out / "trace.csv").read_bytes() if earlier else None
    import sim3d.trace
    monkeypatch.setattr(sim3d.trace, "write_trace_csv", _disk_fills_while_writing)
    result = run(out, "--no-plots", "--trace", "none")
    assert result.exit_code == 3, result.output
    assert f"{out / 'trace.csv'}: No space left on device" in one_line(result.stderr)
    if earlier:
        assert (out / "trace.csv").read_bytes() == before
    else:
        assert not (out / "trace.csv").exists()
    assert temporaries(out) == []


def test_a_full_disk_in_plan_exits_3_naming_the_file(tmp_path, monkeypatch):
    import pandas as pd

    def full(self, path, *args, **kwargs):
        Path(path).write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    out = tmp_path / "out"
    result = plan(out, "--no-plots")
    assert result.exit_code == 3, result.output
    assert f"{out / 'candidates.csv'}: No space left on device" in one_line(result.stderr)
    assert not (out / "candidates.csv").exists() and temporaries(out) == []


def test_a_full_disk_on_a_file_the_user_names_exits_3_naming_it(tmp_path, monkeypatch):
    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(Path, "write_bytes", full)  # the temporary file schedule writes before its rename
    result = invoke("schedule", "1f1b", "--pp", 2, "-m", 4, "--csv", tmp_path / "s.csv")
    assert result.exit_code == 3, result.output
    assert f"{tmp_path / 's.csv'}: No space left on device (ENOSPC)" in one_line(result.stderr)


# ---- the second hostile pass -------------------------------------------------------------

def test_a_forged_manifest_cannot_remove_what_sim3d_does_not_write(tmp_path):
    """A manifest names the scenario being run and a user's notes with their exact size and
    mtime: neither is a name `run` writes, so neither is removed."""
    out = tmp_path / "m"
    out.mkdir()
    scenario = out / "exp.yaml"
    scenario.write_bytes(TINY.read_bytes())
    notes = out / "notes.txt"
    notes.write_text("mine\n")
    entries = [{"name": p.name, "bytes": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns} for p in (scenario, notes)]
    entries.append({"name": "\ud800x" + "y" * 300, "bytes": 1, "mtime_ns": 1})  # a name the OS cannot take
    (out / MANIFEST_NAME).write_text(json.dumps({"files": entries}))
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(out), "--no-plots", "--trace", "none"])
    assert result.exit_code == 0, result.output
    assert scenario.read_bytes() == TINY.read_bytes() and notes.read_text() == "mine\n"
    assert "removed" not in result.stderr


def test_a_hard_link_at_the_lock_is_refused_and_its_file_kept(tmp_path):
    """The lock is written in place (its holder's pid): through a second hard link it would
    change a file outside the folder."""
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    os.link(precious, out / LOCK_NAME)
    result = CliRunner().invoke(app, ["run", str(TINY), "--out", str(out), "--no-plots", "--trace", "none"])
    assert result.exit_code == 2 and "hard link" in result.stderr, result.output
    assert precious.read_text() == "precious\n"


def test_resuming_a_hard_linked_copy_of_a_sweep_leaves_the_original_alone(tmp_path):
    """`cp -al` (or an rsync --link-dest backup) of a sweep folder, resumed with more points:
    appending to the shared results.csv would add them to the original's table too."""
    original, copy = tmp_path / "a", tmp_path / "b"
    grid = ["--grid", "training.micro_batch=1,2"]
    assert CliRunner().invoke(app, ["sweep", str(TINY), *grid, "--workers", "1", "--out", str(original)]).exit_code == 0
    copy.mkdir()
    for path in original.iterdir():
        if path.is_file():
            os.link(path, copy / path.name)
    before = (original / "results.csv").read_bytes()
    result = CliRunner().invoke(app, ["sweep", str(TINY), "--grid", "training.micro_batch=1,2,4", "--workers", "1",
                                      "--out", str(copy), "--resume"])
    assert result.exit_code == 2 and "hard link" in result.stderr, result.output
    assert (original / "results.csv").read_bytes() == before


def test_plan_removes_the_plot_an_earlier_search_wrote_and_this_one_did_not(tmp_path):
    out = tmp_path / "plan"
    base = ["plan", str(TINY), "--gpus", "8", "--workers", "1", "--finalists", "2", "--out", str(out)]
    assert CliRunner().invoke(app, base).exit_code == 0 and (out / "plan.png").exists()
    (out / "mine.txt").write_text("kept\n")
    result = CliRunner().invoke(app, base + ["--no-plots"])
    assert result.exit_code == 0 and not (out / "plan.png").exists() and "plan.png" in result.stderr
    assert (out / "mine.txt").read_text() == "kept\n" and (out / "candidates.csv").exists()


def test_a_lock_taken_on_a_file_its_holder_removed_is_taken_again(tmp_path, monkeypatch):
    """Between opening the lock file and locking it, its holder may release it and remove the
    file: locking that file would lock nothing another process can see."""
    from sim3d.util import safe_files
    stale = tmp_path / LOCK_NAME
    stale.write_text("4242 run\n")
    stale_fd = os.open(stale, os.O_RDWR)
    os.unlink(stale)  # the holder's release
    real, calls = safe_files._lock_file, []
    open_before = len(os.listdir("/proc/self/fd"))

    def first_stale(folder, command):
        calls.append(command)
        return stale_fd if len(calls) == 1 else real(folder, command)
    monkeypatch.setattr(safe_files, "_lock_file", first_stale)
    lock = safe_files.folder_lock(tmp_path, "run")
    assert len(calls) == 2 and safe_files._same_file(tmp_path / LOCK_NAME, lock._fd)
    assert len(os.listdir("/proc/self/fd")) == open_before  # the stale one closed, the held one open
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_the_working_directory_and_the_root_are_no_output_folder(tmp_path, monkeypatch):
    """`--out .` was refused but `--out "$PWD"` and `--out /` were not: outputs landed among
    the user's files (or in /)."""
    monkeypatch.chdir(tmp_path)
    for folder in (str(tmp_path), "/", f"{tmp_path}/../{tmp_path.name}"):
        result = CliRunner().invoke(app, ["run", str(TINY), "--out", folder, "--no-plots"])
        assert result.exit_code == 2 and "name a folder of the outputs' own" in result.stderr, result.output
    assert list(tmp_path.iterdir()) == []


def test_import_replaces_a_file_only_with_force_and_never_through_a_link(tmp_path):
    """`sim3d import nemo X.yaml --out X.yaml` replaced the user's config with the scenario."""
    args = ["import", "megatron", "--gpu", "a100-80gb", "--gpus", "8", "--", "--num-layers", "4", "--hidden-size", "256",
            "--num-attention-heads", "4", "--seq-length", "512", "--micro-batch-size", "1", "--global-batch-size", "8"]
    mine = tmp_path / "mine.yaml"
    mine.write_text("my: config\n")
    refused = CliRunner().invoke(app, [*args[:2], "--out", str(mine), *args[2:]])
    assert refused.exit_code == 2 and "only with --force" in refused.stderr, refused.output
    assert mine.read_text() == "my: config\n"
    forced = CliRunner().invoke(app, [*args[:2], "--out", str(mine), "--force", *args[2:]])
    assert forced.exit_code == 0, forced.output
    assert "written by `sim3d import`" in mine.read_text()
    precious = tmp_path / "precious.yaml"
    precious.write_text("precious\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(precious)
    through = CliRunner().invoke(app, [*args[:2], "--out", str(link), "--force", *args[2:]])
    assert through.exit_code == 2 and precious.read_text() == "precious\n", through.output


def test_schedule_writes_no_file_through_a_link_or_into_a_fifo(tmp_path):
    """schedule --csv/--gantt/--out wrote in place: through a symlink, or blocking on a FIFO."""
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    (tmp_path / "link.csv").symlink_to(precious)
    os.mkfifo(tmp_path / "fifo.png")
    for option, path in (("--csv", "link.csv"), ("--gantt", "fifo.png")):
        result = CliRunner().invoke(app, ["schedule", "1f1b", "--pp", "2", "-m", "4", option, str(tmp_path / path)])
        assert result.exit_code == 2 and "regular files" in result.stderr, result.output
    compare = CliRunner().invoke(app, ["schedule", "--compare", "1f1b,zb-h1", "--pp", "2", "-m", "4", "--out",
                                       str(tmp_path / "fifo.png")])
    assert compare.exit_code == 2 and "regular files" in compare.stderr, compare.output
    assert precious.read_text() == "precious\n"
    written = CliRunner().invoke(app, ["schedule", "1f1b", "--pp", "2", "-m", "4", "--csv", str(tmp_path / "s.csv")])
    assert written.exit_code == 0 and "rank,index,kind" in (tmp_path / "s.csv").read_text()
    stdout = CliRunner().invoke(app, ["schedule", "1f1b", "--pp", "2", "-m", "4", "--csv", "-"])
    assert stdout.exit_code == 0 and "rank,index,kind" in stdout.stdout


def test_a_goodput_beside_a_run_keeps_the_runs_files_listed(tmp_path):
    """goodput (or study) into a run's folder replaced its manifest: the next run no longer knew
    its old plots from the user's files and left them beside the new summary."""
    out = tmp_path / "out"
    assert run(out).exit_code == 0
    assert (out / "gantt.png").exists()
    beside = CliRunner().invoke(app, ["goodput", str(TINY), "--out", str(out), "--no-plots"])
    assert beside.exit_code == 0, beside.output
    again = run(out, "--no-plots", "--trace", "none")
    assert again.exit_code == 0, again.output
    assert not (out / "gantt.png").exists() and (out / "goodput.csv").exists()

"""Sweep results survive kills, torn lines, changed grids and a second sweep in the same
folder (issue 12, class 1); one broken point costs only its own row."""

import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "tiny.yaml"
GRID = ["--grid", "cluster.inter_node.nic_gbps=50,100,200", "--grid", "training.micro_batch=1,2,4"]
RESULT_COLUMNS = ["label", "step_time_s", "mfu", "bubble_fraction", "peak_memory_gib", "error"]
cli = CliRunner()


def sweep(out, *extra, scenario=TINY, grid=GRID):
    return cli.invoke(app, ["sweep", str(scenario), *grid, "--out", str(out), "--workers", "1", *extra],
                      catch_exceptions=False)


def rows(out) -> pd.DataFrame:
    table = pd.read_csv(out / "results.csv", dtype=str, keep_default_na=False)
    return table[RESULT_COLUMNS].sort_values("label").reset_index(drop=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    assert sweep(out).exit_code == 0
    return rows(out)


def test_a_torn_last_line_is_cut_and_recomputed(tmp_path, reference):
    assert sweep(tmp_path).exit_code == 0
    text = (tmp_path / "results.csv").read_text().splitlines(keepends=True)
    (tmp_path / "results.csv").write_text("".join(text[:-1]) + text[-1][:17])  # killed mid-row
    result = sweep(tmp_path, "--resume")
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(rows(tmp_path), reference)


@pytest.mark.parametrize("left", ["", "header"])
def test_killed_before_the_first_point_resumes(tmp_path, reference, left):
    assert sweep(tmp_path).exit_code == 0
    header = (tmp_path / "results.csv").read_text().splitlines(keepends=True)[0]
    (tmp_path / "results.csv").write_text(header if left == "header" else "")
    assert sweep(tmp_path, "--resume").exit_code == 0
    pd.testing.assert_frame_equal(rows(tmp_path), reference)


def test_resume_refuses_another_grid_or_a_changed_scenario(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(TINY.read_text())
    out = tmp_path / "out"
    assert sweep(out, scenario=scenario).exit_code == 0
    result = sweep(out, "--resume", scenario=scenario, grid=["--grid", "training.micro_batch=1,2"])
    assert result.exit_code == 2 and "this folder holds a sweep over" in result.stderr
    before = (out / "results.csv").read_bytes()
    scenario.write_text(TINY.read_text().replace("layers: 4", "layers: 8"))
    result = sweep(out, "--resume", scenario=scenario)
    assert result.exit_code == 2 and "scenario_sha256" in result.stderr
    assert (out / "results.csv").read_bytes() == before
    # more values of the same keys is a resumable extension of the same study
    scenario.write_text(TINY.read_text())
    grid = ["--grid", "cluster.inter_node.nic_gbps=50,100,200,400", "--grid", "training.micro_batch=1,2,4"]
    assert sweep(out, "--resume", scenario=scenario, grid=grid).exit_code == 0
    assert len(rows(out)) == 12


def test_resume_refuses_a_calibration_profile_edited_since_the_sweep_started(tmp_path):
    """The scenario file is unchanged, but the profile it names was edited: the rows already in
    results.csv were priced by the old profile."""
    profile = tmp_path / "p.csv"
    profile.write_bytes((ROOT / "calibrate" / "profiles" / "cpu-amd-epyc.csv").read_bytes())
    scenario = tmp_path / "s.yaml"
    scenario.write_text(TINY.read_text() + f"costs:\n  profile: {profile}\n")
    out = tmp_path / "out"
    assert sweep(out, scenario=scenario).exit_code == 0
    before = (out / "results.csv").read_bytes()
    original = profile.read_bytes()
    lines = original.splitlines(keepends=True)
    profile.write_bytes(lines[0] + b"".join(lines[2:]) + lines[1])  # same rows, another order: other bytes
    result = sweep(out, "--resume", scenario=scenario)
    assert result.exit_code == 2 and str(profile) in result.stderr and "changed" in result.stderr
    assert (out / "results.csv").read_bytes() == before
    profile.write_bytes(original)  # restored: the study is the same again
    assert sweep(out, "--resume", scenario=scenario).exit_code == 0


def test_a_second_sweep_on_the_same_folder_is_refused(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    fd = os.open(tmp_path / ".sim3d.lock", os.O_RDWR | os.O_CREAT)  # one lock per folder, for every command
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        result = sweep(tmp_path)
    finally:
        os.close(fd)
    assert result.exit_code == 2 and "another sim3d command is writing here" in result.stderr
    assert not (tmp_path / "results.csv").exists()


def test_a_point_that_crashes_becomes_an_error_row(tmp_path, monkeypatch):
    import sim3d.api
    replay = sim3d.api.replay_step

    def broken_for_micro_batch_2(s, **kwargs):  # a bug that only some points reach
        if s.training.micro_batch == 2:
            raise ZeroDivisionError("division by zero")
        return replay(s, **kwargs)
    monkeypatch.setattr(sim3d.api, "replay_step", broken_for_micro_batch_2)
    result = sweep(tmp_path)
    assert result.exit_code == 0, result.output
    table = rows(tmp_path)
    broken = table[table["label"].str.contains("micro_batch=2")]
    assert len(table) == 9 and len(broken) == 3
    assert broken["error"].str.startswith("internal error: ZeroDivisionError").all()
    assert (table.drop(broken.index)["error"] == "").all()
    assert "3 of 9 grid points failed" in result.stderr


def test_an_all_error_sweep_is_bad_input(tmp_path):
    result = sweep(tmp_path, grid=["--grid", "parallel.tp=3,5"])
    assert result.exit_code == 2 and "every one of the 2 grid points failed" in result.stderr


def test_grid_values_may_hold_commas_in_brackets(tmp_path):
    from sim3d.studies.sweep import parse_grid
    grid = parse_grid(['name=["a,b", c]', "parallel.order=[tp-cp-ep-dp-pp, dp-tp-cp-ep-pp]"])
    assert grid == {"name": ["a,b", "c"], "parallel.order": ["tp-cp-ep-dp-pp", "dp-tp-cp-ep-pp"]}
    result = sweep(tmp_path, grid=["--grid", 'name=["a,b", c]'])
    assert result.exit_code == 0 and sorted(rows(tmp_path)["label"]) == ["name=a,b", "name=c"]


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return found


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_sigkill_at_random_moments_then_resume_gives_the_uninterrupted_rows(tmp_path):
    gpt3 = ROOT / "scenarios" / "gpt3.yaml"  # ~0.5 s a point: kills land between and inside points
    grid = ["--grid", "cluster.inter_node.nic_gbps=25,50,100,200,400,800"]
    assert sweep(tmp_path / "reference", scenario=gpt3, grid=grid).exit_code == 0
    reference = rows(tmp_path / "reference")
    out = tmp_path / "killed"
    rng = random.Random(12)
    command = [sys.executable, "-m", "sim3d.cli", "sweep", str(gpt3), *grid, "--out", str(out), "--workers", "2"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kills = mid_sweep = 0
    # attempt 0 is killed just after its first row; 1-3 a random moment after their first new
    # row (inside the next point, or between points), so that how fast this machine runs a
    # point does not decide whether a kill lands; 4 runs to the end
    for attempt in range(5):
        rows_before = _lines(out / "results.csv")
        proc = subprocess.Popen(command + (["--resume"] if attempt else []), cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        workers: set[int] = set()
        while proc.poll() is None and time.monotonic() < deadline:
            workers |= _children(proc.pid)
            if attempt == 0 and _lines(out / "results.csv") >= 2:
                break
            if attempt in (1, 2, 3) and _lines(out / "results.csv") > rows_before:
                deadline = min(deadline, time.monotonic() + rng.uniform(0.0, 0.25))
                rows_before = float("inf")  # the kill moment is set once
            time.sleep(0.02)
        if proc.poll() is not None:
            assert proc.returncode == 0, proc.stderr.read().decode()
            if attempt == 4:
                break
            continue
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        mid_sweep += 1 < _lines(out / "results.csv") <= len(reference)
        end = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < end:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "pool workers outlived their killed parent"
    assert kills >= 2 and mid_sweep >= 1, (kills, mid_sweep)
    pd.testing.assert_frame_equal(rows(out), reference)


def _dies_on_b(job):
    if job[0] == "b":
        os._exit(9)  # a worker killed mid-point (out of memory, a signal)
    return job[0], {"error": ""}


def test_a_point_that_kills_its_worker_becomes_an_error_row_and_no_other_does(monkeypatch):
    from sim3d.studies import runner
    monkeypatch.setattr(runner, "simulate_job", _dies_on_b)
    results = dict(runner.run_jobs([(name, "", ()) for name in "abcd"], workers=2))
    assert sorted(results) == ["a", "b", "c", "d"]  # every job answers exactly once
    assert results["b"]["error"].startswith("internal error: the worker process died")
    assert all(results[n]["error"] == "" for n in "acd")


def _slow_job_with_marker(job):
    time.sleep(0.2)
    Path(job[1], job[0]).write_text("done")
    return job[0], {"error": ""}


def test_leaving_a_sweep_early_stops_its_queued_points(tmp_path, monkeypatch):
    """Ctrl-C, or an error while saving a row, used to let every queued point run to the end."""
    from sim3d.studies import runner
    monkeypatch.setattr(runner, "simulate_job", _slow_job_with_marker)
    results = runner.run_jobs([(f"p{i}", str(tmp_path), ()) for i in range(40)], workers=2)
    next(results)
    results.close()  # what a KeyboardInterrupt in the consumer does to the generator
    time.sleep(1.0)  # long enough for several more points, had the pool carried on
    assert len(list(tmp_path.iterdir())) < 10


def test_resume_refuses_a_table_whose_study_record_is_lost_and_reruns_dead_worker_rows(tmp_path, reference):
    from sim3d.studies.runner import WORKER_DIED
    assert sweep(tmp_path).exit_code == 0
    lines = (tmp_path / "results.csv").read_text().splitlines(keepends=True)
    label = lines[3].split(",")[0]
    lines[3] = f"{label}{',' * (lines[0].count(','))}\n".replace(",\n", f",{WORKER_DIED}\n")
    (tmp_path / "results.csv").write_text("".join(lines))
    (tmp_path / "sweep.json").write_text("{not json")
    result = sweep(tmp_path, "--resume")
    assert result.exit_code == 2 and "cannot be matched" in result.stderr
    (tmp_path / "sweep.json").unlink()
    assert sweep(tmp_path / "fresh").exit_code == 0
    (tmp_path / "sweep.json").write_text((tmp_path / "fresh" / "sweep.json").read_text())
    assert sweep(tmp_path, "--resume").exit_code == 0
    pd.testing.assert_frame_equal(rows(tmp_path), reference)  # the dead-worker row ran again, once


def test_outputs_in_the_working_directory_are_fine_for_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli.invoke(app, ["schedule", "1f1b", "--pp", "2", "-m", "4", "--csv", "s.csv"], catch_exceptions=False)
    assert result.exit_code == 0 and (tmp_path / "s.csv").exists()


def test_ray_jobs_carry_the_scenario_and_respect_workers(monkeypatch):
    """Ray workers may run on machines without this file system: each task gets the
    scenario's contents, and no more than --workers tasks are in flight (a stand-in `ray`
    module runs the tasks in this process and records what it was given)."""
    import types
    from sim3d.studies import runner
    seen, in_flight, peak = [], [], [0]

    class Ref:
        def __init__(self, job):
            self.job = job

    def remote_fn(fn):
        def submit(job):
            seen.append(job)
            in_flight.append(1)
            peak[0] = max(peak[0], len(in_flight))
            return Ref(job)
        return types.SimpleNamespace(remote=submit)

    def wait(pending, num_returns=1):
        in_flight.pop()
        return pending[:1], pending[1:]

    fake = types.SimpleNamespace(init=lambda **kw: None, remote=remote_fn, wait=wait,
                                 get=lambda ref: runner.simulate_job(ref.job))
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(runner, "check_backend", lambda backend: None)  # Ray itself is not installed here
    path = str(ROOT / "scenarios" / "tiny.yaml")
    jobs = [(str(i), path, (f"training.global_batch={8 * (i + 1)}",)) for i in range(5)]
    results = dict(runner.run_jobs(jobs, workers=2, backend="ray"))
    assert sorted(results) == ["0", "1", "2", "3", "4"] and all(not r["error"] for r in results.values())
    assert all(isinstance(job[1], dict) and job[1]["name"] == "tiny" for job in seen)
    assert peak[0] == 2


def test_set_applies_to_every_grid_point_and_belongs_to_the_study(tmp_path):
    """`sweep --set` changes the base of every point; resumed without it, the folder's rows
    would mix two studies."""
    grid = ["--grid", "training.micro_batch=1,2"]
    assert sweep(tmp_path / "s", "--set", "training.recompute=full", grid=grid).exit_code == 0
    assert sweep(tmp_path / "p", grid=grid).exit_code == 0
    with_set, plain = rows(tmp_path / "s"), rows(tmp_path / "p")
    assert (with_set["error"] == "").all() and list(with_set["label"]) == list(plain["label"])
    assert all(a != b for a, b in zip(with_set["step_time_s"], plain["step_time_s"]))
    again = sweep(tmp_path / "s", "--resume", grid=grid)
    assert again.exit_code == 2 and "set was ['training.recompute=full']" in again.stderr, again.output


def test_a_grid_too_large_is_refused_without_listing_it(tmp_path):
    """10^8 points reached 5.5 GB in 60 s, printing nothing: they were listed before they were
    counted."""
    keys = ["cluster.inter_node.nic_gbps", "training.micro_batch", "training.global_batch", "cluster.inter_node.latency_us",
            "cluster.intra_node.latency_us", "cluster.intra_node.gbps", "cluster.nodes", "model.layers"]
    grid = [arg for key in keys for arg in ("--grid", f"{key}={','.join(str(j + 1) for j in range(10))}")]
    result = cli.invoke(app, ["sweep", str(TINY), *grid, "--out", str(tmp_path / "big")])
    assert result.exit_code == 2 and "100,000,000" in result.stderr, result.output
    assert not (tmp_path / "big").exists()


def test_a_resumed_sweep_says_how_many_points_it_read_back(tmp_path):
    """The README's `--resume` into a committed folder simulated nothing and said nothing of it."""
    out = tmp_path / "s"
    assert sweep(out, grid=["--grid", "training.micro_batch=1,2"]).exit_code == 0
    again = sweep(out, "--resume", grid=["--grid", "training.micro_batch=1,2"])
    assert again.exit_code == 0 and "2 of the 2 grid points were read from" in again.stderr
    assert "0 simulated now" in again.stderr


def test_sweep_chooses_its_folder_as_the_other_commands_do(tmp_path, monkeypatch):
    """--out was required only on sweep; it defaults to reports/<name>-sweep/ like run's and plan's."""
    monkeypatch.chdir(tmp_path)
    done = cli.invoke(app, ["sweep", str(TINY), "--grid", "training.micro_batch=1,2", "--workers", "1"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "reports" / "tiny-sweep" / "results.csv").is_file()


def test_a_stopped_worker_is_killed_not_waited_for(monkeypatch):
    """Issue 49 re-run, defect D: a sweep whose pool worker was stopped with SIGSTOP waited for
    it forever. The worker is killed, which breaks its pool: its point runs again (or becomes
    an error row), as after any other death of a worker."""
    import os
    import signal
    import time
    from concurrent.futures import ProcessPoolExecutor
    from sim3d.studies import runner
    monkeypatch.setattr(runner, "STOPPED_POLL_S", 0.2)
    pool = ProcessPoolExecutor(max_workers=1)
    try:
        future = pool.submit(time.sleep, 60)
        deadline = time.monotonic() + 30
        while not pool._processes and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(next(iter(pool._processes)), signal.SIGSTOP)
        assert list(runner._outcomes({future: ("point",)}, [pool])) == [(("point",), None)]
        from concurrent.futures.process import BrokenProcessPool
        assert isinstance(future.exception(), BrokenProcessPool)  # killed, not waited out for 60 s
    finally:
        pool.shutdown(wait=False, cancel_futures=True)

"""The `sim3d` command ends without the interpreter's teardown (cli/app.py exit_now): what it
prints is all there, its files are whole, exit handlers run, and the status is sys.exit's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# block-buffered standard streams, as a pipe gives them: with PYTHONUNBUFFERED (set in some CI and
# container images) every write reaches the pipe at once and an unflushed exit would pass
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def sim3d(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sim3d", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=BUFFERED)


def test_a_run_prints_and_writes_everything_before_it_ends(tmp_path):
    done = sim3d("run", "scenarios/tiny.yaml", "--json", "--no-plots", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # the whole document reached the pipe
    assert json.loads((tmp_path / "summary.json").read_text())["step_time_s"] == summary["step_time_s"]
    assert (tmp_path / "trace.csv").read_text().count("\n") > 10


@pytest.mark.parametrize("args, status", [(("run", "missing.yaml"), 2), (("--version",), 0)])
def test_the_status_is_the_commands(args, status):
    done = sim3d(*args)
    assert done.returncode == status
    assert (done.stderr if status else done.stdout).strip()  # its message was flushed


def test_exit_handlers_run_and_a_message_exits_1(tmp_path):
    code = ("import atexit, pathlib, sys\n"
            "from sim3d.cli.app import exit_now\n"
            f"atexit.register(pathlib.Path({str(tmp_path / 'ran')!r}).write_text, 'yes')\n"
            "print('buffered', end='')\n"
            "exit_now('a message')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=BUFFERED)
    assert (done.returncode, done.stdout, done.stderr.strip()) == (1, "buffered", "a message")
    assert (tmp_path / "ran").read_text() == "yes"


def test_a_reader_that_leaves_early_does_not_cut_the_run_short(tmp_path):
    """`sim3d run ... | head -2`: the run still writes every output and exits 0; only what it
    would have printed after the pipe closed is lost."""
    out = tmp_path / "out"
    command = [str(Path(sys.executable).parent / "sim3d"), "run", str(ROOT / "scenarios" / "tiny.yaml"), "--out",
               str(out), "--no-plots"]
    unbuffered = dict(os.environ, PYTHONUNBUFFERED="1")  # every print reaches the pipe, and so the EPIPE
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=unbuffered) as run:
        first = run.stdout.readline()
        run.stdout.close()  # the reader leaves after one line
        stderr = run.stderr.read()
        status = run.wait(timeout=120)
    assert first.startswith(b"sim3d: tiny")
    assert status == 0, stderr
    assert {"summary.json", "trace.csv", "links.csv"} <= {p.name for p in out.iterdir()}

"""The output process of `sim3d run` (sim3d/report/beside.py): its files, its errors and its
death all reach the caller, and an unused one stops cleanly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sim3d.report import beside


@pytest.fixture(params=[False, True], ids=["forked", "serial"])
def serial(request, monkeypatch):
    monkeypatch.setattr(beside, "_SERIAL", request.param)
    if not request.param and not beside.can_fork():
        pytest.skip("no fork on this platform")
    return request.param


def write_pid(path: Path) -> None:
    path.write_text(str(os.getpid()))


def refuse(message: str) -> None:
    raise ValueError(message)


def test_the_job_runs_with_its_arguments_and_its_files_are_there_when_waited_for(tmp_path, serial):
    process = beside.Beside(preload=["json"])
    process.submit(write_pid, tmp_path / "drawn.txt")
    process.wait()
    assert (int((tmp_path / "drawn.txt").read_text()) != os.getpid()) == (not serial)  # forked: another process
    process.close()  # after the job: nothing to stop


def test_an_error_is_raised_again_with_the_processs_traceback(serial):
    process = beside.Beside()
    process.submit(refuse, "nothing runs in the window")
    with pytest.raises(ValueError, match="nothing runs in the window") as caught:
        process.wait()
    if not serial:
        assert any("in the output process" in note and "refuse" in note for note in caught.value.__notes__)


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("no")


def raise_unpicklable() -> None:
    raise Unpicklable("odd")


def test_an_error_that_does_not_pickle_still_arrives_as_text(serial):
    if serial:
        pytest.skip("in one process the error is the original")
    process = beside.Beside()
    process.submit(raise_unpicklable)
    with pytest.raises(RuntimeError, match="Unpicklable: odd"):
        process.wait()


def test_a_process_that_dies_is_reported_with_its_exit_code(serial):
    if serial:
        pytest.skip("nothing to die")
    process = beside.Beside()
    process.submit(os._exit, 3)
    with pytest.raises(RuntimeError, match="exit code 3"):
        process.wait()


def test_a_process_never_given_a_job_stops_on_close(serial):
    process = beside.Beside(preload=["json"])
    process.close()
    if not serial:
        assert process._process.exitcode == 0
    with pytest.raises(RuntimeError, match="nothing was submitted"):
        process.wait()


def test_a_failed_preload_is_reported_when_waited_for(serial):
    if serial:
        pytest.skip("nothing is preloaded in one process")
    process = beside.Beside(preload=["sim3d_no_such_module"])
    process.submit(write_pid, Path("unused"))
    with pytest.raises(ModuleNotFoundError, match="sim3d_no_such_module"):
        process.wait()

"""`--backend ray` on a real local Ray instance (issue 51): a sweep and a Monte Carlo run give
exactly what the local backend gives. Ray comes with `.[dev]` (pyproject.toml); the instance is
started once for the module, two CPUs, and sim3d's `ray.init(ignore_reinit_error=True)` joins it,
as it joins a cluster named by RAY_ADDRESS (docs/commands.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app


ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "scenarios" / "tiny.yaml")
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def ray_instance():
    """Imported here, not at collection: a process that has imported Ray no longer forks its
    plotting process (report/beside.can_fork), and the tests before these need it to."""
    global ray
    ray = pytest.importorskip("ray", reason="Ray is installed by .[dev]; without it the ray backend is refused")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture
def remotes(monkeypatch):
    """The functions sim3d hands to Ray as tasks, by name: proof the work went to Ray."""
    made = []
    real = ray.remote

    def remote(function):
        made.append(function.__name__)
        return real(function)
    monkeypatch.setattr(ray, "remote", remote)
    return made


def _sweep(folder: Path, backend: str) -> pd.DataFrame:
    ran = runner.invoke(app, ["sweep", TINY, "--grid", "training.micro_batch=1,2,4", "--grid",
                              "training.recompute=none,full", "--backend", backend, "--workers", "2",
                              "--out", str(folder)])
    assert ran.exit_code == 0, ran.output
    return pd.read_csv(folder / "results.csv").sort_values("label").reset_index(drop=True)


def test_a_sweep_on_ray_is_the_local_sweep(tmp_path, remotes):
    on_ray = _sweep(tmp_path / "ray", "ray")
    assert remotes == ["simulate_job"]
    local = _sweep(tmp_path / "local", "local")
    assert len(on_ray) == 6 and (on_ray["error"].isna()).all()
    pd.testing.assert_frame_equal(on_ray, local)


def test_monte_carlo_samples_on_ray_are_the_local_samples(tmp_path, remotes):
    def samples(backend: str) -> pd.DataFrame:
        folder = tmp_path / backend
        ran = runner.invoke(app, ["run", TINY, "--set", "variability.jitter.lognormal_sigma=0.05", "--samples", "64",
                                  "--seed", "7", "--workers", "2", "--backend", backend, "--no-plots", "--trace",
                                  "none", "--out", str(folder)])
        assert ran.exit_code == 0, ran.output
        return pd.read_csv(folder / "samples.csv")
    on_ray = samples("ray")
    assert remotes == ["_ray_chunk"]
    pd.testing.assert_frame_equal(on_ray, samples("local"))

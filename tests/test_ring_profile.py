"""A context-parallel ring priced from a profile's own send/recv (docs/calibration.md, the CPU
loop): each of its cp-1 steps is one exchange of a step's bytes between two ranks, as the
profile measured it, not the cluster preset's NVLink."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d import simulate
from sim3d.costs.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "calibrate" / "profiles" / "cpu-amd-epyc-tiny.csv"
TINY = ROOT / "scenarios" / "tiny.yaml"


@pytest.mark.parametrize("cp", [2, 4])
def test_each_ring_step_costs_the_profiles_send_recv_of_its_bytes(cp):
    result = simulate(TINY, sets=[f"parallel.cp={cp}", f"costs.profile={PROFILE}", f"cluster.gpus_per_node={cp}"])
    profile = load_profile(result.scenario)
    costs = result.costs
    step_bytes = 24_576.0  # any size inside the profile's measured range
    measured = profile.collective_seconds("send_recv", step_bytes, 2)
    assert measured is not None and measured > 1e-5  # a CPU's send/recv: tens of microseconds or more
    assert costs._collective("ring", step_bytes * (cp - 1), "cp") == pytest.approx((cp - 1) * measured, rel=1e-12)
    assert ("cp collectives", "profile") in [(what, source.split()[0]) for what, source in result.explain()]


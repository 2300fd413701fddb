"""One transformer layer on a real H100 beside sim3d's prediction for it.

    python benchmarks/layer_check.py [STUDY_DIR]

Reads what ``calibrate.layer_bench`` measured (``layers.json``: one layer shard per scenario,
forward + backward, cold = boost clock after an idle pause, hot = after 20 s of steps at the
power limit) and prints, per scenario, the compute-only layer time that sim3d predicts from
its analytical model and from the measured kernel profile beside it. Communication is left
out on both sides. The measured layer is eager PyTorch (one kernel per op), so its norms and
activations are slower than Transformer Engine's fused ones: a prediction a few percent under
"hot" is what a faithful model of NeMo should give.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from sim3d.costs.cost_model import CostModel
from sim3d.costs.profile import Profile
from sim3d.model.ops import layer_ops
from sim3d.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "calibrate" / "profiles" / "h100-sxm5-80gb-study"
PROFILE = ROOT / "calibrate" / "profiles" / "h100-sxm5-80gb.csv"


def layer_ms(scenario, profile=None) -> float:
    compute = CostModel(scenario, profile=profile).compute_model
    total = 0.0
    for op in layer_ops(scenario):
        t = compute.op_time(op)
        total += t.fwd + t.bwd_input + t.bwd_weight
    return total * 1e3


def main(argv: list[str]) -> int:
    study = Path(argv[0]) if argv else DEFAULT
    layers = json.loads((study / "layers.json").read_text())["layers"]
    profile = Profile.load(PROFILE)
    print(f"{'scenario (one layer shard, fwd+bwd, ms)':42} {'cold':>7} {'hot':>7} {'analytic':>9} {'/hot':>6} "
          f"{'profile':>8} {'/hot':>6}")
    for row in layers:
        path = Path(row["scenario"])
        if not path.is_absolute() and not (ROOT / path).exists():
            path = study / "scenarios" / path.name
        s = load_scenario(ROOT / path if not path.is_absolute() else path)
        cold = row["cold"]["fwd_ms"] + row["cold"]["bwd_ms"]
        hot = row["hot"]["fwd_ms"] + row["hot"]["bwd_ms"]
        a, p = layer_ms(s), layer_ms(s, profile)
        label = f"{s.name} (tp{s.tp} cp{s.cp})"
        print(f"{label:42} {cold:7.2f} {hot:7.2f} {a:9.2f} {a / hot - 1:+6.1%} {p:8.2f} {p / hot - 1:+6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

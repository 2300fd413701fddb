"""Every prediction sim3d ships, in one file: shows that a refactor changed none of them.

    python benchmarks/prediction_fingerprint.py            # compare with prediction_fingerprint.json
    python benchmarks/prediction_fingerprint.py --write    # record today's predictions

For each shipped scenario it records the summary (less wall time and version), the memory
table, the `--explain` sources and SHA-256 digests of the trace and link tables; for each
validation CSV the predicted value and note of every row (`python -m sim3d.validation --out`);
for a few plans (PLANS) the picks `sim3d plan` ranks.
Floats are written with `repr`, so "identical" means bit for bit. Goes through the public
seams only (`sim3d.simulate`, `python -m sim3d.validation`, `sim3d plan`), so it runs unchanged across a
reorganisation of the package.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

import sim3d

ROOT = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).with_suffix(".json")
UNSTABLE = {"sim_wall_s", "sim3d_version"}


def _digest(frame: pd.DataFrame) -> str:
    return hashlib.sha256(frame.to_csv(index=False, float_format="%r").encode()).hexdigest()


def scenario_fingerprint(path: Path) -> dict:
    result = sim3d.simulate(path)
    summary = {k: v for k, v in result.summary.items() if k not in UNSTABLE}
    memory = [{k: repr(v) for k, v in vars(row).items()} for row in result.memory.rows]
    return {"summary": json.loads(json.dumps(summary, default=repr)), "memory": memory,
            "fits": result.memory.fits, "explain": [list(pair) for pair in result.explain()],
            "trace_sha256": _digest(result.trace), "links_sha256": _digest(result.links)}


def validation_fingerprint(csv: Path) -> list[list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.csv"
        subprocess.run([sys.executable, "-m", "sim3d.validation", str(csv), "--out", str(out)],
                       check=True, capture_output=True, cwd=ROOT)
        rows = pd.read_csv(out, dtype=str, keep_default_na=False)
    return rows[["id", "metric", "predicted", "note"]].values.tolist()


# plans whose picks are recorded: the ranked layouts and their simulated steps (a dense model
# on one node and on 64 GPUs, and an MoE one; the finalists are few to keep this quick)
PLANS = (("scenarios/llama3.1-8b.yaml", 8), ("scenarios/gpt-13b.yaml", 64), ("scenarios/moe-1024.yaml", 128))
PICKED = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "schedule", "recompute", "sequence_parallel", "zero",
          "tp_comm_overlap", "order", "dp_shard", "step_time_s", "est_step_s")


def plan_fingerprint(scenario: str, gpus: int) -> list[list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "sim3d", "plan", scenario, "--gpus", str(gpus), "--finalists", "20",
                               "--top", "10", "--json", "--no-plots", "--out", tmp], check=True, capture_output=True,
                              text=True, cwd=ROOT)
    return [[repr(row[k]) for k in PICKED] for row in json.loads(done.stdout)["ranked"]]


def fingerprint() -> dict:
    record = {}
    for scenario, gpus in PLANS:
        print(f"  plan {scenario} --gpus {gpus}", file=sys.stderr)
        record[f"plan {scenario} --gpus {gpus}"] = plan_fingerprint(scenario, gpus)
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        print(f"  {path.name}", file=sys.stderr)
        record[f"scenarios/{path.name}"] = scenario_fingerprint(path)
    for csv in sorted((ROOT / "validation").glob("published_*.csv")):
        print(f"  {csv.name}", file=sys.stderr)
        record[f"validation/{csv.name}"] = validation_fingerprint(csv)
    return record


def _differences(old: dict, new: dict) -> list[str]:
    lines = []
    for key in sorted(old.keys() | new.keys()):
        if key not in old or key not in new:
            lines.append(f"{key}: only in the {'new' if key in new else 'recorded'} predictions")
        elif old[key] != new[key]:
            a, b = json.dumps(old[key], indent=1).splitlines(), json.dumps(new[key], indent=1).splitlines()
            changed = [f"    was {x.strip()}\n    now {y.strip()}" for x, y in zip(a, b) if x != y][:5]
            lines.append(f"{key} differs:\n" + "\n".join(changed))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record today's predictions")
    args = parser.parse_args()
    new = fingerprint()
    if args.write:
        RECORD.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(new)} scenarios and validation files in {RECORD.relative_to(ROOT)}")
        return 0
    differences = _differences(json.loads(RECORD.read_text()), json.loads(json.dumps(new, sort_keys=True)))
    if differences:
        print("\n".join(differences))
        print(f"{len(differences)} of {len(new)} predictions differ from {RECORD.relative_to(ROOT)}")
        return 1
    print(f"all {len(new)} predictions identical to {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

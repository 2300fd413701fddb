"""Where NVIDIA's published layouts rank in `sim3d plan` (issue 14).

For the dev-visible NVIDIA runs of ../shared/validation/published_dev.csv (GPT-3 175B on 128
H100, Llama 3.1 70B on 64 H100, Nemotron-4 15B on 16 H100), the model, GPU count, global
batch and software settings are fixed as the validation scenario has them, and the planner
searches everything else, once over every schedule and once over the two Megatron-LM itself
runs (1f1b, interleaved-1f1b). The published layout is then simulated too and ranked among
the planner's finalists by simulated step (ties, such as a rank order that changes nothing,
share a rank).

    python benchmarks/plan_published.py [--finalists 100]
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from pathlib import Path

import yaml

from sim3d import simulate
from sim3d.validation.published_row import scenario_dict_of
from sim3d.studies.plan import describe, plan
from sim3d.studies.space import parse_choices
from sim3d.validation.published import DEFAULT_CSV

RUNS = ("dgxc2411_gpt3_175b_128", "dgxc2411_llama31_70b_64", "dgxc2411_nemotron4_15b_16")


def published_layout(scenario: dict) -> dict:
    p, t = scenario["parallel"], scenario["training"]
    return {"tp": p.get("tp", 1), "pp": p.get("pp", 1), "dp": p.get("dp"), "cp": p.get("cp", 1), "ep": p.get("ep", 1),
            "vpp": p.get("vpp", 1), "micro_batch": t.get("micro_batch", 1), "schedule": scenario.get("schedule", "1f1b"),
            "recompute": t.get("recompute", "none")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finalists", type=int, default=100)
    args = parser.parse_args()
    rows = {r["id"]: r for r in csv.DictReader(open(DEFAULT_CSV))}
    print("| run | published layout | simulated | rank, every schedule | best, every schedule | "
          "rank, Megatron-LM schedules | best, Megatron-LM schedules | estimate error (median, worst) |")
    print("|---|---|---:|---:|---|---:|---|---|")
    megatron = parse_choices([], ["schedule=1f1b,interleaved-1f1b"])
    with tempfile.TemporaryDirectory() as tmp:
        for run in RUNS:
            scenario = scenario_dict_of(rows[run])
            path = Path(tmp) / f"{run}.yaml"
            path.write_text(yaml.safe_dump(scenario))
            gpus = int(rows[run]["num_gpus"])
            published = simulate(path).step_time
            cells, errors = [], []
            for choices in ({}, megatron):
                result = plan(path, gpus, choices, finalists=args.finalists)
                steps = result.finalists["step_time_s"].dropna()
                rank = int((steps < published * (1 - 1e-9)).sum()) + 1
                best = result.finalists.iloc[0]
                cells += [f"{rank} of {len(steps) + 1}", f"{describe(best)} {best['step_time_s']:.3f} s"]
                err = result.estimate_error()
                errors.append(f"{err['median']:.1%}, {err['worst']:+.1%}")
            print(f"| {run} ({gpus} GPUs) | {describe(published_layout(scenario))} | {published:.3f} s | "
                  + " | ".join(cells) + f" | {'; '.join(errors)} |")


if __name__ == "__main__":
    main()

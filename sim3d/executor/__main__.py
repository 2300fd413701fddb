"""`python -m sim3d.executor SCENARIO [--steps N] [--backend gloo|nccl] [--check] [--set K=V ...]
[--out DIR] [--seed S]`. Under torchrun / SLURM (RANK and WORLD_SIZE set) this process is one
rank of the job; otherwise it spawns tp*pp*dp*cp local processes. Exit codes: 0 success, 1 a
rank failed or the check failed, 2 bad input."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim3d.executor", description=__doc__.split("\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--check", action="store_true", help="compare with a single-process float64 reference")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default=None, help="directory for trace.csv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds for any collective / p2p wait")
    args = parser.parse_args(argv)

    from ..scenario.load import load_scenario
    from ..errors import ScenarioError
    from .launch import ExecutorError, RankKilled, execute, run_torchrun
    from .sizing import launcher_cluster

    try:
        sizing = launcher_cluster(args.scenario, args.overrides, os.environ)
        scenario = load_scenario(args.scenario, overrides=[*args.overrides, *sizing])
        options = dict(steps=args.steps, backend=args.backend, check=args.check, out_dir=args.out,
                       seed=args.seed, lr=args.lr, timeout_s=args.timeout)
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            result = run_torchrun(scenario, **options)
        else:
            result = execute(scenario, **options)
    except (ScenarioError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ExecutorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3 if isinstance(exc, RankKilled) else 1  # 3: the environment failed, not sim3d
    if result is None:  # a non-zero rank under torchrun
        return 0
    print(result.summary())
    return 0 if result.passed in (None, True) else 1


if __name__ == "__main__":
    sys.exit(main())

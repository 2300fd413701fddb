"""Run the executor with --check over a matrix of layouts and schedules on scenarios/tiny.yaml
(CPU, gloo; float64 unless a row sets training.precision) and print one table row per run:
losses and parameter / gradient error against the single-process float64 reference, with
the tolerance of the row's precision.

    .venv/bin/python benchmarks/executor_matrix.py [--steps 2] [--only 1f1b] [--with precision]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

LAYOUTS = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 2, 2)]  # (tp, pp, dp)
SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "tiny.yaml"


def cases():
    for tp, pp, dp in LAYOUTS:
        for schedule in ("gpipe", "1f1b", "interleaved-1f1b"):
            if schedule == "interleaved-1f1b" and pp == 1:
                continue
            vpp = 2 if schedule == "interleaved-1f1b" else 1
            yield tp, pp, dp, schedule, vpp, []
    # extras: split backward, V placement, sequence parallelism, distributed optimizer, swiglu+GQA
    yield 1, 2, 1, "zb-h1", 1, []
    yield 1, 2, 1, "zbv", 2, []
    yield 1, 2, 1, "dualpipev", 2, []
    yield 2, 2, 2, "1f1b", 1, ["parallel.sequence_parallel=true", "parallel.distributed_optimizer=true"]
    yield 2, 2, 1, "interleaved-1f1b", 2, ["model.activation=swiglu", "model.kv_heads=2"]
    # issue 36: the scenario's precision (fp32 master weights and gradients) and block / kernel
    yield 2, 2, 1, "1f1b", 1, ["training.precision=bf16"]
    yield 2, 2, 1, "1f1b", 1, ["training.precision=bf16", "model.activation=swiglu", "model.kv_heads=2",
                               "training.attention_backend=flash"]
    yield 1, 1, 2, "1f1b", 1, ["training.precision=fp16", "parallel.distributed_optimizer=true"]
    # context parallelism: ring attention over cp ranks, gradients averaged over dp x cp
    yield 1, 1, 1, "1f1b", 1, ["parallel.cp=2"]
    yield 1, 2, 1, "1f1b", 1, ["parallel.cp=2"]
    yield 2, 1, 1, "1f1b", 1, ["parallel.cp=2", "parallel.sequence_parallel=true", "training.precision=bf16",
                               "model.activation=swiglu", "model.kv_heads=2"]
    # experts: all-to-all over ep ranks, experts split over TP (etp = tp) or whole (etp 1)
    moe = 'model.moe={"experts": 4, "top_k": 2}'
    yield 1, 1, 2, "1f1b", 1, [moe, "parallel.ep=2"]
    yield 2, 1, 2, "1f1b", 1, [moe, "parallel.ep=2", "parallel.sequence_parallel=true"]
    yield 2, 1, 2, "1f1b", 1, [moe, "parallel.ep=2", "parallel.etp=1", "parallel.sequence_parallel=true"]
    yield 2, 2, 2, "1f1b", 1, [moe, "parallel.ep=2", "parallel.sequence_parallel=true", "training.precision=bf16",
                               "model.activation=swiglu", "routing=balanced"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--only", default=None, help="run one schedule only")
    parser.add_argument("--with", dest="with_", default=None, help="run only rows whose extras contain this text")
    args = parser.parse_args()

    from rich.console import Console
    from rich.table import Table

    from sim3d.executor import execute

    table = Table(title=f"executor --check on tiny.yaml ({args.steps} steps, gloo)")
    for col in ("tp", "pp", "dp", "schedule", "vpp", "extra", "dtype", "attention", "loss[-1]", "loss rel",
                "param rel", "grad rel", "tolerance", "check", "wall s"):
        table.add_column(col, justify="right")
    for tp, pp, dp, schedule, vpp, extra in cases():
        if (args.only and schedule != args.only) or (args.with_ and not any(args.with_ in e for e in extra)):
            continue
        cp = next((int(e.split("=")[1]) for e in extra if e.startswith("parallel.cp=")), 1)
        routing = next((e.split("=")[1] for e in extra if e.startswith("routing=")), "topk")
        overrides = [f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", f"parallel.vpp={vpp}",
                     f"schedule={schedule}", f"cluster.gpus_per_node={tp * pp * dp * cp}",
                     *(e for e in extra if not e.startswith("routing="))]
        start = time.perf_counter()
        r = execute(str(SCENARIO), steps=args.steps, check=True, overrides=overrides, routing=routing)
        c = r.check
        table.add_row(str(tp), str(pp), str(dp), schedule, str(vpp),
                      " ".join("moe" if e.startswith("model.moe") else e.split(".")[-1] for e in extra) or "-",
                      r.numerics["dtype"],
                      r.numerics["attention"], f"{r.losses[-1]:.6f}",
                      f"{c['loss_rel']:.1e}", f"{c['param_rel']:.1e}", f"{c['grad_rel']:.1e}", f"{c['tolerance']:.1e}",
                      "PASS" if c["passed"] else "FAIL", f"{time.perf_counter() - start:.1f}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()

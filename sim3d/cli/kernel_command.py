"""`sim3d kernel`: the price of one kernel or collective on one GPU, and its source."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .support import JSON_HELP, BadInput, _print_json, out

_SHAPE_HELP = ("The kernel's shape as KEY=VALUE: gemm m n k [precision]; attention batch heads seq head_dim "
               "[direction causal kv_heads kernel]; layernorm|rmsnorm|gelu|swiglu|dropout|add|softmax|cross_entropy numel "
               "[direction precision]; memory nbytes; all_reduce|all_gather|reduce_scatter|all_to_all nbytes group "
               "[nodes].")


def _value(text: str):
    from ..scenario.importers import number_of
    low = text.lower()
    return low == "true" if low in ("true", "false") else number_of(text)


def _shape(pairs: list[str]) -> dict:
    shape = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise BadInput(f"kernel shape: expected KEY=VALUE, got {pair!r}")
        if key in shape:
            raise BadInput(f"kernel shape: {key} given twice")
        shape[key] = _value(value)
    return shape


def _throughput(price) -> str:
    s = price.shape
    if price.op == "gemm":
        return f", {2 * s['m'] * s['n'] * s['k'] / price.seconds / 1e12:,.1f} TFLOP/s"
    if price.op == "attention":
        flops = 4 * s["batch"] * s["heads"] * s["seq"] ** 2 * s["head_dim"] * (0.5 if s["causal"] else 1.0)
        flops *= 2.5 if s["direction"] == "bwd" else 1.0
        return f", {flops / price.seconds / 1e12:,.1f} TFLOP/s executed"
    if "nbytes" in s:
        return f", {s['nbytes'] / price.seconds / 1e9:,.1f} GB/s"
    return ""


def kernel(op: str = typer.Argument(..., help="gemm, attention, a memory-bound kernel (rmsnorm ...), memory, or a "
                                               "collective (all_reduce ...)."),
           shape: list[str] = typer.Argument(None, help=_SHAPE_HELP),
           gpu: str = typer.Option("h100-sxm", "--gpu", help="GPU preset."),
           profile: Optional[Path] = typer.Option(None, "--profile", help="Calibration profile CSV to read first."),
           as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Print the price of one kernel or collective and its source (profile or analytical)."""
    from ..costs.kernel_price import kernel_seconds

    price = kernel_seconds(gpu, op, profile=profile, **_shape(shape or []))
    if as_json:
        _print_json({"gpu": gpu, **price.as_dict()})
        return
    args = " ".join(f"{k}={v}" for k, v in price.shape.items())
    out.print(f"{op} {args} on {gpu}: {price.seconds * 1e6:,.2f} us{_throughput(price)}", highlight=False)
    out.print(f"source: {price.source} ({price.detail})", highlight=False)

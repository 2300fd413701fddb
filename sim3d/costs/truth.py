"""The analytical model beside a measured profile, row by row: what benchmarks/kernel_truth.py
prints, tests/test_kernel_truth.py bounds, and `sim3d calibrate --fit` minimises.

A GEMM row's "bwd" is the two backward GEMMs autograd runs (calibrate/kernels.py): the input
gradient [m x n] @ [n x k] and the weight gradient [n x m] @ [m x k]. Attention rows are causal
SDPA calls: shape "b=..,h=..,s=..,d=..[,kv=..]".

Rows near the harness's host floor time PyTorch issuing the call, not the kernel
(costs/harness.py): a row is *device-bound* when it took at least `DEVICE_BOUND` times the
smallest row of its pass and dtype. The MAPE that judges the kernel model is over those rows;
the all-rows figure (model floored at the host time) is printed beside it.

The profile's own repeat noise bounds how close any kernel model can come (`repeat_pairs`,
`noise_floor`): rows that timed the same kernels differ by more than the model can explain.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from .attention import attention_seconds
from .gemm import gemm_seconds
from .harness import CLOCK_TAU_S, as_measured

DEVICE_BOUND = 2.0


def _shape(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=") for kv in str(text).split(","))}


def _floors(rows: pd.DataFrame) -> pd.Series:
    """The harness floor of each row: the fastest row of the same op kind, pass and dtype."""
    return rows.groupby(["kind", "pass", "dtype"])["seconds"].transform("min")


def gemm_device_seconds(gpu, m: int, n: int, k: int, precision: str, pass_: str,
                        overhead_16: float | None = None) -> float:
    if pass_ == "fwd":
        return gemm_seconds(gpu, m, n, k, precision, overhead_16=overhead_16)
    return (gemm_seconds(gpu, m, k, n, precision, overhead_16=overhead_16)
            + gemm_seconds(gpu, n, k, m, precision, overhead_16=overhead_16))


def attention_device_seconds(gpu, shape: dict[str, int], pass_: str, family=None) -> float:
    return attention_seconds(gpu, shape["b"] * shape["h"], shape["s"], shape["d"], pass_, causal=True,
                             kv_heads_ratio=shape.get("kv", shape["h"]) / shape["h"], family=family)


def judged_rows(table: pd.DataFrame, attention_ops: tuple[str, ...] = ("attention",)) -> pd.DataFrame:
    """The GEMM and attention rows of a profile table, each with its host floor (`floor_s`) and
    whether it is device-bound: which rows judge the model does not depend on the model."""
    rows = table[(table["kind"] == "gemm") | table["op"].isin(attention_ops)].copy()
    rows = rows[rows["dtype"].isin(["fp32", "bf16", "fp16", "fp8"])]
    rows["floor_s"] = _floors(rows).where(rows["kind"] == "gemm", 0.0)  # no attention row is near its floor
    rows["device_bound"] = (rows["seconds"] >= DEVICE_BOUND * rows["floor_s"]) | (rows["kind"] != "gemm")
    rows["class"] = [_class(r) for _, r in rows.iterrows()]
    return rows


def compare(table: pd.DataFrame, gpu, quick: bool = False, tau: float = CLOCK_TAU_S,
            attention_ops: tuple[str, ...] = ("attention",), overhead_16: float | None = None,
            family=None) -> pd.DataFrame:
    """`judged_rows` with the model beside each: its seconds in a step (`model_s`), as the
    harness would have recorded them (`predicted_s`, host floor not applied) and the error of
    that (`error`; `floored_error` with the host floor). `overhead_16` and `family` replace the
    model's GEMM k-loop overhead and attention constants."""
    rows = judged_rows(table, attention_ops)
    model = []
    for _, r in rows.iterrows():
        if r["kind"] == "gemm":
            model.append(gemm_device_seconds(gpu, int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"], r["pass"],
                                             overhead_16))
        else:
            model.append(attention_device_seconds(gpu, _shape(r["shape"]), r["pass"], family))
    rows["model_s"] = model
    rows["predicted_s"] = [as_measured(gpu, d, s, quick=quick, tau=tau) for d, s in zip(rows["dtype"], rows["model_s"])]
    rows["error"] = rows["predicted_s"] / rows["seconds"] - 1
    rows["floored_error"] = np.maximum(rows["predicted_s"], rows["floor_s"]) / rows["seconds"] - 1
    return rows


def _class(r) -> str:
    if r["kind"] == "gemm":
        return f"gemm {r['dtype']} {r['pass']}"
    return f"{r['op']} {r['pass']}"


def mape(errors) -> float:
    errors = np.asarray(errors, dtype=float)
    return float(np.abs(errors).mean()) if errors.size else float("nan")


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """MAPE and mean signed error per kernel class, device-bound rows and all rows."""
    out = []
    for name, group in rows.groupby("class", sort=True):
        bound = group[group["device_bound"]]
        out.append(dict(kernels=name, rows=len(group), device_bound=len(bound), mape=mape(bound["error"]),
                        bias=float(bound["error"].mean()), mape_all_rows=mape(group["floored_error"])))
    return pd.DataFrame(out)


def repeat_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """Pairs of device-bound GEMM rows of a `compare` table that timed the same kernels: one shape
    measured under two op names (an mlp_up and mlp_down of the same size), and an FP8 "bwd" with
    m == n beside the "fwd" row (m, k, m): calibrate/kernels.py lays out every FP8 operand as the
    forward's, so its input gradient ((m, k) over n) and weight gradient ((n, k) over m) are both
    that forward GEMM (16-bit backward GEMMs run other layouts and are left out).
    `spread` is log((1 + error_a) / (1 + error_b)): the difference between the two that no price
    of the kernel can remove (the harness's clock model, which sees the bwd's longer burst, is
    inside both errors)."""
    gemm = rows[(rows["kind"] == "gemm") & rows["device_bound"]]
    out = []
    for _, same in gemm.groupby(["dtype", "pass", "m", "n", "k"]):
        for (_, a), (_, b) in itertools.combinations(same.iterrows(), 2):
            out.append(_pair("repeat", a, b))
    fp8 = gemm[gemm["dtype"] == "fp8"]
    forward = {(r["m"], r["n"], r["k"]): r for _, r in fp8[fp8["pass"] == "fwd"].iterrows()}
    for _, b in fp8[(fp8["pass"] == "bwd") & (fp8["m"] == fp8["n"])].iterrows():
        f = forward.get((b["m"], b["k"], b["n"]))
        if f is not None:
            out.append(_pair("bwd = 2 x fwd", b, f))
    return pd.DataFrame(out, columns=["dtype", "kind", "a", "b", "error_a", "error_b", "spread"])


def _pair(kind: str, a, b) -> dict:
    return dict(dtype=a["dtype"], kind=kind, a=f"{a['op']} {a['pass']} {a['shape']}",
                b=f"{b['op']} {b['pass']} {b['shape']}", error_a=a["error"], error_b=b["error"],
                spread=math.log((1 + a["error"]) / (1 + b["error"])))


def noise_floor(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per dtype, from `repeat_pairs`: the noise of one row, sigma = rms(spread) / sqrt(2) (a pair
    is two independent draws); the MAPE a perfect model would still show, sigma * sqrt(2 / pi)
    (the mean |x| of a normal); and the least MAPE any model can reach on the paired rows
    themselves, mean |spread| / 2 (one price for both rows of a pair)."""
    out = []
    for dtype, group in pairs.groupby("dtype", sort=True):
        spread = group["spread"].to_numpy(float)
        sigma = float(np.sqrt(np.mean(spread ** 2) / 2))
        out.append(dict(dtype=dtype, pairs=len(group), sigma=sigma, floor_mape=sigma * math.sqrt(2 / math.pi),
                        paired_bound=float(np.abs(spread).mean() / 2)))
    return pd.DataFrame(out, columns=["dtype", "pairs", "sigma", "floor_mape", "paired_bound"])

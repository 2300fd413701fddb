"""The analytical model's per-GPU constants derived from a measured profile, with cross-validated
error: how one calibration run onboards a GPU (`python -m sim3d_calibrate --fit`).

Fitted, each on its own rows of the profile (costs/truth.py compares rows with the model):

* GEMMs, per precision: the best-shape efficiency, and the k-loop overhead of a tile (16-bit k
  units) shared by all precisions: device-bound GEMM rows, MAPE minimised;
* memory-bound kernels (norms, activations, softmax, dropout, add): effective bandwidth and a
  fixed cost per kernel, `seconds = bytes / bandwidth + overhead` (the bytes the harness
  records), relative least squares;
* fused attention (CUDA profiles): the four constants of costs/attention.py's kernel family;
* collectives, per operation: latency and bus bandwidth, `seconds = latency + bus_factor(n) *
  bytes / busbw` (nccl-tests' factors), relative least squares.

Cross-validation: the rows are split into FOLDS groups by shape (all passes of one shape in
one group), each group scored by a fit on the others. The result's `record` is a GPU preset
record (`GpuSpec` fields): `base`'s datasheet facts with the fitted compute facts; for a device
no preset describes (a CPU) the fitted rates stand in for the datasheet (efficiency 1.0).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import truth
from .attention import FAMILIES
from .collectives import bus_factor, collective_named
from .gemm import GEMM_K_OVERHEAD, KERNEL_OVERHEAD_S, MEMORY_EFFICIENCY
from .harness import as_measured

FOLDS = 5
MEMORY_KINDS = ("norm", "elementwise", "softmax")
# The searched fits (GEMMs of a precision, attention) price every row at every step of the
# search, (1 + FOLDS) searches each: their cost grows with rows, so above this many they are
# fitted on an even spread of the rows over sizes (every k-th by FLOPs) -- the committed H100
# profile has 176 GEMM rows per precision, and a spread of 400 shapes pins two constants.
# Linear fits (memory-bound, collectives) take every row.
SEARCHED_ROWS = 400


@dataclass(frozen=True)
class Fitted:
    name: str
    value: float
    unit: str
    fit_mape: float  # on the rows it was fitted on
    cv_mape: float  # held out, FOLDS-fold by shape
    rows: int


@dataclass
class FitResult:
    base: str | None  # the preset whose structure (SMs, datasheet) the fit kept, None for a new device
    constants: list[Fitted]
    record: dict  # GpuSpec fields
    notes: list[str] = field(default_factory=list)


def search(loss, start: dict[str, float], restarts: int = 3) -> dict[str, float]:
    """Minimise `loss` over positive constants: Nelder-Mead on their logarithms (the constants
    of a kernel model trade off along valleys that one-at-a-time steps cannot follow),
    restarted from its best point (a MAPE has kinks where a simplex can stall)."""
    best = dict(start)
    for _ in range(restarts):
        best = _nelder_mead(loss, best)
    return best


def _nelder_mead(loss, start: dict[str, float], iterations: int = 300) -> dict[str, float]:
    keys = list(start)
    x0 = np.log(np.array([start[k] for k in keys], dtype=float))

    def f(x):
        return loss(dict(zip(keys, np.exp(x).tolist())))
    simplex = [x0] + [x0 + np.eye(len(keys))[i] * 0.2 for i in range(len(keys))]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-10 and np.ptp(np.array(simplex), axis=0).max() < 1e-6:
            break
        centre = np.mean(simplex[:-1], axis=0)
        reflected = centre + (centre - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centre + 2 * (centre - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centre + 0.5 * (simplex[-1] - centre)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink towards the best
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    best = simplex[int(np.argmin(values))]
    return dict(zip(keys, np.exp(best).tolist()))


def _folds(keys) -> np.ndarray:
    """Fold of each row: its shape's rank among the distinct shapes, dealt round-robin (stable)."""
    order = {k: i % FOLDS for i, k in enumerate(sorted(set(keys)))}
    return np.array([order[k] for k in keys])


def _cross_validate(keys, fit, score) -> float:
    """MAPE of each fold's rows under a fit on the other folds; `fit(mask)` fits the rows where
    mask is true, `score(mask, constants)` returns the errors of those rows."""
    folds = _folds(keys)
    errors: list[float] = []
    for f in sorted(set(folds)):
        if (folds != f).any():
            errors += list(score(folds == f, fit(folds != f)))
    return truth.mape(errors)


# ---- GEMMs and attention: rows taken once, priced as costs/truth.py prices them -------------
@dataclass(frozen=True)
class _Row:
    shape: str
    precision: str
    pass_: str
    seconds: float
    dims: tuple


def _device_bound_rows(table: pd.DataFrame, kind: str) -> list[_Row]:
    """The rows that judge the kernel model, with the host floor taken over the whole profile."""
    judged = truth.judged_rows(table)
    judged = judged[judged["device_bound"] & ((judged["kind"] == "gemm") == (kind == "gemm"))]
    rows = []
    for _, r in judged.iterrows():
        dims = (int(r["m"]), int(r["n"]), int(r["k"])) if kind == "gemm" else tuple(truth._shape(r["shape"]).items())
        rows.append(_Row(str(r["shape"]), r["dtype"], r["pass"], float(r["seconds"]), dims))
    return rows


def _spread(rows: list, size, limit: int = SEARCHED_ROWS) -> list:
    """At most `limit` of `rows`, spread evenly over their sizes (`size(row)`), deterministic."""
    if len(rows) <= limit:
        return rows
    ordered = sorted(rows, key=size)
    return [ordered[round(i * (len(ordered) - 1) / (limit - 1))] for i in range(limit)]


def _errors(rows: list[_Row], price, quick: bool, gpu) -> np.ndarray:
    return np.array([as_measured(gpu, r.precision, price(r), quick=quick) / r.seconds - 1 for r in rows])


def _with_efficiency(gpu, precision: str, efficiency: float):
    key = "gemm_burst_efficiency_fp8" if precision == "fp8" else "gemm_burst_efficiency_16"
    return dataclasses.replace(gpu, **{key: efficiency})


def fit_gemms(table: pd.DataFrame, gpu, quick: bool = False) -> list[Fitted]:
    everything = _device_bound_rows(table, "gemm")
    out, overheads = [], []
    for precision in sorted({r.precision for r in everything}):
        rows = _spread([r for r in everything if r.precision == precision], lambda r: math.prod(r.dims))

        def errors(mask, c, rows=rows, precision=precision):
            spec = _with_efficiency(gpu, precision, c["efficiency"])
            chosen = [r for r, keep in zip(rows, mask) if keep]
            return _errors(chosen, lambda r: truth.gemm_device_seconds(spec, *r.dims, r.precision, r.pass_,
                                                                        c["overhead"]), quick, spec)

        start = {"efficiency": gpu.gemm_burst_efficiency(precision) or 0.7, "overhead": float(GEMM_K_OVERHEAD)}

        def fit(mask, errors=errors, start=start):
            return search(lambda c: truth.mape(errors(mask, c)), start)
        every = np.ones(len(rows), bool)
        best = fit(every)
        fit_mape = truth.mape(errors(every, best))
        cv = _cross_validate([r.shape for r in rows], fit, errors)
        out.append(Fitted(f"gemm_efficiency_{precision}", best["efficiency"], "of the dense peak, burst", fit_mape, cv,
                          len(rows)))
        overheads.append((best["overhead"], len(rows), fit_mape, cv))
    if overheads:  # one tile overhead for the GPU: the row-weighted mean of the precisions' fits
        n = sum(o[1] for o in overheads)
        out.append(Fitted("gemm_k_overhead", sum(o[0] * o[1] for o in overheads) / n, "k (16-bit units) per tile",
                          sum(o[2] * o[1] for o in overheads) / n, sum(o[3] * o[1] for o in overheads) / n, n))
    return out


# ---- memory-bound kernels, collectives: relative least squares -----------------------------
def _relative_lstsq(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) minimising the sum of ((a + b x) / y - 1)^2."""
    w = 1.0 / y
    design = np.stack([w, x * w], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    return float(a), float(b)


def fit_memory(table: pd.DataFrame, gpu) -> list[Fitted]:
    """Device-bound rows only, as for GEMMs: at least twice the fastest row of their kernel."""
    rows = table[table["kind"].isin(MEMORY_KINDS) & (table["bytes"] > 0)]
    floor = rows.groupby(["op", "pass", "dtype"])["seconds"].transform("min")
    rows = rows[rows["seconds"] >= truth.DEVICE_BOUND * floor]
    if len(rows) < 3:
        return []
    x, y = rows["bytes"].to_numpy(float), rows["seconds"].to_numpy(float)

    def fit(mask):
        return _relative_lstsq(x[mask], y[mask])

    def score(mask, ab):
        return (ab[0] + ab[1] * x[mask]) / y[mask] - 1
    every = np.ones(len(rows), bool)
    overhead, per_byte = fit(every)
    fit_mape, cv = truth.mape(score(every, (overhead, per_byte))), _cross_validate(list(rows["shape"]), fit, score)
    return [Fitted("memory_efficiency", 1.0 / per_byte / (gpu.hbm_tbps * 1e12), "of the HBM datasheet bandwidth",
                   fit_mape, cv, len(rows)),
            Fitted("kernel_overhead_s", max(overhead, 0.0), "s per memory-bound kernel", fit_mape, cv, len(rows))]


def fit_collectives(table: pd.DataFrame) -> list[Fitted]:
    out = []
    rows = table[table["kind"] == "collective"]
    for op in sorted(set(rows["op"])):
        name = collective_named(op.replace("_", "")) or op
        mine = rows[rows["op"] == op]
        if len(mine) < 3 or name == "send_recv":
            continue
        x = np.array([bus_factor(name, int(n)) for n in mine["group_size"]]) * mine["bytes"].to_numpy(float)
        y = mine["seconds"].to_numpy(float)

        def fit(mask, x=x, y=y):
            return _relative_lstsq(x[mask], y[mask])

        def score(mask, ab, x=x, y=y):
            return (ab[0] + ab[1] * x[mask]) / y[mask] - 1
        every = np.ones(len(mine), bool)
        latency, per_byte = fit(every)
        fit_mape = truth.mape(score(every, (latency, per_byte)))
        cv = _cross_validate([f"{b:.0f}" for b in mine["bytes"]], fit, score)
        out.append(Fitted(f"{name}_busbw_GBps", 1e-9 / per_byte, "GB/s bus bandwidth", fit_mape, cv, len(mine)))
        out.append(Fitted(f"{name}_latency_s", max(latency, 0.0), "s", fit_mape, cv, len(mine)))
    return out


# ---- attention -----------------------------------------------------------------------------
_ATTENTION = ("fwd_efficiency", "bwd_efficiency", "fwd_cta_blocks", "bwd_cta_blocks")


def fit_attention(table: pd.DataFrame, gpu, quick: bool = False) -> list[Fitted]:
    rows = _spread(_device_bound_rows(table, "attention"), lambda r: (r.pass_, sorted(r.dims)))
    if not rows:
        return []
    base = FAMILIES[gpu.attention_family]

    def errors(mask, c):
        family = dataclasses.replace(base, **c, source="fitted")
        chosen = [r for r, keep in zip(rows, mask) if keep]
        return _errors(chosen, lambda r: truth.attention_device_seconds(gpu, dict(r.dims), r.pass_, family), quick, gpu)

    def fit(mask):
        return search(lambda c: truth.mape(errors(mask, c)), {k: getattr(base, k) for k in _ATTENTION})
    every = np.ones(len(rows), bool)
    best = fit(every)
    fit_mape, cv = truth.mape(errors(every, best)), _cross_validate([r.shape for r in rows], fit, errors)
    units = {"fwd_efficiency": "of the 16-bit peak, burst", "bwd_efficiency": "of the 16-bit peak, burst",
             "fwd_cta_blocks": "key blocks per CTA", "bwd_cta_blocks": "query blocks per CTA"}
    return [Fitted(f"attention_{k}", best[k], units[k], fit_mape, cv, len(rows)) for k in _ATTENTION]


# ---- the record ----------------------------------------------------------------------------
def new_device(name: str, table: pd.DataFrame, provenance: dict):
    """A record for a device no preset describes, to fit against: rates of 1.0 (the fit sets
    them), one 'SM' and no tiles (a CPU BLAS blocks for its caches, not for waves), nothing at
    the power limit."""
    from ..cluster.gpus import GpuSpec
    group = int(table["group_size"].max()) if (table["kind"] == "collective").any() else 1
    return GpuSpec(name, 1.0, 1.0, None, 1.0, 1.0, 0.0, 1.0, 8.0, 0.0, 1, max(group, int(provenance.get("device_count") or 1)),
                   1, 1.0, gemm_burst_efficiency_16=1.0, sustained_clock_16=1.0, attention_family="hopper",
                   gemm_tile=(1, 1))


def fit_profile(table: pd.DataFrame, gpu=None, name: str | None = None, provenance: dict | None = None) -> FitResult:
    """Fit `gpu`'s constants (a GpuSpec, None for a device no preset describes) to a profile
    table (costs/profile.py schema); `provenance` is the profile's JSON (quick run, device)."""
    provenance = provenance or {}
    quick = bool(provenance.get("quick"))
    base = gpu.name if gpu is not None else None
    spec = gpu if gpu is not None else new_device(name or "fitted", table, provenance)
    notes = []
    if gpu is None:
        notes.append("no preset describes this device: the fitted rates stand in for its datasheet (efficiency 1.0), "
                     "a precision not measured takes the rate of one that was; HBM capacity and the network are not "
                     "measured; no soak was measured, so the rates are the profile's clock, not a power-limited one")
    constants = fit_gemms(table, spec, quick) + fit_memory(table, spec) + fit_collectives(table)
    if provenance.get("device", "cuda") == "cuda" and gpu is not None:
        constants += fit_attention(table, spec, quick)
    result = FitResult(base, constants, {}, notes)
    result.record = _record(result, spec, name or (f"{base}-fitted" if base else "fitted"))
    return result


def _record(result: FitResult, spec, name: str) -> dict:
    record = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    record["name"] = name
    record["aliases"] = ()  # a fitted device is named by its own name, never by its base's spellings
    values = {c.name: c.value for c in result.constants}
    fitted = {p: values[f"gemm_efficiency_{p}"] for p in ("fp32", "bf16", "fp16", "fp8") if f"gemm_efficiency_{p}" in values}
    if result.base is None and fitted:  # the fitted rates are the peaks, efficiency 1.0
        rates = {p: e * spec.peak_tflops(p) for p, e in fitted.items()}
        some = next(iter(rates.values()))
        record.update(fp32_tflops=rates.get("fp32", some), tf32_tflops=rates.get("fp32", some),
                      bf16_tflops=rates.get("bf16", rates.get("fp16", some)),
                      fp16_tflops=rates.get("fp16", rates.get("bf16", some)), fp8_tflops=rates.get("fp8"))
        if "fp8" in rates:
            record.update(gemm_burst_efficiency_fp8=1.0, sustained_clock_fp8=1.0)
    elif fitted:
        for precision, eff in fitted.items():
            record["gemm_burst_efficiency_fp8" if precision == "fp8" else "gemm_burst_efficiency_16"] = eff
    if result.base is None and "memory_efficiency" in values:
        record["hbm_tbps"] = values["memory_efficiency"] * spec.hbm_tbps / MEMORY_EFFICIENCY
    if "all_reduce_busbw_GBps" in values and record["gpus_per_node"] > 1:
        record["nvlink_ring_busbw"] = values["all_reduce_busbw_GBps"]
        if result.base is None:
            record["nvlink_gbps"] = values["all_reduce_busbw_GBps"] * 8
    return record


def describe(result: FitResult) -> list[str]:
    lines = [f"{'constant':34} {'value':>12}  {'unit':28} {'rows':>5} {'fit MAPE':>9} {'held out':>9}"]
    for c in result.constants:
        value = f"{c.value:.4g}"
        lines.append(f"{c.name:34} {value:>12}  {c.unit:28} {c.rows:5d} {c.fit_mape:9.2%} {c.cv_mape:9.2%}")
    model = {"gemm_k_overhead": GEMM_K_OVERHEAD, "memory_efficiency": MEMORY_EFFICIENCY,
             "kernel_overhead_s": KERNEL_OVERHEAD_S}
    shared = [f"{k} {model[k]:g}" for k in model if any(c.name == k for c in result.constants)]
    if shared:
        lines.append("the model's shared constants, for comparison: " + ", ".join(shared)
                     + " (not per-GPU fields: the record keeps them)")
    return lines + [f"note: {n}" for n in result.notes]


def fit_file(path, gpu: str | None = None, name: str | None = None):
    """Fit a profile CSV (its provenance JSON beside it), against preset `gpu` or the preset its
    provenance names; write the record, the constants and their errors to <profile>.fit.json.
    Returns (FitResult, the path written)."""
    import json
    from pathlib import Path

    from ..cluster.gpus import gpu_preset, preset_named_in
    from .profile import Profile
    profile = Profile.load(path)
    provenance = profile.provenance
    if gpu is None and provenance.get("device") == "cuda":
        gpu = preset_named_in(str(provenance.get("device_name", "")))
    spec = gpu_preset(gpu) if gpu else None
    slug = Path(path).stem
    if spec is None and "fp8" in set(profile.table.get("dtype", ())):
        # FP8 rows need the GPU's FP8 peak, which only its preset holds (issue 49: "x-fitted has
        # no fp8 tensor cores" for a profile copied without its provenance)
        raise ValueError(f"its FP8 rows need to know which GPU timed them, and no provenance says so: keep "
                         f"{Path(path).with_suffix('.json').name} (written beside it by calibrate) next to it")
    result = fit_profile(profile.table, spec, name or f"{slug}-fitted", provenance)
    if not all(math.isfinite(c.value) for c in result.constants):
        raise ValueError(f"{path}: the fit did not converge (a constant is not finite)")
    if not result.constants:
        raise ValueError(f"{path}: no rows to fit a constant to ({len(profile.table)} row(s); a quick "
                         "calibration of a scenario gives a few hundred)")
    beyond = [c for c in result.constants if c.name.startswith(("gemm_efficiency", "memory_efficiency",
                                                                "fwd_efficiency", "bwd_efficiency"))
              and result.base is not None and c.value > 1.0]
    if beyond:  # faster than the datasheet's peak: the rows or the preset are wrong, not the device
        raise ValueError(f"{path}: fitted {', '.join(f'{c.name} {c.value:.0%}' for c in beyond)} of {result.base}'s "
                         "peak; a kernel cannot beat its datasheet: the rows were timed on another device than "
                         "the one the profile's provenance (its .json beside it) names, or edited")
    out = Path(path).with_suffix(".fit.json")
    out.write_text(json.dumps({
        "record": result.record, "base_preset": result.base,
        "constants": [dataclasses.asdict(c) for c in result.constants], "notes": result.notes,
        "cross_validation": f"{FOLDS}-fold by shape (collectives: by message size)",
        "profile": str(path), "profile_provenance": provenance}, indent=2, default=str) + "\n")
    return result, out

"""Read a calibration profile (written by ``calibrate/``) and interpolate it.

The file format (columns, units, conventions) is documented in ``calibrate/profile_io.py``;
the column list is repeated here so that ``sim3d`` never imports ``calibrate`` or torch.

Interpolation rules (every lookup returns seconds, or ``None`` when the profile has no
measurement of that class, so the caller falls back to the analytical model):

* **GEMM** (``gemm_seconds``): an exact (m, n, k) match returns the measured median.
  Otherwise the achieved FLOP/s is interpolated over the measured shapes of that dtype and
  pass by inverse-distance weighting (power 2) of log FLOP/s among the 4 nearest shapes in
  (log2 m, log2 n, log2 k) space, so a skinny GEMM borrows the efficiency of skinny
  measurements rather than of squares of the same FLOPs; time = FLOPs / FLOP/s. A weighted
  mean never leaves the range of its inputs, so outside the measured box the efficiency is
  clamped to that of the nearest edge shapes (counted as an extrapolation).
* **other kernels** (``op_seconds``; ``attention_seconds``): seconds are interpolated
  piecewise-linearly in (log numel, log seconds), made non-decreasing in size first. Below
  the smallest measured size the smallest time is returned (launch latency floor); above
  the largest the throughput (numel/s) of the largest is kept. Attention can also be looked
  up by its FLOPs (``attention_seconds``), same rule in (log FLOPs, log seconds).
* **collectives** (``collective_seconds``): at the measured group size nearest to the
  requested one (in log ratio; ties go to the larger), time is interpolated
  piecewise-linearly in (log bytes, log seconds) -- equivalently log bus bandwidth is
  interpolated in log bytes -- after making times non-decreasing in size. The bus bandwidth
  is then carried to the requested group size with the nccl-tests factors
  (t = t_measured * f(n_requested) / f(n_measured)). Below the smallest size: the smallest
  size's time (latency floor); above the largest: bus bandwidth clamped at the edge.
  ``nbytes`` follows nccl-tests (all_gather: gathered output; reduce_scatter: input).

Extrapolations are counted per kind and reported by :meth:`Profile.describe`.

A CPU profile's compute lookups are slowed by the ranks that share the CPU (profile_cpu.py)
once `load_profile` has bound it to a scenario.
"""
from __future__ import annotations

import copy
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ScenarioError
from .collectives import bus_factor, collective_named
from .profile_cpu import slowdown

COLUMNS = ["op", "kind", "pass", "shape", "m", "n", "k", "numel", "bytes", "group_size",
           "dtype", "device", "seconds", "tflops", "gbps"]
KINDS = {"gemm", "attention", "elementwise", "norm", "softmax", "embedding", "loss", "collective", "block",
         "concurrency", "optimizer"}
_DTYPES = {"fp32": "fp32", "float32": "fp32", "float": "fp32", "tf32": "fp32",
           "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
           "fp8": "fp8", "float8": "fp8"}
_OP_ALIASES = {"layer_norm": "layernorm", "rms_norm": "rmsnorm", "residual": "add",
               "residual_add": "add", "silu_mul": "swiglu", "ce": "cross_entropy",
               "sdpa": "attention", "flash_attention": "attention", "core_attention": "attention"}
_NEAREST = 4


class ProfileError(ValueError):
    """A profile file is missing or does not follow the schema."""


def _dtype(d) -> str:
    key = str(d).lower().replace("torch.", "")
    return _DTYPES.get(key, key)


def _pass(p: str) -> str:
    p = str(p).lower()
    if p not in ("fwd", "bwd"):
        raise ValueError(f"pass_ must be 'fwd' or 'bwd', not {p!r}")
    return p


def _curve(x: np.ndarray, sec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median seconds per distinct x, sorted, made non-decreasing; both in natural log."""
    df = pd.DataFrame({"x": x, "s": sec}).groupby("x", sort=True)["s"].median()
    s = np.maximum.accumulate(df.to_numpy(dtype=float))
    return np.log(df.index.to_numpy(dtype=float)), np.log(s)


def _interp(lx: np.ndarray, ls: np.ndarray, x: float) -> tuple[float, bool]:
    """Seconds at x on a log-log curve; latency floor below, constant throughput above."""
    q = math.log(x)
    if q < lx[0]:
        return math.exp(ls[0]), True
    if q > lx[-1]:
        return math.exp(ls[-1] + (q - lx[-1])), True
    return math.exp(float(np.interp(q, lx, ls))), False


# Rows that time the same thing (every column but the time and the rates derived from it) are
# medianed; two that disagree by more than this factor are not noise (repeated timings of one
# kernel differ by a few percent: the committed profiles' rounds) but two devices or a unit
# slipped, and are refused rather than averaged into a price.
CONFLICT_RATIO = 2.0
_IDENTITY = ["op", "kind", "pass", "shape", "m", "n", "k", "numel", "bytes", "group_size", "dtype", "device"]


def _refuse_conflicts(t: pd.DataFrame) -> None:
    keyed = t.groupby(_IDENTITY, dropna=False, sort=False).ngroup()
    seconds = t["seconds"].groupby(keyed)
    spread = seconds.transform("max") / seconds.transform("min")
    if (spread > CONFLICT_RATIO).any():
        worst = keyed[spread.idxmax()]
        rows = [int(i) + 1 for i in np.flatnonzero((keyed == worst).to_numpy())]
        first = t.loc[keyed == worst].iloc[0]
        raise ProfileError(
            f"profile: data rows {', '.join(map(str, rows[:8]))} time the same {first['op']} "
            f"({first['shape'] or first['dtype']}, {first['pass'] or 'collective'}) "
            f"{t.loc[keyed == worst, 'seconds'].min():.3g} to {t.loc[keyed == worst, 'seconds'].max():.3g} s apart: "
            f"more than {CONFLICT_RATIO:g}x, not noise (two devices in one file, or a unit slipped); keep one")


class Profile:
    """A measured profile: kernels and collectives of one device, with provenance."""

    def __init__(self, table: pd.DataFrame, path: str | Path | None = None, provenance: dict | None = None):
        self.path = Path(path) if path is not None else None
        self.provenance: dict = dict(provenance or {})
        self.table = self._validate(table)
        self.extrapolated: Counter = Counter()
        self._cache: dict = {}
        self.ranks, self.compute_scale = 1, 1.0  # shared_by: ranks on its CPU, their compute slowdown

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        p = Path(path)
        if p.exists() and not p.is_file():  # a FIFO would block the reader, a folder fail it
            raise ProfileError(f"calibration profile {p} is not a regular file (a profile is a CSV file)")
        if not p.is_file():
            raise ProfileError(f"calibration profile not found: {p} "
                               "(run `python -m calibrate` or `sim3d calibrate` to make one)")
        try:
            table = pd.read_csv(p, dtype={"op": str, "kind": str, "pass": str, "shape": str,
                                          "dtype": str, "device": str}, keep_default_na=False,
                                na_values={c: [""] for c in COLUMNS if c not in ("op", "kind", "pass", "shape", "dtype", "device")})
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
            raise ProfileError(f"{p}: not a readable profile CSV ({str(exc).strip()})") from None
        prov_path = p.with_suffix(".json")
        prov: dict = {}
        if prov_path.is_file():
            try:
                prov = json.loads(prov_path.read_text())
            except ValueError as exc:
                raise ProfileError(f"{prov_path}: provenance is not valid JSON ({exc})") from None
            if not isinstance(prov, dict) or not isinstance(prov.get("unstable", []), list):
                raise ProfileError(f"{prov_path}: provenance is not a record sim3d calibrate wrote (expected an "
                                   "object, its `unstable` a list)")
        try:
            return cls(table, p, prov)
        except ProfileError as exc:
            raise ProfileError(f"{p}: {exc}") from None

    @staticmethod
    def _validate(table: pd.DataFrame) -> pd.DataFrame:
        missing = [c for c in COLUMNS if c not in table.columns]
        if missing:
            raise ProfileError(f"profile schema: missing column(s) {missing}; expected columns {COLUMNS}")
        t = table[COLUMNS].copy()
        for c in ("op", "kind", "pass", "shape", "dtype", "device"):
            t[c] = t[c].fillna("").astype(str).str.strip()
        for c in ("m", "n", "k", "numel", "bytes", "group_size", "seconds", "tflops", "gbps"):
            try:
                t[c] = pd.to_numeric(t[c].replace("", np.nan), errors="raise").astype(float)
            except (ValueError, TypeError):
                raise ProfileError(f"profile schema: column {c!r} must be numeric") from None
        t["dtype"] = t["dtype"].map(lambda d: _dtype(d) if d else "")

        def bad(mask, what):
            if mask.any():
                i = int(np.flatnonzero(mask.to_numpy())[0])
                raise ProfileError(f"profile schema: data row {i + 1} (op {t['op'].iloc[i]!r}): {what}")
        bad(~t["kind"].isin(KINDS), f"kind must be one of {sorted(KINDS)}")
        bad(t["op"] == "", "op is empty")
        # no kernel or collective of a training step takes an hour; above that a unit slipped
        bad(~(t["seconds"] > 0) | ~(t["seconds"] < 3600), "seconds must be a positive number below 3600")
        for c in ("m", "n", "k", "numel", "bytes", "group_size", "tflops", "gbps"):
            bad(np.isinf(t[c]), f"{c} must be finite")
        kern = t["kind"] != "collective"
        bad(kern & (t["kind"] != "optimizer") & ~t["pass"].isin(["fwd", "bwd"]), "pass must be fwd or bwd")
        bad(kern & (t["dtype"] == ""), "dtype is empty")
        gemm = t["kind"] == "gemm"
        bad(gemm & ~((t["m"] > 0) & (t["n"] > 0) & (t["k"] > 0)), "gemm rows need positive m, n, k")
        bad((kern & ~gemm) & ~(t["numel"] > 0), "kernel rows need a positive numel")
        coll = t["kind"] == "collective"
        bad(coll & ~((t["bytes"] > 0) & (t["group_size"] >= 2)), "collective rows need bytes > 0 and group_size >= 2")
        bad((t["kind"] == "concurrency") & ~(t["group_size"] >= 1), "concurrency rows need group_size >= 1")
        _refuse_conflicts(t)
        return t.reset_index(drop=True)

    def shared_by(self, ranks: int) -> "Profile":
        """This profile as each of `ranks` processes computing at once on its CPU sees it: its
        kernels and blocks slowed as its concurrency rows measured (profile_cpu.py); itself
        where it has none (a GPU profile: every rank owns its GPU)."""
        factor = slowdown(self.table, ranks)
        if factor is None:
            return self
        shared = copy.copy(self)
        # below 1 is the noise of the measurement: other ranks never make one faster
        shared.ranks, shared.compute_scale = ranks, max(1.0, factor)
        return shared

    # ------------------------------------------------------------------ lookups
    def gemm_seconds(self, m: int, n: int, k: int, dtype: str, pass_: str = "fwd") -> float | None:
        """Seconds of an (m, k) x (k, n) GEMM (``pass_='bwd'``: both gradient GEMMs)."""
        p, d = _pass(pass_), _dtype(dtype)
        key = ("gemm", d, p)
        if key not in self._cache:
            g = self.table[(self.table["kind"] == "gemm") & (self.table["dtype"] == d) & (self.table["pass"] == p)]
            g = g.groupby(["m", "n", "k"], as_index=False)["seconds"].median()
            if g.empty:
                self._cache[key] = None
            else:
                mnk = g[["m", "n", "k"]].to_numpy(dtype=float)
                flops = mnk.prod(axis=1) * (2.0 if p == "fwd" else 4.0)
                self._cache[key] = (np.log2(mnk), np.log(flops / g["seconds"].to_numpy(dtype=float)),
                                    g["seconds"].to_numpy(dtype=float))
        data = self._cache[key]
        if data is None:
            return None
        if min(m, n, k) <= 0:
            return 0.0
        pts, lrate, sec = data
        q = np.log2(np.array([m, n, k], dtype=float))
        dist2 = ((pts - q) ** 2).sum(axis=1)
        hit = np.flatnonzero(dist2 < 1e-18)
        if hit.size:
            return float(sec[hit[0]]) * self.compute_scale
        if (q < pts.min(axis=0) - 1e-9).any() or (q > pts.max(axis=0) + 1e-9).any():
            self.extrapolated["gemm"] += 1
        near = np.argsort(dist2)[:_NEAREST]
        w = 1.0 / dist2[near]
        rate = math.exp(float((w * lrate[near]).sum() / w.sum()))
        return float(m) * n * k * (2.0 if p == "fwd" else 4.0) / rate * self.compute_scale

    def op_seconds(self, op: str, numel: int, dtype: str, pass_: str = "fwd") -> float | None:
        """Seconds of a non-GEMM kernel (norm, activation, softmax, dropout, add, embedding,
        cross_entropy, attention) whose main tensor has ``numel`` elements. ``op`` may also
        be a kind (``norm``, ``elementwise``...): then all ops of that kind are pooled."""
        p, d = _pass(pass_), _dtype(dtype)
        name = _OP_ALIASES.get(op.lower(), op.lower())
        key = ("op", name, d, p)
        if key not in self._cache:
            t = self.table[(self.table["dtype"] == d) & (self.table["pass"] == p)
                           & ~self.table["kind"].isin(["gemm", "collective", "concurrency"])]
            rows = t[t["op"] == name]
            if rows.empty:
                rows = t[t["kind"] == name]
            self._cache[key] = None if rows.empty else (
                _curve(rows["numel"].to_numpy(float), rows["seconds"].to_numpy(float)), rows["kind"].iloc[0])
        data = self._cache[key]
        if data is None or numel <= 0:
            return None if data is None else 0.0
        (lx, ls), kind = data
        sec, extra = _interp(lx, ls, float(numel))
        if extra:
            self.extrapolated[kind] += 1
        return sec * self.compute_scale

    def block_memory_rate(self, block: str, numel: int, dtype: str, pass_: str = "fwd") -> float | None:
        """Bytes per second at which a traced stack ran the memory-bound kernels of one `block`
        ("layer" or "head"), counted in sim3d's bytes (rows `<block>.memory`, written from a
        trace by costs/trace_memory.py); the row nearest in size (log numel), or None."""
        p, d = _pass(pass_), _dtype(dtype)
        rows = self.table[(self.table["op"] == f"{block}.memory") & (self.table["dtype"] == d)
                          & (self.table["pass"] == p)]
        if rows.empty or numel <= 0:
            return None
        row = rows.iloc[int(np.argmin(np.abs(np.log(rows["numel"].to_numpy(float)) - math.log(numel))))]
        return float(row["bytes"]) / float(row["seconds"]) / self.compute_scale

    def attention_seconds(self, b: int, heads: int, seq: int, head_dim: int, dtype: str,
                          pass_: str = "fwd", op: str = "attention") -> float | None:
        """Causal attention for (b, heads, seq, head_dim), interpolated by FLOPs, from the rows
        of `op`: ``attention`` (SDPA's default dispatch) or ``attention.<backend>`` (one fused
        backend forced: ``attention.flash``, FlashAttention-2; ``attention.cudnn``), never
        pooled with each other."""
        p, d = _pass(pass_), _dtype(dtype)
        key = ("attn", op, d, p)
        if key not in self._cache:
            a = self.table[(self.table["kind"] == "attention") & (self.table["op"] == op)
                           & (self.table["dtype"] == d) & (self.table["pass"] == p)]
            a = a[a["tflops"] > 0]
            self._cache[key] = None if a.empty else _curve(
                (a["tflops"] * 1e12 * a["seconds"]).to_numpy(float), a["seconds"].to_numpy(float))
        data = self._cache[key]
        if data is None:
            return None
        flops = 2.0 * b * heads * seq * seq * head_dim * (1.0 if p == "fwd" else 2.5)
        sec, extra = _interp(*data, flops)
        if extra:
            self.extrapolated["attention"] += 1
        return sec * self.compute_scale

    def block_seconds(self, op: str, shape: str, dtype: str, pass_: str = "fwd") -> float | None:
        """A whole measured block (``block``, ``embedding_block``, ``head_block``) of exactly
        this shape key (calibrate/blocks.py: block_shape), or None: never interpolated, since
        a block's time depends on every one of its dimensions. A block measured in a group of
        processes (calibrate/group_blocks.py: `group_size` 2) was slowed by the other one
        computing beside it: its time is taken back to one process's by the concurrency rows'
        slowdown at that count, then priced as every block is (`compute_scale`)."""
        rows = self.table[(self.table["kind"] == "block") & (self.table["op"] == op) & (self.table["shape"] == shape)
                          & (self.table["dtype"] == _dtype(dtype)) & (self.table["pass"] == _pass(pass_))]
        if rows.empty:
            return None
        together = int(rows["group_size"].fillna(1).max())
        alone = max(1.0, slowdown(self.table, together) or 1.0) if together > 1 else 1.0
        return float(rows["seconds"].median()) / alone * self.compute_scale

    def executor_host_seconds(self, block: str, what: str, shape: str, dtype: str) -> float | None:
        """The executor's optimizer step (`what` "step") or the host copies around one bucket's
        all-reduce ("grad_copies") over one block's parameters at exactly this shape key, or
        None (calibrate/blocks.py). Measured by one process, priced as every block is."""
        key = ("host", block, what, shape, _dtype(dtype))
        if key not in self._cache:  # asked once per bucket and step by the engine
            rows = self.table[(self.table["kind"] == "optimizer") & (self.table["op"] == f"{block}.{what}")
                              & (self.table["shape"] == shape) & (self.table["dtype"] == key[-1])]
            self._cache[key] = None if rows.empty else float(rows["seconds"].median())
        return None if self._cache[key] is None else self._cache[key] * self.compute_scale

    def block_measured_with_group(self, op: str, shape: str, dtype: str) -> bool:
        """Whether `block_seconds` of this block holds its collectives: measured by processes
        joined in their tensor- or context-parallel group (calibrate/group_blocks.py)."""
        rows = self.table[(self.table["kind"] == "block") & (self.table["op"] == op) & (self.table["shape"] == shape)
                          & (self.table["dtype"] == _dtype(dtype))]
        return bool((rows["group_size"].fillna(1) > 1).any())

    def collective_seconds(self, op: str, nbytes: float, group_size: int) -> float | None:
        """Seconds of a collective moving ``nbytes`` (nccl-tests size) among ``group_size`` ranks."""
        name = op.lower().replace("-", "_")
        name = collective_named(name.replace("_", "")) or name
        key = ("coll", name)
        if key not in self._cache:
            c = self.table[(self.table["kind"] == "collective") & (self.table["op"] == name)]
            self._cache[key] = None if c.empty else {
                int(g): _curve(rows["bytes"].to_numpy(float), rows["seconds"].to_numpy(float))
                for g, rows in c.groupby("group_size")}
        curves = self._cache[key]
        if curves is None:
            return None
        if nbytes <= 0 or (group_size < 2 and name != "send_recv"):
            return 0.0
        n = max(int(group_size), 2)
        g0 = min(curves, key=lambda g: (abs(math.log(g / n)), -g))
        sec, extra = _interp(*curves[g0], float(nbytes))
        if extra:
            self.extrapolated["collective"] += 1
        return sec * bus_factor(name, n) / bus_factor(name, g0)

    # ------------------------------------------------------------------ reporting
    def has(self, kind: str, dtype: str | None = None) -> bool:
        t = self.table[self.table["kind"] == kind]
        if dtype is not None:
            t = t[t["dtype"] == _dtype(dtype)]
        return not t.empty

    def summary(self) -> dict:
        """Measured ranges, e.g. for reports: kind -> {rows, dtypes, ...}."""
        out = {}
        for kind, t in self.table.groupby("kind"):
            info = {"rows": len(t), "dtypes": sorted(x for x in t["dtype"].unique() if x)}
            if kind == "gemm":
                r = t["tflops"].dropna()
                info["tflops"] = (float(r.min()), float(r.max())) if len(r) else None
            if kind == "collective":
                info["bytes"] = (float(t["bytes"].min()), float(t["bytes"].max()))
                info["group_sizes"] = sorted(int(g) for g in t["group_size"].unique())
            out[kind] = info
        return out

    def device_mismatch(self, gpu: str) -> str | None:
        """Why this profile's kernel times are not `gpu`'s (a GPU preset), from its provenance;
        None where it was measured on that GPU or its device is not named."""
        from ..cluster.gpus import preset_named_in
        pv, name = self.provenance, str(self.provenance.get("device_name") or "")
        if pv.get("device") == "cpu" or set(self.table.device) == {"cpu"}:
            cpu = pv.get("cpu_model") or name or "unnamed"
            return f"measured on a CPU ({cpu}), so its times are not cluster.gpu {gpu}'s"
        measured = preset_named_in(name) if name else None
        if measured is not None and measured != gpu:
            return f"measured on {name} (preset {measured}), so its times are not cluster.gpu {gpu}'s"
        return None

    @property
    def unstable(self) -> list[str]:
        """Why the calibration that wrote this profile distrusted its own measurements."""
        return list(self.provenance.get("unstable") or [])

    def describe(self, kind: str = "compute") -> str:
        """One line naming the source, for ``sim3d run --explain``."""
        where = str(self.path) if self.path else "<in-memory profile>"
        if self.path:
            try:
                where = str(self.path.resolve().relative_to(Path.cwd().resolve()))
            except ValueError:
                pass
        pv = self.provenance
        bits = [pv.get("device_name") or pv.get("device") or "unknown device"]
        if pv.get("torch"):
            bits.append(f"torch {pv['torch']}")
        if pv.get("cuda"):
            bits.append(f"CUDA {pv['cuda']}")
        if pv.get("nccl") and kind in ("collective", "collectives"):
            bits.append(f"NCCL {pv['nccl']}")
        if pv.get("date"):
            bits.append(str(pv["date"])[:10])
        if not pv:
            bits = ["no provenance file"]
        text = f"profile {where} ({', '.join(bits)})"
        if self.unstable:
            text += "; FLAGGED UNSTABLE: " + "; ".join(self.unstable)
        if kind in ("compute", "kernels", "all"):
            kinds = [k for k in self.extrapolated if k != "collective"]
            if self.compute_scale != 1.0:
                text += f"; x{self.compute_scale:.2f}: {self.ranks} ranks computing at once on this CPU (measured)"
        elif kind in ("collective", "collectives"):
            kinds = ["collective"]
        else:
            kinds = [kind]
        n = sum(self.extrapolated[k] for k in kinds)
        if n:
            text += (f"; {n} {'/'.join(sorted(kinds))} lookup(s) beyond the measured range "
                     "(efficiency clamped at the edge)")
        return text

    def __repr__(self) -> str:
        return f"Profile({str(self.path) if self.path else '<memory>'}, {len(self.table)} rows)"


def load_profile(scenario):
    """The scenario's calibration profile (`costs.profile`), or None."""
    if not scenario.costs.profile:
        return None
    try:
        profile = Profile.load(scenario.costs.profile)
    except ProfileError as e:
        raise ScenarioError(f"costs.profile: {e}") from None
    # the executed run's ranks: a process each on one machine (sim3d execute)
    return profile.shared_by(scenario.world_size)


def profile_warnings(scenario, profile=None) -> list[str]:
    """What a user should know about the scenario's calibration profile: measured on another
    device than `cluster.gpu`, or flagged unstable when measured. Loads it (a bad file raises)
    unless `profile` is given."""
    profile = profile if profile is not None else load_profile(scenario)
    if profile is None:
        return []
    where = f"costs.profile {scenario.costs.profile}"
    out = [f"{where}: {why}"] if (why := profile.device_mismatch(scenario.cluster.gpu)) else []
    precision = scenario.training.precision
    wanted = "bf16" if precision == "fp8" else precision  # what ComputeModel looks up (FP8 GEMMs aside)
    measured = sorted(set(profile.table.loc[profile.table["kind"] != "collective", "dtype"]))
    if measured and wanted not in measured:
        out.append(f"{where} times its kernels in {', '.join(measured)}, not the {wanted} of training.precision="
                   f"{precision}: compute is priced as cluster.gpu {scenario.cluster.gpu}'s roofline, not measured "
                   f"(calibrate again with --scenario, which measures in the scenario's precision)")
    if profile.unstable:
        out.append(f"{where} was flagged unstable when measured: " + "; ".join(profile.unstable))
    return out

"""``run_calibration``: measure kernels and collectives, write the profile CSV + provenance JSON.

Precision: kernels run in ``dtype`` when given; otherwise in the first scenario's precision
when scenarios are given (an fp8 scenario is measured in bf16, and on GPUs with FP8 tensor
cores every GEMM shape is also measured in FP8), else bf16 on CUDA and fp32 on CPU: without a
scenario a CPU profile stands for fp32 training, since CPU bf16 matmuls go through slow
conversion paths that say nothing about a GPU's bf16 tensor cores. With one, it prices that
scenario executed on this CPU (`sim3d execute`), which computes in the scenario's format.

Threads: on a CPU the kernels run on one thread unless ``threads`` says otherwise, as every
rank of `sim3d execute` does (sim3d/executor/runtime.py, run_rank: torch.set_num_threads(1)).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from .concurrency import COUNTS, measure_concurrency
from .profile_io import default_path, provenance, write_csv, write_provenance
from .shapes import KernelPlan, default_plan, scenario_plan


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _resolve_dtype(device: str, dtype: str | None, scenario) -> tuple[str, str | None]:
    if dtype:
        return dtype, None
    if device == "cpu" and scenario is None:
        return "fp32", "cpu: fp32 by default (CPU bf16 matmul timings are unrepresentative)"
    want = scenario.training.precision if scenario is not None else "bf16"
    if want == "fp8":
        return "bf16", "fp8 scenario: 16-bit kernels measured in bf16; GEMMs also in FP8 where the GPU has FP8 tensor cores"
    return want, None


def _check_writable(path: Path) -> None:
    if path.suffix.lower() != ".csv":
        raise ValueError(f"--out {path}: a profile is a .csv file (its provenance goes beside it as .json)")
    if path.is_dir():
        raise ValueError(f"--out {path}: is a folder, expected a .csv file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out {path}: its folder cannot be created ({e.strerror})") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path}: the folder {path.parent} is not writable")
    for existing in (path, path.with_suffix(".json")):
        if existing.exists() and not os.access(existing, os.W_OK):
            raise ValueError(f"--out {path}: {existing} exists and is not writable")


def run_calibration(device: str = "cpu", quick: bool = False, scenario_path: str | list[str] | None = None,
                    out: str | None = None, progress: Callable[[str], None] | None = None, *,
                    dtype: str | None = None, kernels: bool = True, collectives: bool = True,
                    plan: KernelPlan | None = None, sizes: list[int] | None = None,
                    group_sizes: list[int] | None = None, collective_ops: tuple[str, ...] | None = None,
                    threads: int | None = None, rounds: int | None = None,
                    processes: tuple[int, ...] | None = None) -> Path:
    """Measure, write ``out`` (default ``calibrate/profiles/<device-slug>.csv``) and its
    ``.json`` provenance; return the CSV path.

    ``rounds``: how often the kernel plan is measured (default quick 2, full 3; min of medians).
    ``threads`` sets ``torch.set_num_threads`` for the kernel benchmarks (default: 1 on a CPU,
    as the executor's ranks run; torch's own on CUDA).
    ``scenario_path``: one scenario file or several; each one's layer shapes are measured.
    ``plan`` replaces the default kernel grid (the scenarios' shapes are added to it);
    ``sizes`` / ``group_sizes`` / ``collective_ops`` replace the collective sweep and
    ``processes`` the process counts of the CPU concurrency sweep (tests use these to stay
    small). Under torchrun (CUDA) every rank must call this; rank 0 measures kernels and
    writes the files, the others return the path after the collectives.
    """
    import torch  # noqa: F401 - fail early with a clear message if torch is missing
    from . import collectives as coll
    from .noise import stability
    from .kernels import KernelBench

    say = progress or (lambda _m: None)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda requested but torch.cuda.is_available() is False")
    paths = [scenario_path] if isinstance(scenario_path, str) else list(scenario_path or [])
    scenarios = []
    if paths:
        from sim3d.scenario.load import load_scenario
        scenarios = [load_scenario(p) for p in paths]
    scenario = scenarios[0] if scenarios else None
    dt, note = _resolve_dtype(device, dtype, scenario)
    path = Path(out) if out else default_path(device)
    _check_writable(path)  # before minutes of measuring, not after
    t_start = time.perf_counter()
    rows: list[dict] = []
    extra: dict = {"dtype_note": note, "scenario_path": paths or None, "loadavg_start": _load()}
    if device == "cpu" and extra["loadavg_start"] and extra["loadavg_start"][0] > 0.5 * (os.cpu_count() or 1):
        say(f"warning: load average {extra['loadavg_start'][0]:.1f} on {os.cpu_count()} cores; "
            "other processes will slow the measurements (recorded in the provenance)")

    if collectives:
        ops = collective_ops or coll.OPS
        crow, cinfo = coll.measure_collectives(device, quick, dtype=dt if device == "cuda" else "fp32",
                                               sizes=sizes, group_sizes=group_sizes, ops=ops, progress=say)
        rows += crow
        extra["collectives"] = cinfo
        if device == "cuda" and torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
            return path

    if kernels:
        kplan = plan if plan is not None else default_plan(device, quick)
        if scenarios:
            kplan = KernelPlan(**{k: list(v) if isinstance(v, list) else dict(v) for k, v in vars(kplan).items()})
            for sc in scenarios:
                kplan.extend(scenario_plan(sc))
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = dt == "fp32"   # as training frameworks do
        if threads or device == "cpu":
            torch.set_num_threads(threads or 1)
        bench = KernelBench(device, dt, quick, progress=say, rounds=rounds)
        t0 = time.perf_counter()
        rows = bench.run(kplan) + rows
        if scenarios:
            from .blocks import measure_blocks
            extra["blocks"] = {}
            for sc in scenarios:
                block_rows, skipped = measure_blocks(sc, device, dt, quick, say)
                rows = block_rows + rows
                extra["blocks"][sc.name] = skipped or f"{len(block_rows)} rows"
            if device == "cpu":  # a tp or cp layer with its collectives, as two of the executor's ranks run it
                from sim3d.costs.compute import block_shape

                from .group_blocks import measure_group_blocks
                alone = [r["seconds"] for r in rows if r.get("kind") == "block" and r.get("op") == "block"
                         and r.get("shape") == block_shape(scenarios[0])]
                grouped, skipped = measure_group_blocks(scenarios[0], dt, quick, say, sum(alone) if alone else None)
                rows = grouped + rows
                extra["group_blocks"] = skipped or f"{len(grouped)} rows"
            if device == "cpu":  # the executor's ranks share this CPU: how much they slow each other
                shared, skipped = measure_concurrency(scenarios[0], dt, quick, say, processes)
                rows = shared + rows
                alone = sum(r["seconds"] for r in shared if r["group_size"] == 1)
                extra["concurrency"] = skipped or {"slowdown (fwd + bwd vs 1 process)": {
                    n: round(sum(r["seconds"] for r in shared if r["group_size"] == n) / alone, 3)
                    for n in sorted({r["group_size"] for r in shared})}}
        extra["kernels"] = {"seconds": round(time.perf_counter() - t0, 1), "rounds": bench.rounds,
                            "statistic": "min over rounds of the median of repeats", "skipped": bench.skipped,
                            "noise": bench.noise,
                            **{k: v for k, v in kplan.notes.items() if v}}

    extra["wall_s"] = round(time.perf_counter() - t_start, 1)
    extra["loadavg_end"] = _load()
    extra["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    # our own busy processes at the end: the kernels' threads, or the concurrency sweep's processes
    own = max([torch.get_num_threads(),
               *((processes or COUNTS[quick]) if isinstance(extra.get("concurrency"), dict) else ())])
    extra["unstable"] = stability(extra.get("kernels", {}).get("noise", {}), extra["loadavg_start"],
                                  extra["loadavg_end"], own_threads=own if device == "cpu" else 0)
    for reason in extra["unstable"]:
        say(f"warning: unstable measurement: {reason} (flagged in the provenance; every prediction "
            "using this profile will say so)")
    write_csv(rows, path)
    write_provenance(provenance(device, quick, dt, extra), path)
    say(f"wrote {len(rows)} measurements to {path} (+ {path.with_suffix('.json').name})")
    return path

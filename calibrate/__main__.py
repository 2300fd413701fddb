"""``python -m sim3d_calibrate [--device cpu|cuda] [--quick] [--scenario S]... [--out PATH] [--dtype D] [--fit]``

``--fit`` then derives the analytical model's constants from the new profile (sim3d/costs/fit.py)
and writes them, as a GPU preset record with its cross-validated error, to <profile>.fit.json;
``--fit --profile PATH`` does that for an existing profile without measuring.
"""
from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim3d_calibrate",
                                description="Measure kernels and collectives; write a sim3d profile.")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="default: cuda if available, else cpu")
    p.add_argument("--quick", action="store_true", help="small grids (about 2 minutes on a 2-core CPU)")
    p.add_argument("--scenario", action="append", default=None,
                   help="also measure this scenario's layer shapes at its tp (repeatable)")
    p.add_argument("--out", default=None, help="CSV path (default calibrate/profiles/<device-slug>.csv)")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default=None,
                   help="kernel precision (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads for the kernels")
    p.add_argument("--rounds", type=int, default=None, help="kernel rounds (default quick 2, full 3)")
    p.add_argument("--no-kernels", action="store_true", help="skip the kernel benchmarks")
    p.add_argument("--no-collectives", action="store_true", help="skip the collective benchmarks")
    p.add_argument("--fit", action="store_true", help="derive the model's constants from the profile (<profile>.fit.json)")
    p.add_argument("--profile", default=None, help="with --fit: fit this existing profile, measure nothing")
    p.add_argument("--gpu", default=None, help="with --fit: the preset to fit (default: the one the profile names)")
    a = p.parse_args(argv)
    if a.profile is not None:
        if not a.fit:
            p.error("--profile is for --fit")
        return _fit(a.profile, a.gpu)

    from . import run_calibration
    device = a.device
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)
    try:
        path = run_calibration(device, a.quick, a.scenario, a.out, progress, dtype=a.dtype,
                               kernels=not a.no_kernels, collectives=not a.no_collectives, threads=a.threads, rounds=a.rounds)
    except (ValueError, RuntimeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return _fit(path, a.gpu) if a.fit else 0


def _fit(path: str, gpu: str | None) -> int:
    from sim3d.costs.fit import describe, fit_file
    try:
        result, written = fit_file(path, gpu)
    except (ValueError, KeyError) as exc:
        print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    print("\n".join(describe(result)))
    print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GEMM throughput under sustained load: does the GPU hold its clock?

``python -m sim3d_calibrate.sustained [--seconds 60] [--shape M,N,K] [--dtype bf16|fp8] [--out FILE.json]``

Kernel benchmarks run for milliseconds at a time, so they see the boost clock; a training
step keeps the tensor cores busy for seconds, long enough to reach the board's power limit,
where the SM clock drops. This runs back-to-back GEMMs for ``--seconds`` after two idle
seconds and reports the achieved TFLOP/s per window (the first ones short, to catch the boost
clock before the power limit bites) beside the SM clock, power draw, temperature and throttle
reasons that ``nvidia-smi`` reads in a sampling thread. It only reads the card's state; it
changes no clock or power setting.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

QUERY = "clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active"


def _smi() -> dict | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    vals = [v.strip() for v in out.split(",")]
    if len(vals) != len(QUERY.split(",")):
        return None
    return dict(zip(QUERY.split(","), vals))


def _operands(m: int, n: int, k: int, dtype: str):
    """Two input sets; FP8 as Transformer Engine runs it (E4M3, per-tensor scale, bf16 out)."""
    if dtype == "bf16":
        sets = [(torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                 torch.randn(k, n, device="cuda", dtype=torch.bfloat16)) for _ in range(2)]
        return sets, torch.matmul
    one = torch.ones((), device="cuda")
    sets = [((torch.randn(m, k, device="cuda") * 0.5).to(torch.float8_e4m3fn),
             (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn).t()) for _ in range(2)]
    return sets, lambda x, w: torch._scaled_mm(x, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def run(seconds: float, shape: tuple[int, int, int], dtype: str = "bf16") -> dict:
    m, n, k = shape
    sets, mm = _operands(m, n, k, dtype)
    flops = 2.0 * m * n * k
    samples: list[dict] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            row = _smi()
            if row:
                samples.append({"t": time.perf_counter(), **row})
            stop.wait(1.0)
    for i in range(5):
        mm(*sets[i % 2])
    torch.cuda.synchronize()
    time.sleep(2.0)
    start = time.perf_counter()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    windows, i = [], 0
    while time.perf_counter() - start < seconds:
        window = 0.25 if time.perf_counter() - start < 1.0 else 2.0
        t0, count = time.perf_counter(), 0
        ev0 = torch.cuda.Event(enable_timing=True)
        ev1 = torch.cuda.Event(enable_timing=True)
        ev0.record()
        while time.perf_counter() - t0 < window:
            for _ in range(10):
                mm(*sets[i % 2])
                i += 1
                count += 1
            torch.cuda.synchronize()
        ev1.record()
        torch.cuda.synchronize()
        gpu_s = ev0.elapsed_time(ev1) / 1e3
        windows.append({"t_s": round(t0 - start, 2), "gemms": count, "tflops": round(count * flops / gpu_s / 1e12, 1)})
    stop.set()
    sampler.join()
    for s in samples:
        s["t"] = round(s["t"] - start, 2)
    steady = [w["tflops"] for w in windows if w["t_s"] >= 10.0]
    return {"shape": list(shape), "dtype": dtype, "seconds": seconds,
            "burst_tflops": windows[0]["tflops"],
            "sustained_tflops": round(sorted(steady)[len(steady) // 2], 1) if steady else None,
            "windows": windows, "nvidia_smi": samples}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim3d_calibrate.sustained", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--shape", default="8192,8192,8192", help="M,N,K")
    p.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: sustained needs a CUDA GPU", file=sys.stderr)
        return 2
    from .profile_io import provenance
    shape = tuple(int(x) for x in a.shape.split(","))
    result = {"provenance": provenance("cuda", False, a.dtype), **run(a.seconds, shape, a.dtype)}
    print(f"{a.dtype} {a.shape}: burst (first 0.25 s) {result['burst_tflops']} TFLOP/s, sustained (median "
          f"after 10 s) {result['sustained_tflops']} TFLOP/s", flush=True)
    for s in result["nvidia_smi"][:: max(1, len(result["nvidia_smi"]) // 8)]:
        print("  ", s, flush=True)
    text = json.dumps(result, indent=2) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

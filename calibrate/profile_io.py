"""Profile file format: the fixed CSV schema, the provenance JSON, and the default path.

A profile is a CSV with exactly the columns in :data:`COLUMNS` (one row per measurement),
plus a JSON provenance file with the same stem. Empty cells mean "not applicable".

=============  ===============================================================================
column         meaning
=============  ===============================================================================
op             what was measured: ``gemm`` (general grid), ``gemm.qkv`` / ``gemm.attn_out`` /
               ``gemm.mlp_up`` / ``gemm.mlp_gate`` / ``gemm.mlp_down`` / ``gemm.lm_head``
               (a scenario's layer GEMMs), ``attention``, ``layernorm``, ``rmsnorm``, ``gelu``,
               ``attention.flash`` / ``attention.cudnn`` (one SDPA backend forced; CUDA only),
               ``swiglu``, ``softmax``, ``dropout``, ``add``, ``embedding``, ``cross_entropy``,
               ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``send_recv``,
               ``block`` / ``embedding_block`` / ``head_block`` (the executor's own modules),
               ``<block>.step`` / ``<block>.grad_copies`` (the executor's optimizer step and
               the copies around a data-parallel all-reduce over that block's parameters)
kind           ``gemm | attention | elementwise | norm | softmax | embedding | loss | collective |
               block | concurrency | optimizer`` (concurrency: the executor's block in
               ``group_size`` processes at once on a CPU, calibrate/concurrency.py; optimizer:
               the ``.step`` and ``.grad_copies`` rows, calibrate/blocks.py)
pass           ``fwd`` or ``bwd`` (kernels; ``bwd`` = all input and weight gradients of the op);
               empty for collectives and optimizer rows
shape          human-readable shape: ``m=..,n=..,k=..`` (GEMM: (m,k) x (k,n)),
               ``b=..,h=..,s=..,d=..`` (attention), ``rows=..,cols=..`` (row-wise ops),
               ``numel=..`` (pure elementwise), ``bytes=..,n=..`` (collectives)
m, n, k        GEMM dimensions; empty otherwise
numel          elements of the op's main tensor: GEMM output m*n, attention query b*h*s*d,
               row-wise / elementwise input, logits for cross_entropy, embedding output;
               for collectives the element count of the nccl-tests "size" buffer
bytes          kernels: estimated bytes moved to/from memory (reads + writes, one pass);
               collectives: message size in the nccl-tests convention (all_reduce: the buffer;
               all_gather: the gathered output; reduce_scatter: the input; all_to_all: the
               per-rank buffer; send_recv: the message)
group_size     ranks taking part (collectives), processes running at once (concurrency);
               empty for kernels
dtype          ``fp32 | bf16 | fp16 | fp8`` (fp8: E4M3 GEMMs through ``torch._scaled_mm``)
device         ``cpu`` or ``cuda``
seconds        wall time of one call: median of the repeats (kernels: the smallest of the
               per-round medians, see calibrate/kernels.py); on a CPU the mean for blocks,
               concurrency and collectives (calibrate/timing.py says why)
tflops         achieved TFLOP/s (GEMM: 2mnk fwd, 4mnk bwd; attention: causal FLOPs
               2*b*h*s*s*d fwd, 2.5x that bwd); empty for memory-bound ops and collectives
gbps           kernels: bytes / seconds in GB/s (1e9); collectives: *bus* bandwidth in GB/s as
               nccl-tests defines it (algbw = bytes/seconds; busbw = algbw * 2(n-1)/n for
               all_reduce, (n-1)/n for all_gather / reduce_scatter / all_to_all, 1 for send_recv)
=============  ===============================================================================
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

COLUMNS = ["op", "kind", "pass", "shape", "m", "n", "k", "numel", "bytes", "group_size",
           "dtype", "device", "seconds", "tflops", "gbps"]
KINDS = ("gemm", "attention", "elementwise", "norm", "softmax", "embedding", "loss", "collective", "block",
         "concurrency")
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"



def make_row(**kw) -> dict:
    unknown = set(kw) - set(COLUMNS)
    if unknown:
        raise KeyError(f"unknown profile columns: {sorted(unknown)}")
    return {c: kw.get(c, "") for c in COLUMNS}


def _fmt(v) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: _fmt(r.get(c, "")) for c in COLUMNS})


def cpu_model_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def device_name(device: str) -> str:
    if device == "cuda":
        import torch
        return torch.cuda.get_device_name(0)
    return cpu_model_name()


def default_path(device: str) -> Path:
    """Where a calibration without --out writes: profiles/<device>.csv under the working
    directory, never PROFILES_DIR inside the package, whose committed profiles (with their
    provenance) a re-run would otherwise overwrite."""
    name = device_name(device)
    s = slug(name)
    if device == "cpu" and not s.startswith("cpu"):
        s = f"cpu-{s}"
    return Path.cwd() / "profiles" / f"{s}.csv"


def provenance(device: str, quick: bool, dtype: str, extra: dict | None = None) -> dict:
    import torch
    cuda = device == "cuda"
    nccl = None
    if cuda:
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - NCCL may be absent from this build
            nccl = None
    info = {
        "device": device,
        "device_name": device_name(device),
        "device_count": torch.cuda.device_count() if cuda else 1,
        "cpu_model": cpu_model_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "nccl": nccl,
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]) if sys.argv else "",
        "quick": quick,
        "dtype": dtype,
        "schema": COLUMNS,
    }
    info.update(extra or {})
    return info


def write_provenance(info: dict, csv_path: Path) -> Path:
    p = csv_path.with_suffix(".json")
    p.write_text(json.dumps(info, indent=2, sort_keys=False) + "\n")
    return p

"""Collective benchmarks over torch.distributed (gloo on CPU, NCCL on CUDA).

One worker process per rank (``torch.multiprocessing`` spawn on 127.0.0.1 and a free port;
under torchrun the caller's processes are used). Every group size is a sub-group of ranks
``0..g-1``. For each (op, size): warm-up, then repeats of [barrier, op, synchronize], each
rank times its calls, the per-call maximum over ranks is taken and the profile stores the
median on GPUs and the mean on CPUs, over at least ``CPU_MIN_REPEATS`` calls there: gloo's
messages between processes that share a CPU wait a scheduler tick now and then (a 16 KiB
all-reduce on a 2-vCPU VM: median 0.45 ms, but one call in five takes 4 ms more, a mean of
1.1 ms, which is what a rank issuing many of them pays; timing.py). Sizes and bandwidths
follow nccl-tests (see :mod:`sim3d_calibrate.profile_io`).

Send/recv is a ping-pong between ranks 0 and 1 of the group; one-way time = round trip / 2.
Ops the backend does not support are skipped and listed in the provenance; tensor APIs
(``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_to_all_single``) fall back to
the list APIs where missing, and the variant used is recorded. Nothing hangs: the process
group has a timeout and the parent kills the workers at an overall deadline.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sim3d.costs.collectives import bus_factor

from .profile_io import make_row
from .timing import STATISTICS

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
# Repeats of a CPU collective: the mean of a cost that one call in five pays is within about
# 10% after 200 calls (binomial spread sqrt(0.2 * 0.8 / 200) = 2.8% of the calls, 0.11 ms of 1.1).
CPU_MIN_REPEATS, CPU_MAX_REPEATS = 200, 400
KiB, MiB = 1 << 10, 1 << 20


def default_sizes(device: str, quick: bool) -> list[int]:
    top = 16 * MiB if quick else (1024 * MiB if device == "cuda" else 256 * MiB)
    step = 4 if (quick or device == "cpu") else 2
    sizes, s = [], KiB
    while s <= top:
        sizes.append(s)
        s *= step
    return sizes


def default_group_sizes(device: str, quick: bool, world: int | None = None) -> list[int]:
    if device == "cpu":
        return [2] if quick else [2, 4]
    world = world or torch.cuda.device_count()
    out, g = [], 2
    while g <= world:
        out.append(g)
        g *= 2
    if world >= 2 and world not in out:
        out.append(world)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- worker side
def _tensor_api(new: str, old: str):
    """The single-tensor variant under its current name (torch 2.13 renamed ``*_tensor``)."""
    return getattr(dist, new, None) or getattr(dist, old)


def _call(op: str, group, g: int, buf: dict, api: dict) -> None:
    """One call of ``op`` with the pre-allocated buffers; picks the API variant once."""
    x, out, small = buf["x"], buf["out"], buf["small"]
    if op == "all_reduce":
        dist.all_reduce(x, group=group)
    elif op == "all_gather":
        if api.get(op) != "list":
            _tensor_api("all_gather_single", "all_gather_into_tensor")(out, small, group=group)
        else:
            dist.all_gather(list(out.chunk(g)), small, group=group)
    elif op == "reduce_scatter":
        if api.get(op) != "list":
            _tensor_api("reduce_scatter_single", "reduce_scatter_tensor")(small, x, group=group)
        else:
            dist.reduce_scatter(small, list(x.chunk(g)), group=group)
    elif op == "all_to_all":
        if api.get(op) != "list":
            dist.all_to_all_single(out, x, group=group)
        else:
            dist.all_to_all(list(out.chunk(g)), list(x.chunk(g)), group=group)
    elif op == "send_recv":
        if dist.get_rank() == 0:
            dist.send(x, dst=1)
            dist.recv(x, src=1)
        else:
            dist.recv(x, src=0)
            dist.send(x, dst=0)
    else:
        raise ValueError(f"unknown collective {op}")


def _bench_group(cfg: dict, g: int, group, rows: list, info: dict, flush: Callable[[], None]) -> None:
    rank, dev = dist.get_rank(), cfg["device"]
    tdev = torch.device("cuda", torch.cuda.current_device()) if dev == "cuda" else torch.device("cpu")
    dtype = getattr(torch, cfg["torch_dtype"])
    es = torch.tensor([], dtype=dtype).element_size()
    api: dict = {}

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    for op in cfg["ops"]:
        if op == "send_recv" and g != 2:
            continue
        for nbytes in cfg["sizes"]:
            numel = max(g, (nbytes // es) // g * g)
            buf = {"x": torch.randn(numel, device=tdev).to(dtype), "out": torch.empty(numel, device=tdev, dtype=dtype),
                   "small": torch.randn(numel // g, device=tdev).to(dtype)}
            try:
                try:
                    _call(op, group, g, buf, api)
                except (RuntimeError, NotImplementedError, AttributeError):
                    if op not in ("all_gather", "reduce_scatter", "all_to_all") or op in api:
                        raise
                    api[op] = "list"   # recorded as the list API (all_gather / reduce_scatter / all_to_all)
                    _call(op, group, g, buf, api)
                api.setdefault(op, {"all_gather": _tensor_api("all_gather_single", "all_gather_into_tensor").__name__,
                                    "reduce_scatter": _tensor_api("reduce_scatter_single", "reduce_scatter_tensor").__name__,
                                    "all_to_all": "all_to_all_single", "send_recv": "send/recv ping-pong"
                                    }.get(op, op))
            except (RuntimeError, NotImplementedError, AttributeError, ValueError) as exc:
                info["skipped"][f"{op}@{g}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                break
            sync()
            t0 = time.perf_counter()
            for _ in range(cfg["warmup"]):
                _call(op, group, g, buf, api)
            sync()
            est = torch.tensor([(time.perf_counter() - t0) / max(cfg["warmup"], 1)], device=tdev)
            dist.all_reduce(est, op=dist.ReduceOp.MAX, group=group)
            reps = int(min(cfg["max_repeats"], max(cfg["min_repeats"], cfg["budget_s"] / max(est.item(), 1e-9))))
            times = []
            for _ in range(reps):
                dist.barrier(group=group)
                sync()
                if dev == "cuda":
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    _call(op, group, g, buf, api)
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) / 1e3)
                else:
                    t = time.perf_counter()
                    _call(op, group, g, buf, api)
                    times.append(time.perf_counter() - t)
            tt = torch.tensor(times, device=tdev, dtype=torch.float64)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX, group=group)
            sec = STATISTICS["median" if dev == "cuda" else "mean"](tt.tolist())
            if op == "send_recv":
                sec /= 2.0  # ping-pong round trip -> one way
            size = numel * es
            if rank == 0:
                rows.append(make_row(
                    op=op, kind="collective", shape=f"bytes={size},n={g}", numel=numel, bytes=size,
                    group_size=g, dtype=cfg["dtype"], device=dev, seconds=sec,
                    gbps=size / sec / 1e9 * bus_factor(op, g)))
            del buf
        if rank == 0:
            info["api"][op] = {"list": f"{op} (list API)"}.get(api.get(op, "skipped"), api.get(op, "skipped"))
            info.setdefault("log", []).append(f"{op} group={g} done")
            flush()


def run_worker(cfg: dict) -> tuple[list, dict]:
    """Body run by every rank once the default process group exists."""
    rows: list = []
    info: dict = {"skipped": {}, "api": {}}
    world = dist.get_world_size()

    def flush():
        if dist.get_rank() == 0 and cfg.get("result_path"):
            Path(cfg["result_path"]).write_text(json.dumps({"rows": rows, "info": info}))
    for g in cfg["group_sizes"]:
        if g > world:
            info["skipped"][f"*@{g}"] = f"group size {g} > world size {world}"
            continue
        group = None if g == world else dist.new_group(ranks=list(range(g)))
        if dist.get_rank() < g:
            _bench_group(cfg, g, group, rows, info, flush)
        dist.barrier()
    flush()
    return rows, info


def _spawned(rank: int, world: int, port: int, cfg: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    if cfg["device"] == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    else:
        torch.set_num_threads(1)
    dist.init_process_group(cfg["backend"], rank=rank, world_size=world,
                            timeout=timedelta(seconds=cfg["pg_timeout_s"]))
    try:
        run_worker(cfg)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- parent side
def measure_collectives(device: str, quick: bool, dtype: str = "fp32", sizes: list[int] | None = None,
                        group_sizes: list[int] | None = None, ops: tuple[str, ...] = OPS,
                        timeout_s: float | None = None,
                        progress: Callable[[str], None] | None = None) -> tuple[list[dict], dict]:
    """Measure collectives; returns (profile rows, provenance info)."""
    progress = progress or (lambda _m: None)
    torch_dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype]
    cpu = device == "cpu"
    cfg = {"device": device, "backend": "nccl" if device == "cuda" else "gloo", "dtype": dtype,
           "torch_dtype": torch_dtype, "ops": list(ops),
           "sizes": list(sizes or default_sizes(device, quick)),
           "warmup": 2 if quick else 5, "min_repeats": CPU_MIN_REPEATS if cpu else 3,
           "max_repeats": CPU_MAX_REPEATS if cpu else (10 if quick else 30),
           "budget_s": 0.1 if quick else 0.5, "pg_timeout_s": 120 if quick else 600}
    info: dict = {"backend": cfg["backend"], "sizes": cfg["sizes"], "dtype": dtype,
                  "timing": "per call: barrier, op, synchronize; max over ranks; "
                            + (f"mean of {CPU_MIN_REPEATS}+ repeats" if cpu else "median of repeats"),
                  "send_recv": "ranks 0 and 1 only (group_size 2); one-way time = ping-pong round trip / 2"}

    if device == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:   # launched by torchrun
        if not dist.is_initialized():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl", timeout=timedelta(seconds=cfg["pg_timeout_s"]))
        world = dist.get_world_size()
        cfg["group_sizes"] = group_sizes or default_group_sizes(device, quick, world)
        info.update(group_sizes=cfg["group_sizes"], launcher="torchrun", world_size=world)
        rows, winfo = run_worker(cfg)
        info.update(winfo)
        return rows, info

    cfg["group_sizes"] = group_sizes or default_group_sizes(device, quick)
    world = max(cfg["group_sizes"], default=0)
    info.update(group_sizes=cfg["group_sizes"], launcher="torch.multiprocessing.spawn", world_size=world)
    if world < 2:
        info["skipped"] = {"*": f"needs >= 2 {'GPUs' if device == 'cuda' else 'processes'}; found {world}"}
        return [], info
    if device == "cpu" and "GLOO_SOCKET_IFNAME" not in os.environ and Path("/sys/class/net/lo").exists():
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"    # localhost only; inherited by the workers

    n_meas = len(cfg["sizes"]) * len(cfg["ops"]) * len(cfg["group_sizes"])
    timeout_s = timeout_s or (60 + 3 * n_meas * (cfg["budget_s"] + 0.5))
    with tempfile.TemporaryDirectory(prefix="sim3d-calib-") as tmp:
        cfg["result_path"] = str(Path(tmp) / "result.json")
        progress(f"collectives: {cfg['backend']}, {world} processes, group sizes {cfg['group_sizes']}, "
                 f"{len(cfg['sizes'])} sizes {cfg['sizes'][0]}..{cfg['sizes'][-1]} B")
        ctx = mp.start_processes(_spawned, args=(world, free_port(), cfg), nprocs=world,
                                 join=False, start_method="spawn")
        deadline, error, seen = time.monotonic() + timeout_s, None, 0
        try:
            while not ctx.join(timeout=1.0):
                log = _read(cfg["result_path"]).get("info", {}).get("log", [])
                for line in log[seen:]:
                    progress(f"collectives: {line}")
                seen = max(seen, len(log))
                if time.monotonic() > deadline:
                    error = f"timed out after {timeout_s:.0f} s; kept the results measured so far"
                    break
        except Exception as exc:  # noqa: BLE001 - a worker failed; keep partial results
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
                p.join(5)
        result = _read(cfg["result_path"])
    info.update(result.get("info", {}))
    info.pop("log", None)
    if error:
        info["error"] = error
        progress(f"collectives: {error}")
    return result.get("rows", []), info


def _read(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}

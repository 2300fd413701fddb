"""A calibration profile, and the step as it really ran, from PyTorch profiler traces.

`write_profile` turns the kernels of one or more ranks' traces (costs/kineto.py) into a profile
CSV in the schema `sim3d calibrate` writes (calibrate/profile_io.py: same columns, op names and
units), with its provenance JSON beside it, so that `costs.profile` prices a scenario from the
user's own stack. A row is one launching op's call: the seconds of every kernel it launched
(a cuBLAS GEMM with its split-K reduction and workspace memset, an attention call with its
pre- and post-processing kernels, as calibrate's timing of the op includes them), the median
over calls of the same shape. Its shape comes from the op's recorded input shapes
(``record_shapes=True``):

* ``gemm`` (pass ``fwd``): each ``aten::mm`` / ``addmm`` / ``_scaled_mm`` is one GEMM
  [m x k] @ [k x n]. A ``bwd`` row (calibrate's: both gradient GEMMs of a forward GEMM) is
  written where the trace holds both: dgrad [m x n] @ [n x k] and wgrad [n x m] @ [m x k] (a
  GEMM and its transpose are one problem to cuBLAS, so either orientation counts).
* ``attention`` and ``attention.flash`` / ``attention.cudnn`` (the backend its kernels name),
  forward and backward, from torch's SDPA ops and flash-attn's. Profiles time causal
  attention; a call the trace records as non-causal is left out, one whose causality is not
  recorded (no ``Concrete Inputs``) is taken as causal and counted in the provenance.
* ``layernorm``, ``rmsnorm``, ``softmax``, ``gelu``, ``dropout``: their aten ops, by the numel of
  the input.
* collectives (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``,
  ``send_recv``) of two or more ranks, sized as nccl-tests does. A collective's kernel also
  waits for the last rank to arrive, so where several ranks' traces are given, the k-th call
  of one group, op and size on every rank is one collective and its time is the shortest of
  theirs (the last to arrive waits least).

`step_truth` measures the traced steps (``ProfilerStep#N``): their times, each stream's busy
time, the communication no compute kernel hid, and the kernel time per kind.
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ScenarioError
from ..util.safe_files import replacing
from .collectives import bus_factor
from .kernel_price import MEMORY_KERNELS
from .kineto import COMM_KINDS, KINDS, NON_COMPUTE_KINDS, RankTrace
from .profile import COLUMNS

_DTYPES = {"c10::BFloat16": "bf16", "BFloat16": "bf16", "c10::Half": "fp16", "Half": "fp16", "float": "fp32",
           "Float": "fp32", "c10::Float8_e4m3fn": "fp8", "Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8"}
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
# torch's comm dtype names (c10 ScalarType) for sizes of collectives that move integers
_COMM_BYTES = {"Byte": 1, "Char": 1, "Bool": 1, "Short": 2, "Int": 4, "Long": 8, "Double": 8}
# Single GEMMs: op -> positions of the [m x k] and [k x n] operands in its Input Dims.
_GEMM_OPS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::_addmm_activation": (1, 2), "aten::_scaled_mm": (0, 1)}
# Attention ops: (layout of q, index of `is_causal` in Concrete Inputs, pass, position of q).
# Signatures from torch's native_functions.yaml and flash-attn's flash_attn_interface.py; the
# backward's first input is the output gradient, q and k follow it.
_ATTENTION_OPS = {
    "aten::_scaled_dot_product_flash_attention": ("bhsd", 4, "fwd", 0),
    "aten::_flash_attention_forward": ("bshd", 8, "fwd", 0),
    "aten::_scaled_dot_product_flash_attention_backward": ("bhsd", 11, "bwd", 1),
    "aten::_flash_attention_backward": ("bshd", 11, "bwd", 1),
    "aten::_scaled_dot_product_cudnn_attention": ("bhsd", 6, "fwd", 0),
    "aten::_cudnn_attention_forward": ("bhsd", 10, "fwd", 0),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("bhsd", 14, "bwd", 1),
    "aten::_cudnn_attention_backward": ("bhsd", 14, "bwd", 1),
    "aten::_scaled_dot_product_efficient_attention": ("bhsd", 6, "fwd", 0),
    "aten::_scaled_dot_product_efficient_attention_backward": ("bhsd", 11, "bwd", 1),
    "flash_attn::_flash_attn_forward": ("bshd", 5, "fwd", 0),
    "flash_attn::_flash_attn_backward": ("bshd", 11, "bwd", 1),
}
_BACKEND_ROWS = {"flash": "attention.flash", "cudnn": "attention.cudnn"}  # compute.py PROFILE_ATTENTION_ROWS
# Memory-bound ops whose profile rows the cost model reads (kernel_price.MEMORY_KERNELS): op -> (row op, kind, pass)
_MEMORY_OPS = {
    "aten::native_layer_norm": ("layernorm", "norm", "fwd"), "aten::native_layer_norm_backward": ("layernorm", "norm", "bwd"),
    "aten::_fused_rms_norm": ("rmsnorm", "norm", "fwd"), "aten::_fused_rms_norm_backward": ("rmsnorm", "norm", "bwd"),
    "aten::_softmax": ("softmax", "softmax", "fwd"), "aten::_softmax_backward_data": ("softmax", "softmax", "bwd"),
    "aten::gelu": ("gelu", "elementwise", "fwd"), "aten::gelu_backward": ("gelu", "elementwise", "bwd"),
    "aten::native_dropout": ("dropout", "elementwise", "fwd"),
    "aten::native_dropout_backward": ("dropout", "elementwise", "bwd"),
}
_PRICED_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def _dims(op, i) -> list[int] | None:
    d = op.dims[i] if i < len(op.dims) else None
    if isinstance(d, list) and d and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in d):
        return d
    return None


def _dtype(op, i) -> str | None:
    return _DTYPES.get(op.types[i]) if i < len(op.types) and isinstance(op.types[i], str) else None


def _row(op, kind, pass_, shape, seconds, dtype, numel, nbytes, flops=None, **extra) -> dict:
    return dict(op=op, kind=kind, **{"pass": pass_}, shape=shape, numel=numel, bytes=nbytes, dtype=dtype,
                device="cuda", seconds=seconds, tflops=flops / seconds / 1e12 if flops else None,
                gbps=nbytes / seconds / 1e9, **extra)


def _gemm(op, seconds, notes) -> list[dict]:
    a, b = _GEMM_OPS[op.name]
    x, w, dtype = _dims(op, a), _dims(op, b), _dtype(op, a)
    if x is None or w is None or len(x) != 2 or len(w) != 2 or x[1] != w[0] or dtype is None:
        notes["gemm calls without a recorded 2-D shape and dtype"] += 1
        return []
    (m, k), n = x, w[1]
    return [_row("gemm", "gemm", "fwd", f"m={m},n={n},k={k}", seconds, dtype, m * n, (m * k + k * n + m * n) * _BYTES[dtype],
                 2.0 * m * n * k, m=m, n=n, k=k)]


def _attention(op, seconds, backend, notes) -> list[dict]:
    layout, causal_at, pass_, q_at = _ATTENTION_OPS[op.name]
    q, k, dtype = _dims(op, q_at), _dims(op, q_at + 1), _dtype(op, q_at)
    if q is None or k is None or len(q) != 4 or len(k) != 4 or dtype is None:
        notes["attention calls without a recorded 4-D shape and dtype"] += 1
        return []
    causal = op.concrete[causal_at] if causal_at < len(op.concrete) else ""  # "True" / "False" / ""
    if causal == "False":
        notes["attention calls left out: not causal (profiles time causal attention)"] += 1
        return []
    if causal != "True":
        notes["attention calls taken as causal (causality not recorded)"] += 1
    b, h, s, d = q if layout == "bhsd" else (q[0], q[2], q[1], q[3])
    kvh = k[1] if layout == "bhsd" else k[2]
    io = (2 * b * h * s * d + 2 * b * kvh * s * d) * _BYTES[dtype]  # q, out, k, v: calibrate/kernels.py
    flops = 2.0 * b * h * s * s * d * (1.0 if pass_ == "fwd" else 2.5)
    shape = f"b={b},h={h},s={s},d={d}" + (f",kv={kvh}" if kvh != h else "")
    ops = ["attention"] + ([_BACKEND_ROWS[backend]] if backend in _BACKEND_ROWS else [])
    return [_row(name, "attention", pass_, shape, seconds, dtype, b * h * s * d, io * (1 if pass_ == "fwd" else 2), flops)
            for name in ops]


def _memory(op, seconds, notes) -> list[dict]:
    name, kind, pass_ = _MEMORY_OPS[op.name]
    x, dtype = _dims(op, 0), _dtype(op, 0)
    if x is None or dtype is None:
        notes[f"{name} calls without a recorded shape and dtype"] += 1
        return []
    numel = math.prod(x)
    per_element = MEMORY_KERNELS[name][pass_ == "bwd"] * _BYTES[dtype]
    return [_row(name, kind, pass_, f"rows={numel // x[-1]},cols={x[-1]}", seconds, dtype, numel, per_element * numel)]


def _call_rows(trace: RankTrace, notes: Counter) -> list[dict]:
    """One row per launching op's call that sim3d prices, its seconds all its kernels'."""
    calls: dict[int, list] = defaultdict(list)
    for kernel in trace.kernels:
        if kernel.launch_id in trace.ops:
            calls[kernel.launch_id].append(kernel)
    rows = []
    for launch_id, kernels in calls.items():
        op, seconds = trace.ops[launch_id], sum(k.dur_us for k in kernels) / 1e6
        if seconds <= 0:
            notes["calls whose kernels all last 0 us"] += 1
            continue
        if op.name in _GEMM_OPS and any(k.kind == "gemm" for k in kernels):
            rows += _gemm(op, seconds, notes)
        elif op.name in _ATTENTION_OPS and any(k.kind == "attention" for k in kernels):
            backend = next((k.detail for k in kernels if k.kind == "attention" and k.detail), "")
            rows += _attention(op, seconds, backend, notes)
        elif op.name in _MEMORY_OPS:
            rows += _memory(op, seconds, notes)
    return rows


def _element_size(dtype: str) -> int:
    """Bytes of one element of a collective's torch dtype name (BFloat16, Float, Long ...); 0 unknown."""
    return _BYTES.get(_DTYPES.get(dtype, ""), _COMM_BYTES.get(dtype, 0))


def _comm_bytes(comm) -> int:
    """nccl-tests' size: all_gather its gathered output, every other op its input buffer."""
    return _element_size(comm.dtype) * (comm.out_nelems if comm.op == "all_gather" else comm.in_nelems)


def _collective_rows(traces: list[RankTrace], notes: Counter) -> list[dict]:
    calls: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for trace in traces:
        for kernel in sorted(trace.kernels, key=lambda k: k.start_us):
            comm = kernel.comm
            if kernel.kind not in COMM_KINDS:
                continue
            if comm is None or comm.op not in _PRICED_COLLECTIVES or comm.group_size < 2 or _comm_bytes(comm) <= 0:
                notes["communication kernels without a sized collective of 2+ ranks"] += 1
                continue
            calls[(comm.group, comm.op, _comm_bytes(comm), comm.group_size, comm.dtype)][trace.rank].append(kernel.dur_us)
    if len(traces) == 1 and calls:
        notes["collective times of one rank's trace (they include waiting for the other ranks)"] += 1
    seconds: dict[tuple, list[float]] = defaultdict(list)
    for (_, op, nbytes, group_size, dtype), by_rank in calls.items():
        # the k-th call of one group, op and size on every rank is one collective
        seconds[(op, nbytes, group_size, dtype)] += [min(d) / 1e6 for d in zip(*by_rank.values()) if min(d) > 0]
    rows = []
    for (op, nbytes, group_size, dtype), times in sorted(seconds.items()):
        if not times:
            continue
        sec = statistics.median(times)
        rows.append(dict(op=op, kind="collective", **{"pass": ""}, shape=f"bytes={nbytes},n={group_size}",
                         numel=nbytes // _element_size(dtype),
                         bytes=nbytes, group_size=group_size, dtype=_DTYPES.get(dtype, dtype.lower()), device="cuda",
                         seconds=sec, gbps=nbytes / sec / 1e9 * bus_factor(op, group_size)))
    return rows


def _median_rows(rows: list[dict]) -> list[dict]:
    """One row per (op, pass, shape, dtype): the median call, its rates recomputed."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["op"], r["pass"], r["shape"], r["dtype"])].append(r)
    out = []
    for same in groups.values():
        row = dict(same[0], seconds=statistics.median(r["seconds"] for r in same))
        scale = same[0]["seconds"] / row["seconds"]
        row["gbps"] = same[0]["gbps"] * scale
        row["tflops"] = same[0]["tflops"] * scale if same[0]["tflops"] else None
        out.append(row)
    return out


def _gemm_backward(rows: list[dict]) -> list[dict]:
    """calibrate's `bwd` GEMM row (dgrad + wgrad of a forward GEMM) where the trace has both."""
    def key(dtype, rows_, cols, depth):  # a GEMM and its transpose are one problem
        return dtype, min(rows_, cols), max(rows_, cols), depth
    single = {key(r["dtype"], r["m"], r["n"], r["k"]): r["seconds"] for r in rows if r["op"] == "gemm"}
    out = []
    for r in rows:
        if r["op"] != "gemm":
            continue
        m, n, k, dtype = r["m"], r["n"], r["k"], r["dtype"]
        dgrad, wgrad = single.get(key(dtype, m, k, n)), single.get(key(dtype, n, k, m))
        if dgrad is not None and wgrad is not None:
            sec = dgrad + wgrad
            out.append(dict(r, **{"pass": "bwd"}, seconds=sec, bytes=2 * r["bytes"], tflops=4.0 * m * n * k / sec / 1e12,
                            gbps=2 * r["bytes"] / sec / 1e9))
    return out


def profile_rows(traces: list[RankTrace]) -> tuple[list[dict], dict[str, int]]:
    """The profile's rows (calibrate/profile_io.py's columns) and, by reason, the calls left out."""
    notes: Counter = Counter()
    calls = [row for trace in traces for row in _call_rows(trace, notes)]
    rows = _median_rows(calls)
    rows += _gemm_backward(rows) + _collective_rows(traces, notes)
    order = {kind: i for i, kind in enumerate(KINDS)}
    rows.sort(key=lambda r: (order.get(r["kind"], len(order)), r["op"], r["pass"], r.get("bytes") or 0, r["shape"]))
    return rows, dict(notes)


def kernel_shares(traces: list[RankTrace]) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """Each kind's share of all GPU time, and the unclassified kernels by their share, largest first."""
    by_kind, unknown = Counter(), Counter()
    for trace in traces:
        for k in trace.kernels:
            by_kind[k.kind] += k.dur_us
            if k.kind == "unclassified":
                unknown[k.name] += k.dur_us
    total = sum(by_kind.values()) or 1.0
    return ({kind: t / total for kind, t in by_kind.most_common()},
            [(name, t / total) for name, t in unknown.most_common()])


def _fmt(v) -> str:
    if v is None or v == "":
        return ""
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def write_profile(traces: list[RankTrace], out: str | Path, command: str = "",
                  more: tuple[list[dict], dict] = ((), {})) -> dict:
    """Write the profile CSV `out` and its provenance JSON beside it (same stem, .json), each
    through a temporary file renamed over its target; return the provenance. `more`: further
    (rows, notes) to write (costs/trace_memory.py). Raises ScenarioError where no call has a
    shape sim3d prices (traced without record_shapes)."""
    rows, notes = profile_rows(traces)
    rows, notes = rows + list(more[0]), {**notes, **more[1]}
    if not rows:
        raise ScenarioError("no GEMM, attention, norm or collective call in these traces has both its shape recorded "
                            "and a duration: profile with torch.profiler.profile(record_shapes=True)" + "".join(
                                f"; {n} {why}" for why, n in sorted(notes.items())))
    shares, unknown = kernel_shares(traces)
    provenance = {
        "device": "cuda", "device_name": " / ".join(sorted({t.device_name for t in traces})),
        # Kineto writes no torch version into a trace (the CUDA runtime's and NCCL's it does)
        "device_count": len(traces), "torch": None, "cuda": traces[0].cuda, "nccl": traces[0].nccl,
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(), "command": command,
        "source": "PyTorch profiler traces (sim3d/costs/trace_profile.py)",
        "traces": [{"path": t.path, "sha256": t.sha256, "rank": t.rank, "steps": [s.name for s in t.steps],
                    "kernels": len(t.kernels), "unclassified_share": t.unclassified_share()} for t in traces],
        "kind_shares": shares, "unclassified_share": shares.get("unclassified", 0.0),
        "unclassified_kernels": [{"name": n, "share": s} for n, s in unknown[:20]],
        "left_out": notes, "rows": dict(Counter(r["op"] for r in rows)), "unstable": [], "schema": COLUMNS,
    }
    csv_path = Path(out)
    with replacing(csv_path, csv_path.with_suffix(".json")) as (table, prov):
        with open(table, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows({c: _fmt(r.get(c)) for c in COLUMNS} for r in rows)
        prov.write_text(json.dumps(provenance, indent=2) + "\n")
    return provenance


# ---------------------------------------------------------------------------- the traced step
def merged(intervals) -> list[tuple[float, float]]:
    """Sorted, overlapping (start, end) intervals joined."""
    joined: list[list[float]] = []
    for start, end in sorted(intervals):
        if joined and start <= joined[-1][1]:
            joined[-1][1] = max(joined[-1][1], end)
        else:
            joined.append([start, end])
    return [(a, b) for a, b in joined]


def covered(intervals) -> float:
    """Total length of merged intervals."""
    return sum(b - a for a, b in intervals)


def _overlap(a, b) -> float:
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class StepTruth:
    """The traced steps, in seconds. Per-step figures are means over the steps used.

    step_s: each step's time (ProfilerStep span, the slowest rank's); step_time_s its median.
    stream_busy_s: "rank R gpu D stream S" -> time with a kernel running on that stream.
    gpu_busy_s: time within the step's window with any kernel, copy or collective running on the
    busiest rank's GPU, whichever step launched it (a host running ahead leaves the previous
    step's kernels running into this one; the windows tile: each starts at its annotation or
    where the last one ended); gpu_busy_share its share of the window, the mean over steps.
    What is left of the step the GPU waited: on its host (Python, launches, synchronizations),
    its input, or a pipeline neighbour.
    comm_s / comm_exposed_s: communication kernels' time, and the part no compute kernel on the
    same GPU overlapped, on the rank where it is largest (the summary's `comm_exposed_s`);
    comm_exposed_by_rank_s per rank. kinds_s: kernel time per kind (costs/kineto.py KINDS),
    mean over ranks; unclassified_share: of all kernel time in the steps."""
    ranks: tuple[int, ...]
    steps: tuple[str, ...]
    step_s: tuple[float, ...]
    step_time_s: float
    step_min_s: float
    step_max_s: float
    spread: float  # (max - min) / median
    stream_busy_s: dict
    gpu_busy_s: float
    gpu_busy_share: float
    comm_s: float
    comm_exposed_s: float
    comm_exposed_by_rank_s: dict
    kinds_s: dict
    unclassified_share: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def _rank_step_figures(trace: RankTrace, step) -> tuple[dict, float, float, Counter, float, float]:
    """(busy per stream, comm time, exposed comm time, seconds per kind, busy time of its
    busiest GPU and the share of the step's window it is) of one rank's step."""
    end = step.start_us + step.dur_us
    inside = [k for k in trace.kernels
              if step.start_us <= (k.launch_us if k.launch_us is not None else k.start_us) < end]
    streams, compute, comm, kinds = defaultdict(list), defaultdict(list), defaultdict(list), Counter()
    for k in inside:
        span = (k.start_us, k.start_us + k.dur_us)
        streams[(k.device, k.stream)].append(span)
        if k.kind in COMM_KINDS:
            comm[k.device].append(span)
        elif k.kind not in NON_COMPUTE_KINDS:
            compute[k.device].append(span)
        kinds[k.kind] += k.dur_us / 1e6
    busy = {f"rank {trace.rank} gpu {d} stream {s}": covered(merged(v)) / 1e6 for (d, s), v in streams.items()}
    comm_total = exposed = 0.0
    for device, spans in comm.items():
        joined = merged(spans)
        comm_total += covered(joined)
        exposed += covered(joined) - _overlap(joined, merged(compute.get(device, [])))
    # the step's window: from its annotation, or from where the last step's window ended (a host
    # running ahead opens a step while the GPU still runs the last), to its last kernel's end
    window_end, devices = step.start_us + _step_span_us(trace, step), defaultdict(list)
    begin = max([step.start_us] + [s.start_us + _step_span_us(trace, s) for s in trace.steps
                                   if s.start_us < step.start_us][-1:])
    for k in trace.kernels:  # every kernel running in the window, whichever step launched it
        if (a := max(k.start_us, begin)) < (b := min(k.start_us + k.dur_us, window_end)):
            devices[k.device].append((a, b))
    gpu_busy = max((covered(merged(spans)) for spans in devices.values()), default=0.0)
    return busy, comm_total / 1e6, exposed / 1e6, kinds, gpu_busy / 1e6, gpu_busy / max(window_end - begin, 1e-9)


def _step_span_us(trace: RankTrace, step) -> float:
    """From the step's annotation to the later of its end and its last kernel's: the CPU only
    launches, so a compiled step's annotation closes long before its GPU work does (0.11 s of
    a 0.49 s step in fixtures/traces/llama_compiled_step.json.gz)."""
    end = step.start_us + step.dur_us
    ends = [k.start_us + k.dur_us for k in trace.kernels
            if step.start_us <= (k.launch_us if k.launch_us is not None else k.start_us) < end]
    return max([end, *ends]) - step.start_us


def step_truth(traces: list[RankTrace]) -> StepTruth:
    """What the traced steps took (see StepTruth). Steps are matched across ranks by their
    ProfilerStep number. Raises ScenarioError where a trace has no ProfilerStep annotation."""
    bare = [t.path for t in traces if not t.steps]
    if bare:
        raise ScenarioError(f"{', '.join(bare)}: no ProfilerStep# annotation; call prof.step() once per training "
                            "step inside torch.profiler.profile")
    names = sorted(set.intersection(*({s.name for s in t.steps} for t in traces)),
                   key=lambda n: int(n.split("#")[1]) if n.split("#")[1].isdigit() else 0)
    if not names:
        raise ScenarioError("the traces share no ProfilerStep#N: were they profiled over the same steps?")
    step_s, busy, kinds, gpu_busy, shares = [], Counter(), Counter(), 0.0, []
    comm, exposed = Counter(), Counter()
    for name in names:
        step_s.append(max(_step_span_us(t, next(s for s in t.steps if s.name == name)) for t in traces) / 1e6)
        busiest, share = 0.0, 0.0
        for t in traces:
            b, c, e, k, g, gs = _rank_step_figures(t, next(s for s in t.steps if s.name == name))
            busiest, share = max(busiest, g), max(share, gs)
            busy.update(b)
            comm[t.rank] += c
            exposed[t.rank] += e
            kinds.update(k)
        gpu_busy += busiest
        shares.append(share)
    n, ranks = len(names), len(traces)
    in_steps = sum(kinds.values())
    median = statistics.median(step_s)
    return StepTruth(
        ranks=tuple(t.rank for t in traces), steps=tuple(names), step_s=tuple(step_s), step_time_s=median,
        step_min_s=min(step_s), step_max_s=max(step_s), spread=(max(step_s) - min(step_s)) / median if median else 0.0,
        stream_busy_s={key: v / n for key, v in sorted(busy.items())}, gpu_busy_s=gpu_busy / n,
        gpu_busy_share=statistics.fmean(shares),
        comm_s=max(comm.values()) / n if comm else 0.0,
        comm_exposed_s=max(exposed.values()) / n if exposed else 0.0,
        comm_exposed_by_rank_s={r: exposed[r] / n for r in sorted(exposed)},
        kinds_s={kind: kinds[kind] / n / ranks for kind in KINDS if kinds[kind]},
        unclassified_share=kinds["unclassified"] / in_steps if in_steps else 0.0)

"""Read PyTorch profiler (Kineto) traces and sort every GPU kernel into sim3d's op kinds.

A trace is the JSON that `torch.profiler` writes (`export_chrome_trace`, or
`tensorboard_trace_handler`), plain or gzipped, one file per rank. What is read of it:

* ``traceEvents`` of phase ``X``: GPU work (category ``kernel``, ``gpu_memcpy``,
  ``gpu_memset``; ``pid`` the device, ``args.stream``), the launch call of each (category
  ``cuda_runtime``, joined by ``args.correlation``), the CPU op that made that call (``cpu_op``
  or ``user_annotation`` of the call's ``args["External id"]``, else the innermost op around the
  call on its thread), and the ``ProfilerStep#N`` annotations that bound each training step;
* the launching op's ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` (present when the
  profile was taken with ``record_shapes=True``): the shape of a GEMM or an attention call;
* a collective's ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size`` and
  ``dtype``: on the NCCL kernel's own args (Kineto copies them there since torch 2.2) or on the
  ``record_param_comms`` op that launched it;
* top level: ``deviceProperties`` (the GPU's name), ``distributedInfo`` (rank, world size,
  NCCL version), ``cuda_runtime_version``.

Kernels are classified by name (``classify``): the patterns and where each comes from are
below. A name no pattern knows takes the kind of the op that launched it (an ``aten::mm``
launches GEMMs whatever cuBLAS calls them); a kernel neither names is ``unclassified`` and
counted, never dropped.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..errors import ScenarioError
from ..scenario.limits import Limit

# A trace's JSON parses into Python objects ~5-10x its size, so 1 GiB of JSON is several GB of
# memory; traces of a few steps of a large model are ~100 MB a rank. Checked on the file and
# again while it is decompressed, so a gzip bomb stops at the limit, never expanded whole.
TRACE_BYTES = Limit("SIM3D_MAX_TRACE_BYTES", 2**30, "bytes of trace JSON",
                    "a trace parses into 5-10x its size in memory; profile fewer steps "
                    "(torch.profiler.schedule(active=2))")
_CHUNK = 1 << 20

# What Kineto writes (libkineto's ActivityType names as torch.profiler exports them).
KINETO_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op",
                     "user_annotation", "gpu_user_annotation", "python_function"}
GPU_CATEGORIES = {"kernel": None, "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

KINDS = ("gemm", "attention", "conv", "collective", "p2p", "optimizer", "norm", "softmax", "loss",
         "embedding", "reduction", "elementwise", "index", "memcpy", "memset", "unclassified")
COMM_KINDS = frozenset({"collective", "p2p"})
# Not compute for the overlap question (HTA's breakdown counts memory kernels apart too:
# hta/common/types.py MemoryKernelGroupingPattern).
NON_COMPUTE_KINDS = COMM_KINDS | {"memcpy", "memset"}

# NCCL's kernel names: `ncclDevKernel_<Func>_<RedOp>_<Type>_<Algo>_<Proto>` since NCCL 2.19
# (NVIDIA/nccl src/device/generate.py), `ncclKernel_<Func>_<Algo>_<Proto>_<RedOp>_<Type>` before
# (src/collectives/device/common.h, NCCL_KERN_NAME); <Func> from ncclFuncStr. A name beginning
# with "nccl" is communication, as in HTA (hta/common/types.py, CommunicateKernelGroupingPattern).
_NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_NCCL_FUNCS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
               "Broadcast": "broadcast", "Reduce": "reduce", "AllToAll": "all_to_all", "SendRecv": "send_recv"}
# torch's `Collective name` (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, RECORD_PARAM_COMMS)
# in nccl-tests' spelling, the profile's op names.
_TORCH_COLLECTIVES = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce", "all_reduce": "all_reduce",
    "_allgather_base": "all_gather", "allgather": "all_gather", "all_gather": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "allgather_coalesced": "all_gather",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "reduce_scatter_base": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_allv": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "send": "send_recv", "recv": "send_recv", "recvAnysource": "send_recv", "broadcast": "broadcast",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter", "barrier": "barrier"}

# (kind, pattern, detail) in order, first match wins: attention before GEMM and convolutions
# before GEMM, since fused attention and implicit-GEMM convolutions carry "gemm" in their names.
_NAME_PATTERNS = [
    # FlashAttention-2 (Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h and
    # flash_bwd_kernel.h: flash_fwd_kernel, flash_fwd_splitkv_kernel, flash_bwd_dq_dk_dv_loop_*,
    # flash_bwd_dot_do_o_kernel, flash_bwd_convert_dq_kernel), vendored in torch as pytorch_flash::
    ("attention", r"flash_(fwd|bwd)_", "flash"),
    # FlashAttention-3 (flash-attention hopper/: FlashAttnFwdSm90, FlashAttnBwdSm90, compute_attn_ws)
    ("attention", r"FlashAttn(Fwd|Bwd)|flash::compute_attn|flash::.*Sm90", "fa3"),
    # cuDNN's fused attention (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_...,
    # bprop; its backward's cudnn::fusion::compute_dot_do_o / convert_dq_to_16bits helpers)
    ("attention", r"sdpa_.*(fprop|bprop)|cudnn::fusion::(compute_dot_do_o|convert_dq)", "cudnn"),
    # memory-efficient attention (torch aten/src/ATen/native/transformers/cuda/mem_eff_attention:
    # fmha_cutlassF_* forward, fmha_cutlassB_* backward); other fused MHA kernels (fmhaSm100*)
    ("attention", r"fmha_cutlass[FB]", "efficient"),
    ("attention", r"fmha|[Ff]used_?[Mm]ulti_?[Hh]ead", ""),
    # Triton attention: the Triton tutorial's _attn_fwd / _attn_bwd*, Inductor's FlexAttention
    # templates (triton_tem_fused_flex_attention*)
    ("attention", r"_attn_(fwd|bwd)|flex_attention", "triton"),
    # cuDNN / CUTLASS convolutions: implicit GEMM fprop / dgrad / wgrad, scudnn, winograd
    ("conv", r"implicit_gemm|ImplicitGemmConvolution|scudnn|winograd|[sd]1688(fprop|dgrad|wgrad)|"
             r"(fprop|dgrad|wgrad)_(engine|alg|optimized)|wgrad_alg|dgrad_engine|[Cc]onv(olution)?[_A-Z2]", ""),
    # cuBLAS / cuBLASLt: <arch>_xmma_gemm_* (sm80, sm90, sm100), ampere_bf16_s16816gemm_*,
    # volta_sgemm_*, gemv*, splitKreduce_kernel, cuBLASLt's epilogue kernels; its JIT kernels
    # nvjet_* (CUDA 12.6+);
    # CUTLASS 2 (cutlass_80_tensorop_s1688gemm_*) and 3 (cutlass3x_sm90_tensorop_gemm_*,
    # GemmUniversal); Triton templates and matmul kernels (triton_tem_fused_mm / addmm / bmm)
    ("gemm", r"(?i:gemm|gemv|splitkreduce|^nvjet|matmul)|triton_tem_fused_(add)?b?mm|cublasLt|epilogue::impl", ""),
    # optimizers: torch's fused Adam/AdamW and _foreach_ ops (multi_tensor_apply_kernel with
    # FusedAdamMathFunctor ...: aten/src/ATen/native/cuda/fused_adam_impl.cuh, ForeachFunctors.cuh),
    # Apex / DeepSpeed / Transformer Engine multi_tensor_adam
    ("optimizer", r"multi_tensor_apply|[Aa]dam(W)?(Functor|_kernel|MathFunctor)|fused_adam|multi_tensor_adam|"
                  r"lamb_|fused_sgd", ""),
    # norms: torch's layer_norm / rms_norm kernels (vectorized_layer_norm_kernel, GammaBetaBackward,
    # RowwiseMoments, layer_norm_grad_input), Apex cuApplyLayerNorm / cuApplyRMSNorm,
    # Transformer Engine ln_fwd / rmsnorm_bwd, cuDNN and torch batch norm
    ("norm", r"(?i:layer_?norm|rms_?norm)|GammaBeta|RowwiseMoments|cuApply|cuComputeGradInput|"
             r"cuComputePartGrad|(^|[^a-z])ln_(fwd|bwd)|batch_norm|bn_(fw|bw)|group_norm", ""),
    ("softmax", r"(?i:softmax)", ""),
    ("loss", r"nll_loss|(?i:cross_?entropy)", ""),
    # embedding lookups and their backward (aten/src/ATen/native/cuda/Embedding*.cu:
    # embedding_backward_*, krn_partials_per_segment, compute_grad_weight, sum_and_scatter;
    # indexSelect for the forward; fbgemm's split_embedding_* and bounds_check_indices)
    ("embedding", r"(?i:embedding)|krn_partial|partial_segment|compute_grad_weight|sum_and_scatter|"
                  r"indexSelect|bounds_check_indices", ""),
    # reductions: torch's reduce_kernel, Inductor's triton_red_* / triton_per_* (persistent
    # reductions: torch/_inductor/codegen/triton.py kernel-name prefixes), cub's reduce
    ("reduction", r"reduce_kernel|triton_(red|per)_|DeviceReduce|DeviceSegmentedReduce|[Rr]eduction", ""),
    # gathers, scatters, sorts, scans, concatenation (cub's DeviceRadixSort / DeviceScan /
    # DeviceSelect / DeviceUnique; torch's CatArrayBatchedCopy, index / scatter_gather kernels)
    ("index", r"cub::|gather|scatter|CatArray|(?i:index)|[Ss]ort|DeviceScan|DeviceSelect|"
              r"DeviceUnique|DeviceCompact|arange|nonzero", ""),
    # elementwise: torch's elementwise_kernel / vectorized_elementwise_kernel / unrolled_elementwise,
    # Inductor's pointwise triton_poi_* (and its unlabelled triton__0d1d... before torch 2.1), copies,
    # fills, activations, RoPE, casts, dropout
    ("elementwise", r"elementwise|triton_poi_|^triton__|[Ff]unctor|copy|[Ff]ill|dropout|gelu|silu|swiglu|relu|act_and_mul|"
                    r"rope|rotary|transpose|permute|[Nn]chw|[Nn]hwc|cast|quantize|amax|clamp|pool", ""),
]
_NAMED = [(kind, re.compile(pattern), detail) for kind, pattern, detail in _NAME_PATTERNS]
# The launching op, where the kernel's own name says nothing sim3d knows.
_BY_OP = [("gemm", re.compile(r"^aten::(mm|addmm|bmm|baddbmm|_scaled_mm|matmul|linear|_addmm_activation)$")),
          ("attention", re.compile(r"attention|flash_attn")),
          ("collective", re.compile(r"^record_param_comms$|^c10d::|^nccl:")),
          ("conv", re.compile(r"convolution|conv\dd")),
          ("norm", re.compile(r"(layer|rms|batch|group|instance)_norm")),
          ("softmax", re.compile(r"softmax")),
          ("loss", re.compile(r"nll_loss|cross_entropy")),
          ("embedding", re.compile(r"embedding")),
          ("optimizer", re.compile(r"^aten::_fused_(adam|sgd)|^aten::_foreach_|^Optimizer\."))]
_BACKWARD = re.compile(r"(?i:bwd|bprop|backward)|dot_do_o|convert_dq|fmha_cutlassB")


def classify(name: str, category: str = "kernel", launcher: str | None = None) -> tuple[str, str, str]:
    """(kind, detail, pass) of one GPU activity: kind one of KINDS; detail the collective in
    nccl-tests' spelling or the attention backend ("flash", "cudnn", "fa3", "efficient",
    "triton"), else ""; pass "fwd" / "bwd" for attention, else ""."""
    if GPU_CATEGORIES.get(category):
        return GPU_CATEGORIES[category], "", ""
    m = _NCCL.match(name)
    if m or name.startswith("nccl"):
        func = _NCCL_FUNCS.get(m.group(1), "") if m else ""
        return ("p2p" if func == "send_recv" else "collective"), func, ""
    for kind, pattern, detail in _NAMED:
        if pattern.search(name):
            if kind == "attention":
                return kind, detail, "bwd" if _BACKWARD.search(name) else "fwd"
            return kind, detail, ""
    for kind, pattern in _BY_OP if launcher else ():
        if pattern.search(launcher):
            if kind == "attention":
                return kind, "", "bwd" if _BACKWARD.search(launcher) else "fwd"
            return kind, "", ""
    return "unclassified", "", ""


@dataclass(frozen=True)
class CpuOp:
    """The CPU op (or annotation) that launched GPU work, with what record_shapes kept of it."""
    name: str
    dims: tuple = ()
    types: tuple = ()
    concrete: tuple = ()
    args: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Comm:
    """One collective call as torch recorded it (record_param_comms)."""
    op: str  # nccl-tests spelling: all_reduce ... send_recv; the torch name where it has none
    in_nelems: int
    out_nelems: int
    group_size: int
    dtype: str
    group: str  # the process group's name: instances of one group line up across ranks


@dataclass(frozen=True)
class Kernel:
    """One GPU activity (kernel, memcpy or memset), times in microseconds as the trace has them."""
    device: int
    stream: int
    name: str
    start_us: float
    dur_us: float
    kind: str
    detail: str
    pass_: str
    launch_id: int | None  # the launching op's key in RankTrace.ops (its External id)
    launch_us: float | None  # when the CPU launched it (cuda_runtime call), to place it in a step
    comm: Comm | None = None
    # the CPU thread that launched it: autograd runs a backward on a thread of its own per
    # device (torch/csrc/autograd/engine.cpp, device_threads), the forward on the caller's
    launch_thread: tuple | None = None


@dataclass(frozen=True)
class Step:
    name: str  # ProfilerStep#N
    start_us: float
    dur_us: float


@dataclass
class RankTrace:
    """One rank's trace file, read."""
    path: str
    sha256: str
    rank: int
    world_size: int | None
    device_name: str
    cuda: str | None
    nccl: str | None
    kernels: list[Kernel]
    ops: dict[int, CpuOp]
    steps: list[Step]

    def unclassified_share(self) -> float:
        total = sum(k.dur_us for k in self.kernels)
        return sum(k.dur_us for k in self.kernels if k.kind == "unclassified") / total if total else 0.0


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _list(value) -> tuple:
    return tuple(value) if isinstance(value, list) else ()


def _read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped in chunks so that no more than the limit is ever held."""
    if not path.is_file():
        raise ScenarioError(f"{path}: no such trace file")
    TRACE_BYTES.check(path.stat().st_size, f"{path} on disk")
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if not gzipped:
        return path.read_bytes()
    out = bytearray()
    try:
        with gzip.open(path, "rb") as g:
            while chunk := g.read(_CHUNK):
                out += chunk
                TRACE_BYTES.check(len(out), f"{path} decompressed (at least)")
    except (OSError, EOFError, zlib.error) as exc:
        raise ScenarioError(f"{path}: not a readable gzip file ({exc}); cut short while it was copied?") from None
    return bytes(out)


def _load_json(path: Path, data: bytes) -> dict:
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                            "a trace cut short while it was written?") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ScenarioError(f"{path}: not a JSON text ({type(exc).__name__})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise ScenarioError(f"{path}: not a PyTorch profiler trace: expected a JSON object with a `traceEvents` "
                            "list, as torch.profiler's export_chrome_trace writes")
    cats = {e.get("cat") for e in events if isinstance(e, dict)}
    if not cats & KINETO_CATEGORIES:
        raise ScenarioError(f"{path}: its events are none of Kineto's categories ({', '.join(sorted(KINETO_CATEGORIES))}): "
                            "a trace another tool wrote (sim3d's own trace.json, JAX, Nsight Systems?), not "
                            "torch.profiler's")
    if "kernel" not in cats:
        raise ScenarioError(f"{path}: no GPU kernel events: profile on the GPU with activities=[ProfilerActivity.CPU, "
                            "ProfilerActivity.CUDA]")
    return doc


def _version(value) -> str | None:
    """cuda_runtime_version 12040 -> '12.4'."""
    n = _int(value)
    return f"{n // 1000}.{n % 1000 // 10}" if n else None


def _comm(args: dict) -> Comm | None:
    name = args.get("Collective name")
    if not isinstance(name, str) or not name:
        return None
    group = args.get("Process Group Name", args.get("Process Group Ranks", ""))
    return Comm(op=_TORCH_COLLECTIVES.get(name, name), in_nelems=_int(args.get("In msg nelems")) or 0,
                out_nelems=_int(args.get("Out msg nelems")) or 0, group_size=_int(args.get("Group size")) or 0,
                dtype=str(args.get("dtype", "")), group=str(group))


def _cpu_side(events: list[dict]) -> tuple[dict, dict, list[Step]]:
    """The ops (by External id), each launch call's (time, thread, launching op), and the steps."""
    ops: dict[int, CpuOp] = {}
    spans: dict[tuple, list] = defaultdict(list)  # (pid, tid) -> [(start, end, op key)]
    calls: dict[tuple, list] = defaultdict(list)  # (pid, tid) -> [(time, correlation)]
    linked: dict[int, int] = {}  # correlation -> External id of a launch call
    launches: dict[int, float] = {}
    steps = []
    for e in events:
        cat, args = e.get("cat"), e.get("args") if isinstance(e.get("args"), dict) else {}
        ts, dur, thread = _number(e.get("ts")), _number(e.get("dur")), (e.get("pid"), e.get("tid"))
        if cat in ("cpu_op", "user_annotation"):
            ext = _int(args.get("External id"))
            key = ext if ext is not None else -1 - len(ops)
            if cat == "cpu_op" or key not in ops:  # an op before an annotation of the same id
                ops[key] = CpuOp(str(e.get("name", "")), _list(args.get("Input Dims")), _list(args.get("Input type")),
                                 _list(args.get("Concrete Inputs")), args)
            if ts is not None and dur is not None:
                spans[thread].append((ts, ts + dur, key))
            name = str(e.get("name", ""))
            if name.startswith("ProfilerStep#") and ts is not None and dur:  # a cpu_op in torch < 1.11
                steps.append(Step(name, ts, dur))
        # Inductor's Triton kernels and cuBLASLt launch through the driver API (cuLaunchKernel[Ex]),
        # recorded as cuda_driver calls: 1,296 of 2,516 kernels of a compiled step (fixtures/traces)
        elif cat in ("cuda_runtime", "cuda_driver") and (corr := _int(args.get("correlation"))) is not None \
                and ts is not None:
            launches[corr] = (ts, thread)
            calls[thread].append((ts, corr))
            if (ext := _int(args.get("External id"))) is not None and ext != corr:
                linked[corr] = ext
    # Some traces (HTA's test traces of 2022-23) give a launch its own correlation id as External id,
    # which links to no op; there the launching op is the innermost op around the call on its thread.
    nested = _innermost(spans, calls)
    launchers = {corr: linked[corr] if linked.get(corr) in ops else nested.get(corr) for corr in launches}
    return ops, {corr: (*launches[corr], launchers[corr]) for corr in launches}, sorted(steps, key=lambda s: s.start_us)


def _innermost(spans: dict, calls: dict) -> dict[int, int]:
    """correlation -> key of the innermost op whose span holds that launch call, on its thread."""
    found = {}
    for thread, queries in calls.items():
        # at one time an op opens before a call; of two ops opening together the longer is outer
        marks = sorted([(start, 0, start - end, key) for start, end, key in spans.get(thread, ())]
                       + [(t, 1, 0.0, corr) for t, corr in queries])
        open_ops: list[tuple[float, int]] = []
        for time, is_call, negative_length, ident in marks:
            while open_ops and open_ops[-1][0] <= time:
                open_ops.pop()
            if is_call:
                if open_ops:
                    found[ident] = open_ops[-1][1]
            else:
                open_ops.append((time - negative_length, ident))
    return found


def read_trace(path: str | Path, rank: int = 0) -> RankTrace:
    """One rank's trace, its kernels classified; `rank` where the trace does not say
    (distributedInfo.rank). Raises ScenarioError (not a Kineto trace, truncated, no kernels)
    or WorkLimitExceeded (larger than TRACE_BYTES, compressed or not)."""
    path = Path(path)
    doc = _load_json(path, _read_bytes(path))
    info = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    props = doc.get("deviceProperties") if isinstance(doc.get("deviceProperties"), list) else []
    names = sorted({str(p.get("name")) for p in props if isinstance(p, dict) and p.get("name")})
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    ops, launches, steps = _cpu_side(events)
    kernels = []
    for e in events:
        cat = e.get("cat")
        if cat not in GPU_CATEGORIES:
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        ts, dur = _number(e.get("ts")), _number(e.get("dur"))
        if ts is None or dur is None or dur < 0:
            continue
        launch_us, thread, launcher = launches.get(_int(args.get("correlation")), (None, None, None))
        if launcher is None and _int(args.get("External id")) in ops:  # no launch call recorded
            launcher = _int(args.get("External id"))
        op = ops.get(launcher)
        name = str(e.get("name", ""))
        kind, detail, pass_ = classify(name, cat, op.name if op else None)
        comm = _comm(args) or (_comm(op.args) if op and kind in COMM_KINDS else None)
        if comm and kind in COMM_KINDS:
            detail = comm.op  # torch's name: an all-to-all runs NCCL's SendRecv kernel
            kind = "p2p" if comm.op == "send_recv" else "collective"
        device = _int(args.get("device"))
        kernels.append(Kernel(device if device is not None else _int(e.get("pid")) or 0,
                              _int(args.get("stream")) or _int(e.get("tid")) or 0, name, ts, dur, kind, detail,
                              pass_, launcher, launch_us, comm, thread))
    if not kernels:
        raise ScenarioError(f"{path}: no GPU kernel event has a start and a duration")
    if not any(k.dur_us > 0 for k in kernels):
        # a trace whose kernels all last 0 us was cut or rewritten without its timing: every
        # rate read from it would be infinite, every traced part of a step zero
        raise ScenarioError(f"{path}: all {len(kernels)} GPU kernel events last 0 us, so the trace holds no kernel "
                            "timing; record the steps again with torch.profiler (ProfilerActivity.CUDA)")
    named = _int(info.get("rank"))
    return RankTrace(str(path), _sha256(path), rank if named is None else named, _int(info.get("world_size")),
                     ", ".join(names) or "unknown GPU", _version(doc.get("cuda_runtime_version")),
                     str(info["nccl_version"]) if info.get("nccl_version") else None, kernels,
                     {k.launch_id: ops[k.launch_id] for k in kernels if k.launch_id in ops}, steps)


def read_traces(paths: Iterable[str | Path]) -> list[RankTrace]:
    """Every rank's trace; ranks not named in a file are numbered in the order given.
    Raises ScenarioError for two files of one rank."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise ScenarioError("no trace files given")
    traces = [read_trace(path, i) for i, path in enumerate(paths)]
    seen: dict[int, str] = {}
    for t in traces:
        if t.rank in seen:
            raise ScenarioError(f"two traces are of rank {t.rank}: {seen[t.rank]} and {t.path}")
        seen[t.rank] = t.path
    return sorted(traces, key=lambda t: t.rank)

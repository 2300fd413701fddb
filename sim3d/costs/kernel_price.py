"""The price of one kernel or collective on one GPU, and where it came from: `sim3d.kernel_seconds`
and `sim3d kernel`. A measured profile answers where it has the kernel's class (interpolated in
shape and size as a simulation reads it, costs/profile.py); otherwise the analytical models
answer, at the clock a training step holds: costs/gemm.py, costs/attention.py, bytes over HBM
for memory-bound kernels, costs/collectives.py on the preset's node for collectives.

    >>> sim3d.kernel_seconds("h100-sxm", "gemm", m=8192, n=8192, k=8192).seconds
"""

from __future__ import annotations

import numbers

from dataclasses import dataclass
from pathlib import Path

from ..errors import ScenarioError
from .attention import FAMILIES, attention_seconds, kernel_family
from .compute import PROFILE_ATTENTION_ROWS
from .gemm import gemm_seconds, memory_seconds
from .provenance import ANALYTICAL, PROFILE

# Bytes a memory-bound kernel moves per element of its main tensor, in element sizes (forward,
# backward): the traffic calibrate/kernels.py counts for the same kernels (norm: read x, write
# y; backward: read x and dy, write dx; swiglu reads two inputs; a residual add's backward is
# the add of the gradients at the fork).
MEMORY_KERNELS = {"layernorm": (2, 3), "rmsnorm": (2, 3), "gelu": (2, 3), "swiglu": (3, 5), "dropout": (2, 2),
                  "add": (3, 3), "softmax": (2, 3), "cross_entropy": (1, 2)}
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
OPS = ("gemm", "attention", "memory") + tuple(MEMORY_KERNELS) + COLLECTIVE_OPS
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}


@dataclass(frozen=True)
class KernelPrice:
    """`seconds` of one kernel (or collective); `source` is "profile" or "analytical"; `detail`
    says which measurement or which model priced it."""
    op: str
    seconds: float
    source: str
    detail: str
    shape: dict

    def as_dict(self) -> dict:
        return {"op": self.op, "seconds": self.seconds, "source": self.source, "detail": self.detail, **self.shape}


def _gpu(gpu):
    from ..cluster.gpus import PRESETS, gpu_preset
    if isinstance(gpu, str):
        try:
            return gpu_preset(gpu)
        except KeyError as e:
            raise ScenarioError(str(e.args[0])) from None
    if gpu.name not in PRESETS:
        raise ScenarioError(f"{gpu.name!r} is not a registered GPU preset (sim3d.cluster.gpus.register_preset)")
    return gpu


def _profile(profile):
    if profile is None or not isinstance(profile, (str, Path)):
        return profile
    from .profile import Profile, ProfileError
    try:
        return Profile.load(profile)
    except ProfileError as e:
        raise ScenarioError(str(e)) from None


# One kernel's dimensions: cuBLAS takes m, n and k as 32-bit ints (cublasGemmEx), and no shape
# sim3d prices needs more; a collective of more than a TiB is no single call a GPU runs.
MAX_DIMENSION = 2**31 - 1
MAX_BYTES = 2**40


def _take(op: str, shape: dict, required: tuple[str, ...], optional: dict) -> dict:
    unknown = sorted(set(shape) - set(required) - set(optional))
    missing = [k for k in required if k not in shape]
    if unknown or missing:
        raise ScenarioError(f"kernel {op}: " + "; ".join(
            ([f"unknown argument(s) {', '.join(unknown)}"] if unknown else [])
            + ([f"missing {', '.join(missing)}"] if missing else []))
            + f" (takes {', '.join(required + tuple(optional))})")
    args = {**shape, **{k: v for k, v in optional.items() if k not in shape}}
    for key in required + tuple(k for k in optional if isinstance(optional[k], int) and not isinstance(optional[k], bool)):
        value = args[key]
        if key == "nbytes" and not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < float("inf"):
            if value > MAX_BYTES:
                # an integer in full (as a float it would round), a float as its magnitude
                shown = f"{value:,}" if isinstance(value, numbers.Integral) else f"{value:.4g}"
                raise ScenarioError(f"kernel {op}: nbytes={shown} exceeds {MAX_BYTES:,} (a TiB in one collective)")
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < (2 if key == "group" else 1):
            raise ScenarioError(f"kernel {op}: {key} must be a positive integer{' >= 2' if key == 'group' else ''}, "
                                f"not {value!r}")
        args[key] = value = int(value)  # numpy's integers too
        if value > MAX_DIMENSION:
            raise ScenarioError(f"kernel {op}: {key}={value:,} is more than one kernel takes (at most "
                                f"{MAX_DIMENSION:,}, a 32-bit int as cuBLAS takes its dimensions)")
    for key, choices in (("precision", tuple(_BYTES)), ("direction", ("fwd", "bwd"))):
        if key in args and args[key] not in choices:
            raise ScenarioError(f"kernel {op}: {key} must be one of {', '.join(choices)}, not {args[key]!r}")
    for key in (k for k, default in optional.items() if isinstance(default, bool)):  # never bool("no")
        if not isinstance(args[key], bool):
            raise ScenarioError(f"kernel {op}: {key} must be true or false, not {args[key]!r}")
    width = _BYTES.get(args.get("precision", "bf16"), 2)
    tensors = {"gemm": lambda a: a["m"] * a["k"] + a["k"] * a["n"] + a["m"] * a["n"],
               "attention": lambda a: 4 * a["batch"] * a["heads"] * a["seq"] * a["head_dim"]}
    elements = tensors[op](args) if op in tensors else args.get("numel", 0)
    if elements * width > MAX_BYTES:  # each dimension fits a 32-bit int, the tensors need not fit a GPU
        raise ScenarioError(f"kernel {op}: its tensors hold {elements * width:,} bytes, more than one kernel takes "
                            f"(at most {MAX_BYTES:,}, a TiB)")
    return args


def kernel_seconds(gpu, op: str, *, profile=None, **shape) -> KernelPrice:
    """The price of one kernel on `gpu` (a preset name or a registered GpuSpec), from `profile`
    (a Profile or a profile CSV path) where it has the kernel, else analytical. `op` and its shape:

    * ``gemm``: m, n, k, precision (bf16 | fp16 | fp8 | fp32; one [m x k] @ [k x n] GEMM)
    * ``attention``: batch, heads, seq, head_dim, direction (fwd | bwd), causal, kv_heads,
      kernel (default | cudnn | fa2 | fa3 | triton, as `training.kernels.attention`; fused
      attention, 16-bit; the backward includes its pre- and post-processing kernels)
    * ``layernorm``, ``rmsnorm``, ``gelu``, ``swiglu``, ``dropout``, ``add``, ``softmax``,
      ``cross_entropy``: numel, direction, precision; ``memory``: nbytes (any memory-bound kernel)
    * ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``: nbytes (nccl-tests
      sizes), group, nodes (the group spread evenly over that many of the preset's nodes)

    Raises ScenarioError (an unknown op, GPU or argument)."""
    if op not in OPS:
        from ..cluster.gpus import suggest
        raise ScenarioError(f"unknown kernel {op!r}{suggest(op, OPS)}; known: {', '.join(OPS)}")
    spec, prof = _gpu(gpu), _profile(profile)
    if op == "gemm":
        a = _take(op, shape, ("m", "n", "k"), {"precision": "bf16"})
        return _gemm(spec, prof, a)
    if op == "attention":
        a = _take(op, shape, ("batch", "heads", "seq", "head_dim"),
                  {"direction": "fwd", "causal": True, "kv_heads": shape.get("heads", 1), "kernel": "default"})
        return _attention(spec, prof, a)
    if op in COLLECTIVE_OPS:
        a = _take(op, shape, ("nbytes", "group"), {"nodes": 1})
        return _collective(spec, prof, op, a)
    if op == "memory":
        a = _take(op, shape, ("nbytes",), {})
        return KernelPrice(op, memory_seconds(spec, a["nbytes"]), ANALYTICAL, _hbm(spec), a)
    a = _take(op, shape, ("numel",), {"direction": "fwd", "precision": "bf16"})
    if prof is not None:
        measured = prof.op_seconds(op, a["numel"], a["precision"], a["direction"])
        if measured is not None:
            return KernelPrice(op, measured, PROFILE, prof.describe("compute"), a)
    per_element = MEMORY_KERNELS[op][a["direction"] == "bwd"] * _BYTES[a["precision"]]
    return KernelPrice(op, memory_seconds(spec, per_element * a["numel"]), ANALYTICAL,
                       f"{per_element} B per element; {_hbm(spec)}", a)


def _hbm(spec) -> str:
    from .gemm import KERNEL_OVERHEAD_S, MEMORY_EFFICIENCY
    return f"bytes over {spec.hbm_tbps:g} TB/s x {MEMORY_EFFICIENCY:g} + {KERNEL_OVERHEAD_S * 1e6:g} us"


def _gemm(spec, prof, a) -> KernelPrice:
    if prof is not None:
        measured = prof.gemm_seconds(a["m"], a["n"], a["k"], a["precision"], "fwd")
        if measured is not None:
            return KernelPrice("gemm", measured, PROFILE, prof.describe("compute"), a)
    try:
        seconds = gemm_seconds(spec, a["m"], a["n"], a["k"], a["precision"])
    except ValueError as e:  # no tensor cores of that precision
        raise ScenarioError(f"kernel gemm: {e}") from None
    return KernelPrice("gemm", seconds, ANALYTICAL, "costs/gemm.py: tile and wave quantization over "
                       f"{spec.sms} SMs, k-loop overhead, memory roofline, at the sustained clock", a)


def _attention(spec, prof, a) -> KernelPrice:
    if a["heads"] % a["kv_heads"]:
        raise ScenarioError(f"kernel attention: heads {a['heads']} is not a multiple of kv_heads {a['kv_heads']}")
    from ..cluster.gpus import attention_kernels
    known = attention_kernels(spec.name)
    if a["kernel"] not in known:
        raise ScenarioError(f"kernel attention: kernel {a['kernel']!r} has no figures for {spec.name} "
                            f"(there: {', '.join(known)})")
    family = kernel_family(spec.attention_family, a["kernel"])
    own = family is FAMILIES[spec.attention_family]
    rows = PROFILE_ATTENTION_ROWS.get(a["kernel"])
    if prof is not None and a["causal"] and rows:  # profiles time causal attention, per kernel
        measured = prof.attention_seconds(a["batch"], a["heads"], a["seq"], a["head_dim"], "bf16", a["direction"],
                                          rows)
        if measured is not None:
            return KernelPrice("attention", measured, PROFILE, prof.describe("compute") + f" ({rows} rows)", a)
    seconds = attention_seconds(spec, a["batch"] * a["heads"], a["seq"], a["head_dim"], a["direction"],
                                causal=bool(a["causal"]), kv_heads_ratio=a["kv_heads"] / a["heads"], family=family)
    name = f"{spec.attention_family} kernels" if own else family.source
    return KernelPrice("attention", seconds, ANALYTICAL, f"costs/attention.py ({name}): CTAs over {spec.sms} SMs, "
                       "at the sustained clock", a)


def _collective(spec, prof, op, a) -> KernelPrice:
    group, nodes = a["group"], a["nodes"]
    if group % nodes or group // nodes > spec.gpus_per_node:
        raise ScenarioError(f"kernel {op}: a group of {group} over {nodes} node(s) needs {group} / {nodes} GPUs per "
                            f"node, a whole number at most {spec.gpus_per_node} ({spec.name})")
    if prof is not None:
        measured = prof.collective_seconds(op, a["nbytes"], group)
        if measured is not None:
            return KernelPrice(op, measured, PROFILE, prof.describe("collective"), a)
    from ..cluster.topology import Topology
    from ..scenario.load import scenario_from_dict
    from .collectives import collective_time
    s = scenario_from_dict(dict(
        name="kernel", model=dict(layers=1, hidden=128, heads=1, vocab=128, seq_len=128),
        parallel=dict(tp=1, pp=1, dp=group), training=dict(micro_batch=1, global_batch=group),
        cluster=dict(gpu=spec.name, nodes=nodes, gpus_per_node=group // nodes)))
    t = collective_time(op, a["nbytes"], Topology(s).group_link("dp", alone=True))
    return KernelPrice(op, t.seconds, ANALYTICAL, f"costs/collectives.py: {t.algorithm} on the {spec.name} preset's "
                       f"default fabric, the group alone on it", a)

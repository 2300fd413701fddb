"""Per pipeline-rank memory: weights, gradients, optimizer state, activations, the
embedding / LM-head extras and a reserve (docs/contracts.md#summary-keys: peak_memory_gib). Bytes throughout; GiB
(2**30 bytes) only in messages. All TP/CP/DP ranks of one pipeline rank are symmetric, so
one row per pipeline rank describes the whole cluster.

Sources:
* Model states, mixed-precision Adam: Megatron-LM docs/source/distrib_optimizer.md, table of
  bytes per parameter: "float16 param, fp32 grads: 18 | 6 + 12/d" and "fp32 param, fp32 grads:
  16 | 8 + 8/d" (d = data-parallel size). So bf16/fp16/fp8: 2 B param + 4 B fp32 main grad
  + 12 B fp32 (master copy, exp_avg, exp_avg_sq), the 12 sharded by the distributed
  optimizer; fp32: 4 + 4 + 8 (no separate master copy), the 8 sharded. With gradients
  reduced in half precision (`grad_reduce_in_fp32: false`), the table's "float16 param,
  float16 grads: 20 | 4 + 16/d": 2 + 2 + 16, the 16 sharded.
* Activations: Korthikanti et al. 2022 (arXiv:2205.05198) section 4 and Table 2, obtained by
  summing the per-op `act_bytes` of ops.py, times the in-flight chunk activations that the
  schedule reaches on each rank (schedule/proof.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

import numpy as np

from ..schedule import build, prove
from ..schedule.generators import ScheduleConstraint
from ..schedule.dependencies import activation_changes, peak_inflight
from ..schedule.specs import SCHEDULES
from ..scenario.moe_layers import moe_at
from ..scenario.sharding import ShardingPlan
from .ops import Dims, embedding_dims_ops, head_dims_ops, mtp_dims_ops, ops_for
from .recompute import kept_bytes, layer_policy, mtp_policy
from .params import (embedding_params, head_params, layer_counts, layer_params, layer_split, model_params, mtp_params,
                     params_of, split_mtp_is_moe)

GIB = 2**30

# Reserve (an assumption, not a measurement): ~0.5 GiB CUDA context with PyTorch on A100/H100
# plus cuBLAS workspaces and NCCL communicator buffers (NCCL_BUFFSIZE 4 MiB per channel and
# peer, over the tp/pp/dp/embedding communicators) ~1 GiB; calibrate/ can replace it.
RESERVE_FIXED_BYTES = 1.5 * GIB
# The PyTorch caching allocator fragments memory that is allocated and freed every
# micro-batch (activations); weights, grads and optimizer state live in Megatron's
# contiguous buffers and do not fragment. 10% of activations is our assumption.
ACTIVATION_FRAGMENTATION = 0.10


# ---- activations --------------------------------------------------------------------------

def layer_activation_bytes(s, moe_layer: bool = False, recompute: str | None = None) -> float:
    """Activation bytes one layer keeps per micro-batch on one rank (Korthikanti Table 2):
    none: sum of every op's saved tensors; selective: minus the core attention;
    full: only the layer input, 2*s*b*h (/t with sequence parallelism); op: recompute.py."""
    return _layer_activation_bytes(Dims.of(s), moe_layer, recompute or s.training.recompute)


@lru_cache(maxsize=1024)  # layouts searches and deep models ask for the same few shapes again and again
def _layer_activation_bytes(d: Dims, moe_layer: bool, recompute: str) -> float:
    return kept_bytes(ops_for(d, moe_layer), recompute, d)


def layer_working_bytes(s, moe_layer: bool = False) -> float:
    """Extra bytes live while one recomputed layer runs its backward: what recomputation
    rebuilds (the whole layer under full, the core attention under selective)."""
    return layer_activation_bytes(s, moe_layer, "none") - layer_activation_bytes(s, moe_layer)


def stage_activation_bytes(s, stage: int) -> tuple[float, float]:
    """(transformer layers, embedding/LM-head extras) bytes one micro-batch keeps on a stage.
    Extras (Korthikanti section 4.3, derived op by op in ops.py): the embedding dropout mask
    (s*b*h bytes, /t with SP) on the first stage; on the last the final-norm and LM-head
    inputs (2*s*b*h each, /t with SP) and the fp32 logits (4*s*b*V/t). Never recomputed."""
    t = s.training
    layers, other = _stage_bytes(Dims.of(s), t.recompute, layer_split(s), t.recompute_num_layers)
    return float(layers[stage]), float(other[stage])


@lru_cache(maxsize=4096)
def _policy_counts(split: tuple, recompute: str, recompute_layers: int | None) -> dict:
    """policy -> (dense, MoE) layers of each global stage under it (model/recompute.py; cached:
    read, do not write)."""
    layers, every, first_dense, _ = split
    counts: dict[str, np.ndarray] = {}
    start = 0
    for stage, n in enumerate(layers):
        for i in range(n):
            policy = layer_policy(recompute, recompute_layers, i)
            row = counts.setdefault(policy, np.zeros((len(layers), 2)))
            row[stage, 1 if moe_at(start + i, every, first_dense) else 0] += 1
        start += n
    return {policy: (c[:, 0], c[:, 1]) for policy, c in counts.items()}


def _stage_bytes(d: Dims, recompute: str, split: tuple, recompute_layers: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(transformer layers, extras) bytes of one micro-batch on each global stage."""
    layers = np.zeros(len(split[0]))
    for policy, (dense, moe) in _policy_counts(split, recompute, recompute_layers).items():
        layers = (layers + dense * _layer_activation_bytes(d, False, policy)
                  + moe * _layer_activation_bytes(d, True, policy))
    other = np.zeros(len(split[0]))
    other[0] += sum(op.act_bytes for op in embedding_dims_ops(d))
    other[-1] += sum(op.act_bytes for op in head_dims_ops(d))
    if split[3]:
        # each module on its stage, and its head (final norm, LM head, loss) on the last
        other += np.array(split[3]) * _mtp_activation_bytes(d, split_mtp_is_moe(split), mtp_policy(recompute, recompute_layers))
        other[-1] += sum(split[3]) * sum(op.act_bytes for op in head_dims_ops(d))
    return layers, other


def _mtp_activation_bytes(d: Dims, moe_layer: bool, recompute: str) -> float:
    """What one multi-token-prediction module keeps on its stage: its embedding's saved tensors
    (never recomputed) and, of the checkpointed part (norms, projection, layer), what the policy
    keeps (under full: the two inputs the norms keep)."""
    ops = mtp_dims_ops(d, moe_layer)
    outside = {op.name for op in embedding_dims_ops(d)}
    inner = [op for op in ops if op.name not in outside]
    kept = sum(op.act_bytes for op in inner[:2]) if recompute == "full" else kept_bytes(inner, recompute, d)
    return sum(op.act_bytes for op in ops if op.name in outside) + kept


def steady_microbatches(name: str, pp: int, m: int) -> int:
    """Fewer micro-batches with the same live-chunk frontier on every rank: once one of the
    schedule whose spec is `steady_inflight` (its in-flight activations bounded by a warm-up
    of at most 2*pp micro-batches; GPipe's grow with m) runs 2*pp micro-batches its warm-up and cool-down are whole and more
    only repeat the steady state (tests/test_memory.py checks every generator). The residue
    mod 2*pp is kept so that each generator's divisibility rules give the same answer."""
    steady = name in SCHEDULES and SCHEDULES[name].steady_inflight
    return 2 * pp + m % (2 * pp) if steady and m >= 4 * pp else m


@lru_cache(maxsize=4096)
def _schedule(name: str, pp: int, m: int, vpp: int, check: bool):
    """(live-chunk frontier per rank or None, peak in-flight chunk activations per rank).
    With `check` the schedule is proved by `prove` and its `peak_inflight` is used; without
    (fast path for layout searches, `prove` costs seconds at pp=64, m=512) the same count is
    replayed here, on `steady_microbatches(name, pp, m)`."""
    if not check:
        m = steady_microbatches(name, pp, m)
    try:
        sched = build(name, pp, m, vpp)
    except ScheduleConstraint:
        # Generator not available: bound by ZB-V's 2p chunk-activations for V schedules
        # (shared/reference/schedules.md section 7), GPipe's m*vpp otherwise.
        bound = min(m * vpp, 2 * pp) if vpp == 2 else m * vpp
        return None, (bound,) * pp
    peaks = prove(sched).peak_inflight if check else tuple(peak_inflight(actions) for actions in sched.ranks)
    stages = tuple(tuple(sched.stages.stage(rank, c) for c in range(vpp)) for rank in range(pp))
    frontiers = [_live_frontier(actions, vpp) for actions in sched.ranks]
    padded = np.zeros((pp, max(map(len, frontiers)), vpp))  # a zero row is never a strict maximum
    for rank, frontier in enumerate(frontiers):
        padded[rank, :len(frontier)] = frontier
    return (stages, padded), peaks


def _live_frontier(actions, chunks: int) -> tuple[tuple[int, ...], ...]:
    """The live activations of a rank, counted per chunk, at each point where they grow; of
    those, only the ones no other point covers in every chunk (a covered point holds no more
    bytes whatever each chunk weighs, and where it holds as many its split is the same), in
    the rank's order. A layout search then prices a rank's activation peak from a handful of
    points instead of replaying its schedule once per candidate."""
    live = [0] * chunks
    points: dict[tuple[int, ...], None] = {}  # first occurrences, in order: the steady state repeats
    rising = False
    for a, change in activation_changes(actions):
        if rising and change < 0:  # only a point followed by a fall can cover the next ones
            points.setdefault(tuple(live))
        live[a.chunk] += change
        rising = change > 0
    if rising:
        points.setdefault(tuple(live))
    frontier: list[tuple[int, ...]] = []
    for p in points:
        if any(all(x <= y for x, y in zip(p, q)) for q in frontier):
            continue
        frontier = [q for q in frontier if not all(x <= y for x, y in zip(q, p))]
        frontier.append(p)
    return tuple(frontier)


def activation_peaks(frontiers: np.ndarray, layers: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, (layers, extras) bytes at the first point of its frontier where their sum is
    largest. `frontiers`: (rank, point, chunk) live counts; `layers`, `other`: (rank, chunk)
    bytes of one micro-batch. A chunk's activations live from its F to its B (or BW), and
    chunks of one rank may differ (uneven layers, embedding / head), so bytes are summed per
    chunk rather than multiplying the in-flight count by one size."""
    at_layers = np.einsum("rpc,rc->rp", frontiers, layers)
    at_other = np.einsum("rpc,rc->rp", frontiers, other)
    first_peak = np.argmax(at_layers + at_other, axis=1)[:, None]
    return (np.take_along_axis(at_layers, first_peak, 1)[:, 0], np.take_along_axis(at_other, first_peak, 1)[:, 0])


# ---- per-rank report ----------------------------------------------------------------------

@dataclass(frozen=True)
class RankMemory:
    """Memory of one pipeline rank (any of its TP/CP/DP peers), in bytes."""

    rank: int
    stages: tuple[int, ...]
    layers: int
    params: float  # parameters held by this rank
    inflight: int  # peak in-flight chunk activations (schedule validator)
    weights: float
    grads: float
    optimizer: float
    activations: float  # transformer layers at the peak, + one layer's recompute working set
    other: float  # embedding / LM-head activations and logits at the peak
    reserve: float
    recompute_working: float = 0.0  # part of `activations`: one layer being recomputed
    total: float = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "total", self.weights + self.grads + self.optimizer
                           + self.activations + self.other + self.reserve)

    @property
    def model_states(self) -> float:
        return self.weights + self.grads + self.optimizer

    def gib(self) -> dict[str, float]:
        keys = ("weights", "grads", "optimizer", "activations", "other", "reserve", "total")
        return {k: getattr(self, k) / GIB for k in keys}


def memory_per_rank(s, check_schedule: bool = True) -> list[RankMemory]:
    """One `RankMemory` per pipeline rank of scenario `s` (`check_schedule=False` skips the
    schedule validator, for layout searches). Built from two cached halves, activations and
    model states, each keyed by only what it depends on, so that a layout search pricing
    100,000 layouts computes each distinct half once."""
    schedule = _schedule_key(s, check_schedule)
    d = Dims.of(s)
    split = layer_split(s)
    activations = _rank_activations(d, s.training.recompute, split, schedule, s.training.recompute_num_layers,
                                    s.training.moe_a2a_overlap)
    states = _states_of(s, d, schedule)
    return [RankMemory(rank, stages, layers, params, inflight, w, g, o, acts, other,
                       RESERVE_FIXED_BYTES + ACTIVATION_FRAGMENTATION * (acts + other), working)
            for rank, ((acts, other, working, inflight), (stages, layers, params, w, g, o))
            in enumerate(zip(activations, states))]


def model_state_bytes(s) -> float:
    """Weights, gradients and optimizer state of the fullest pipeline rank: a lower bound of its
    peak that a layout search checks before pricing activations."""
    schedule = _schedule_key(s, False)
    return max(w + g + o for *_, w, g, o in _states_of(s, Dims.of(s), schedule))


def _schedule_key(s, check: bool) -> tuple:
    """What the per-rank halves depend on of the schedule; unchecked, the micro-batch count as
    `_schedule` walks it, so that layouts differing only beyond the steady state share it."""
    m = s.num_microbatches if check else steady_microbatches(s.schedule, s.pp, s.num_microbatches)
    return s.schedule, s.pp, m, s.vpp, check


def _states_of(s, d: Dims, schedule: tuple) -> tuple:
    return _rank_states(_params_dims(d), layer_split(s), schedule, ShardingPlan.of(s))


@lru_cache(maxsize=4096)
def _params_dims(d: Dims) -> Dims:
    """`d` without what parameter counts ignore, so that layouts differing only there share
    one cache entry."""
    return replace(d, b=1, cp=1, sp=False)


def _rank_stages(schedule: tuple) -> tuple[tuple[int, ...], ...]:
    name, pp, m, vpp, check = schedule
    walked, _ = _schedule(name, pp, m, vpp, check)
    return walked[0] if walked else tuple(tuple(c * pp + rank for c in range(vpp)) for rank in range(pp))


@lru_cache(maxsize=65536)
def _rank_activations(d: Dims, recompute: str, split: tuple, schedule: tuple, recompute_layers: int | None = None,
                      one_more: bool = False) -> tuple:
    """Per rank: (layer activations at the peak + the recompute working set, embedding /
    head extras at the peak, that working set, peak in-flight chunks). `one_more`: Megatron's
    EP all-to-all overlap runs one more warm-up forward before its 1F1B steps (schedules.py:
    num_warmup_microbatches + 1), so one more chunk, the rank's largest, is in flight at the peak."""
    name, pp, m, vpp, check = schedule
    walked, peaks = _schedule(name, pp, m, vpp, check)
    stages = np.array(_rank_stages(schedule))  # (rank, chunk) -> global stage
    layer_bytes, other_bytes = _stage_bytes(d, recompute, split, recompute_layers)
    layers, other = layer_bytes[stages], other_bytes[stages]
    if walked:
        acts, extras = activation_peaks(walked[1], layers, other)
    else:  # fallback: the bound times the largest chunk
        bound = np.array(peaks)
        acts, extras = bound * layers.max(axis=1), bound * other.max(axis=1)
    if one_more:
        acts, extras, peaks = acts + layers.max(axis=1), extras + other.max(axis=1), tuple(p + 1 for p in peaks)
    working = np.zeros(pp)
    for policy, counts in _policy_counts(split, recompute, recompute_layers).items():
        if policy == "none":
            continue
        for is_moe, count in zip((False, True), counts):
            rebuilt = _layer_activation_bytes(d, is_moe, "none") - _layer_activation_bytes(d, is_moe, policy)
            working = np.maximum(working, np.where(count[stages].sum(axis=1) > 0, rebuilt, 0.0))
    return tuple(zip((acts + working).tolist(), extras.tolist(), working.tolist(), peaks))


def stage_layer_counts(s) -> tuple[np.ndarray, np.ndarray]:
    """(dense, MoE) transformer layers of each global stage (arrays: read, do not write)."""
    return _stage_counts(layer_split(s))


@lru_cache(maxsize=1024)
def _stage_counts(split: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(dense, MoE) layers of each global stage."""
    counts = np.array([layer_counts(split, (stage,)) for stage in range(len(split[0]))], dtype=float)
    return counts[:, 0], counts[:, 1]


# Bytes per parameter of the model states ZeRO-3 shards whole: an fp32 parameter (the optimizer's
# master copy itself), an fp32 gradient and Adam's two fp32 moments, "16 P / N_d" (Rajbhandari
# et al. 2020, section 5.1, K = 12 plus 2 + 2; PyTorch FSDP keeps the same 4 + 4 + 8 in fp32).
ZERO3_STATE_BYTES = (4, 4, 8)


@lru_cache(maxsize=65536)
def _rank_states(d: Dims, split: tuple, schedule: tuple, sharding: ShardingPlan) -> tuple:
    """Per rank: (stages, layers, parameters, weight / grad / optimizer bytes).

    ZeRO 0-2 follow Megatron's table (distrib_optimizer.md): the optimizer state (1), then the
    gradients (2) divided over the shard group. ZeRO-3 shards everything (ZERO3_STATE_BYTES)
    and holds, besides, what is gathered at the peak: with resharding after forward the unit
    running and the one prefetched (FSDP2 prefetches one unit ahead), else every unit of the
    rank from its forward to its backward; and one unit's unsharded gradient before its
    reduce-scatter (also ZeRO-2's transient). Where gradients are reduced once per step instead
    (under a pipeline: `ShardingPlan.reduces_in_compute`), ZeRO-2/3 accumulate the stage's
    unsharded gradients at the reduce width until then, as ZeRO-1 does."""
    # distrib_optimizer.md's table (header): half-precision gradients leave the optimizer an
    # fp32 copy of them to keep (16 B instead of 12). The distributed optimizer makes that copy
    # of its shard only inside the step (distrib_optimizer.py: shard_main_param.grad =
    # shard_model_grad.float()), after the last backward freed the activations, and train_step
    # zeroes it before the next forward: at the activation peak its shard holds 12 B.
    w_bytes, opt_bytes = (4, 8) if sharding.fp32 else (2, 12 if sharding.grad_bytes == 4 or sharding.shards_optimizer else 16)
    if sharding.bf16_optimizer:
        # Apex DistributedFusedAdam with dtype bf16: exp_avg and exp_avg_sq shards in bf16 and no
        # parameter copy (distributed_fused_adam.py: store_params off when the optimizer's
        # dtype is the model's)
        opt_bytes = 4
    if sharding.gather_bytes == 1:
        # FP8 parameters (Megatron --fp8-param-gather, TE's Float8Tensor): the parameter buffer
        # holds one byte per element (param_and_grad_buffer.py: uint8 for quantized parameters)
        w_bytes = 1
    g_bytes = sharding.grad_bytes
    rows = []
    for stages, layers, p, unit in _rank_params(d, split, schedule):
        shard = p.dense / sharding.dense_group + p.expert / sharding.expert_group
        if sharding.reduces_in_compute:
            g = (ZERO3_STATE_BYTES[1] if sharding.zero == 3 else g_bytes) * shard + g_bytes * unit
        else:
            g = g_bytes * p.total
        if sharding.zero == 3:
            gathered = 2 * unit if sharding.reshard_after_forward else p.total
            w = ZERO3_STATE_BYTES[0] * shard + sharding.gather_bytes * gathered
            o = ZERO3_STATE_BYTES[2] * shard
        else:
            w = w_bytes * p.total
            o = opt_bytes * shard if sharding.shards_optimizer else opt_bytes * p.total
        rows.append((stages, layers, p.total, w, g, o))
    return tuple(rows)


@lru_cache(maxsize=16384)
def _rank_params(d: Dims, split: tuple, schedule: tuple) -> tuple:
    """Per rank: (stages, layers, parameters, the largest unit's parameters), whatever the
    sharding (a layout search tries several on the same pipeline)."""
    rows = []
    for stages in _rank_stages(schedule):
        dense, moe = layer_counts(split, stages)
        rows.append((stages, dense + moe, params_of(d, split, stages), _largest_unit(d, split, stages)))
    return tuple(rows)


def _largest_unit(d: Dims, split: tuple, stages: tuple[int, ...]) -> float:
    """Parameters of the largest unit a sharded stack gathers or reduces at once on this rank:
    a transformer layer, or the embedding / LM head (FSDP wraps each on its own)."""
    dense, moe = layer_counts(split, stages)
    units = [layer_params(d, False).total if dense else 0.0, layer_params(d, True).total if moe else 0.0]
    if 0 in stages:
        units.append(embedding_params(d))
    if len(split[0]) - 1 in stages:
        units.append(head_params(d, 0 in stages))
    if split[3] and any(split[3][stage] for stage in stages):
        units.append(max(mtp_params(d, split_mtp_is_moe(split), stage == 0).total for stage in stages if split[3][stage]))
    return max(units)


@dataclass(frozen=True)
class MemoryReport:
    rows: tuple[RankMemory, ...]
    hbm_bytes: float
    scenario: object = field(repr=False, compare=False)

    @cached_property
    def reason(self) -> str:
        """One line naming the dominant part (written when asked: a layout search prices
        100,000 reports and reads few reasons)."""
        return _reason(self.scenario, list(self.rows), self.hbm_bytes)

    @property
    def worst(self) -> RankMemory:
        return max(self.rows, key=lambda r: r.total)

    @property
    def peak_bytes(self) -> float:
        return self.worst.total

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.hbm_bytes


def _fmt_params(n: float) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.3g}M"


def _gib(n: float) -> str:
    """GiB with enough digits that a small what-if (hbm_gib: 0.001) does not read '0 > 0'."""
    return f"{n / GIB:.0f}" if n >= 10 * GIB else f"{n / GIB:.3g}"


def _reason(s, rows: list[RankMemory], hbm: float) -> str:
    worst = max(rows, key=lambda r: r.total)
    where = f"pipeline rank {worst.rank}" if s.pp > 1 else "each GPU"
    if worst.total <= hbm:
        return f"fits: peak {worst.total / GIB:.1f} GiB of {_gib(hbm)} GiB on {where}"
    head = (f"{s.name}: {_fmt_params(model_params(s))} params on {s.num_gpus} GPU(s) "
            f"(tp={s.tp} pp={s.pp} dp={s.dp} cp={s.cp} ep={s.ep}" + (f" etp={s.etp})" if s.etp != s.tp else ")"))
    states = max(rows, key=lambda r: r.model_states)
    if states.model_states > hbm:
        return (f"{head}: weights+grads+optimizer alone need {_gib(states.model_states)} GiB > "
                f"{_gib(hbm)} GiB (weights {_gib(states.weights)}, grads {_gib(states.grads)}, "
                f"optimizer {_gib(states.optimizer)} GiB on {where}); raise tp/pp or "
                + ("shard more (parallel.zero 1-3)" if ShardingPlan.of(s).zero < 3 else
                   f"shard over more ranks (shard groups of {s.shard_group})"))
    parts = {"weights+grads+optimizer": worst.model_states, "activations": worst.activations + worst.other,
             "reserve": worst.reserve}
    top = max(parts, key=parts.get)
    detail = ", ".join(f"{k} {v / GIB:.1f}" for k, v in parts.items())
    hint = (f" ({worst.inflight} in-flight chunk activations of {worst.layers} layers, "
            f"recompute={s.training.recompute}; try recompute, sequence_parallel or a smaller micro_batch)"
            if top == "activations" else "")
    return (f"{head}: {where} needs {worst.total / GIB:.1f} GiB > {_gib(hbm)} GiB; "
            f"largest part {top}{hint} [{detail} GiB]")


def memory_report(s, check_schedule: bool = True) -> MemoryReport:
    rows = memory_per_rank(s, check_schedule)
    hbm = s.gpu.hbm_gib * GIB
    return MemoryReport(tuple(rows), hbm, s)


def fits_in_memory(s, check_schedule: bool = True) -> tuple[bool, str]:
    """(worst rank's total <= the GPU's HBM, a one-line reason naming the dominant part)."""
    report = memory_report(s, check_schedule)
    return report.fits, report.reason


def peak_memory_gib(s, check_schedule: bool = True) -> float:
    return memory_report(s, check_schedule).peak_gib

"""Tier one of `sim3d plan`: a step-time estimate for every layout that fits, in bulk.

The costs are the simulator's own (costs/cost_model.py): one micro-batch of the embedding, a
layer and the head per (F, B, BI, BW), priced once per distinct shape and shared by every
layout with that shape. The fabric's graph is built once, and a group link is priced once
per (axis, stride, size), which fix every group along that axis. What the estimate replaces
is the replay: the pipeline is a closed form of the per-rank costs (shared/reference/
schedules.md section 7, generalised from uniform stages to the busiest rank); V schedules
read their bubble, and when each chunk's last weight gradient is done, off the schedule
replayed with unit costs; the data-parallel tail is the gradient reduction the last
backward cannot hide. The finalists are then simulated, and the table shows how far each
estimate was off.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..costs.cost_model import CostModel
from ..model.ops import Dims
from ..model.params import embedding_params, head_params, layer_params
from ..model.memory import stage_layer_counts, steady_microbatches
from ..cluster.placement import EXPERT_GRADIENT_AXIS, GRADIENT_AXIS, REPLICA_AXIS, SHARD_AXIS
from ..schedule import build
from ..schedule.evaluate import evaluate, uniform_costs
from ..schedule.ir import StageMap
from ..scenario.kernels import TORCH_STACKS
from ..scenario.sharding import ShardingPlan
from ..schedule.specs import SCHEDULES, sends_overlap
from ..step import gathers_after_step, dp_buckets_per_chunk
from ..cluster.topology import Topology
from .space import Layout, Space

KINDS = ("F", "B", "BI", "BW")


@dataclass(frozen=True)
class Estimate:
    step_s: float
    pipeline_s: float  # compute, TP/CP/EP collectives and bubble of the busiest rank
    p2p_s: float  # pipeline transfers on the fill and drain path
    dp_s: float  # data-parallel communication not hidden behind compute
    optimizer_s: float  # the optimizer step, the tied embedding's all-reduce before it included


@lru_cache(maxsize=4096)
def unit_timeline(schedule: str, pp: int, m: int) -> tuple[float, tuple[tuple[float, ...], ...]]:
    """A schedule replayed with every F, BI and BW costing 1 (read at `steady_microbatches`:
    the steady state repeats), at the chunks it runs (a V's two, ZB-H2's one): the busiest
    rank's idle time, and per rank and chunk how long before the end its last weight gradient
    is computed, in those units."""
    m = steady_microbatches(schedule, pp, m)
    vpp = SCHEDULES[schedule].default_vpp
    sched = build(schedule, pp, m, vpp)
    timeline = evaluate(sched, uniform_costs(1.0, 2.0, 1.0, 1.0))
    ready = [[0.0] * vpp for _ in range(pp)]
    for (rank, index), (_, end) in timeline.spans.items():
        action = sched.ranks[rank][index]
        if action.kind.value in ("B", "BW"):
            ready[rank][action.chunk] = max(ready[rank][action.chunk], end)
    before_end = tuple(tuple(timeline.step_time - r for r in chunks) for chunks in ready)
    return timeline.step_time - max(timeline.busy), before_end


def _queued(chunks: list[tuple[float, float]], buckets: int, backward: float) -> float:
    """When a rank's data-parallel stream is free, relative to the step's end, after each
    chunk's reduction, given (seconds before the end its last backward ends, seconds of its
    reduction): all but its last bucket can start during that `backward`, and none before
    the stream is free."""
    stream = -float("inf")
    for lead, reduce_s in sorted(chunks, reverse=True):
        stream = max(stream, -lead - min(reduce_s * (1 - 1 / buckets), backward)) + reduce_s
    return stream


@dataclass(frozen=True)
class Pipeline:
    """What a bubble rule prices: a layout's schedule, its micro-batches and each rank's
    seconds of one micro-batch (per kind, and F plus backward in `work`)."""
    schedule: str
    pp: int
    m: int
    vpp: int
    per_rank: list[dict]
    work: list[float]


def _fill_drain(p: Pipeline) -> float:
    return (p.m - 1) * max(p.work) + sum(p.work)


def _interleaved(p: Pipeline) -> float:
    return p.m * max(p.work) + (p.pp - 1) * sum(p.work) / p.pp / p.vpp


def _zb_h1(p: Pipeline) -> float:
    # a weight-gradient pass longer than its F and BI (sharded data parallelism's exposed
    # reduce-scatters ride on it) fills the bubble, and no more: it never shortens the step
    return p.m * max(p.work) + (p.pp - 1) * sum(max(0.0, r["F"] + r["BI"] - r["BW"]) for r in p.per_rank) / p.pp


def _unit_timeline(p: Pipeline) -> float:
    """The unit-cost bubble (V schedules, ZB-H2), a unit being a third of one chunk's F + BI + BW."""
    return p.m * max(p.work) + unit_timeline(p.schedule, p.pp, p.m)[0] * sum(p.work) / p.pp / (3 * p.vpp)


# The busiest rank's compute plus the bubble, by each ScheduleSpec's `bubble_rule`
# (schedules.md section 7); tests/test_schedule_registry.py checks every rule a spec may name
# is here, so a new rule cannot fall through to another's formula.
PIPELINE_TIME = {"fill-drain": _fill_drain, "interleaved": _interleaved, "zb-h1": _zb_h1,
                 "unit-timeline": _unit_timeline}


# Each rule's lower bound from the ranks' totals alone (`total`: {kind: seconds of one micro-
# batch through every stage}, "work" the F plus backward the rule reads): a rule reads the
# busiest rank's work, never less than the mean, pp * mean being the total. The unit-cost
# bubble is left out (it needs the schedule replayed; it is not negative).
def _fill_drain_floor(pp: int, m: int, vpp: int, total: dict) -> float:
    return (m - 1 + pp) * total["work"] / pp


def _interleaved_floor(pp: int, m: int, vpp: int, total: dict) -> float:
    return (m + (pp - 1) / vpp) * total["work"] / pp


def _steady_floor(pp: int, m: int, vpp: int, total: dict) -> float:
    return m * total["work"] / pp


# ZB-H1's bubble (F + BI - BW per rank) is left out too: the collectives a floor leaves out
# may lengthen BW more than F and BI
PIPELINE_FLOOR = {"fill-drain": _fill_drain_floor, "interleaved": _interleaved_floor, "zb-h1": _steady_floor,
                  "unit-timeline": _steady_floor}
# what the floor gives up so that a different order of the same float additions never puts it above the estimate
FLOOR_MARGIN = 1e-9


class Estimator:
    """Prices layouts of one `Space`. Every part of an estimate is cached under the layout
    fields it depends on, so 100,000 layouts cost a few thousand cost-model calls."""

    def __init__(self, space: Space, profile=None):
        self.space = space
        self.profile = profile
        self._cache: dict[tuple, object] = {}

    def _memo(self, key: tuple, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def _placed(self, layout: Layout, scenario_of) -> tuple:
        """(topology, {axis: GroupLink}) of a layout's process groups (`scenario_of()`: its
        scenario, asked for on a miss). The graph is built once;
        a dense axis's groups are fixed by its stride and size, so its link is priced once per
        (stride, size) however many layouts share it; the gradient group (dp x cp) by both axes'."""
        def place():
            scenario = scenario_of()
            topology = self._memo(("fabric",), lambda: Topology(scenario)).for_layout(scenario)
            stride = topology.placement.stride
            keys = {}
            experts = (EXPERT_GRADIENT_AXIS,) if scenario.model.moe is not None else ()
            for axis in ("tp", "cp", "ep", GRADIENT_AXIS, SHARD_AXIS, REPLICA_AXIS) + experts:
                keys[axis] = (("link", axis, stride(axis), getattr(layout, axis)) if axis in ("tp", "cp")
                              else ("link", axis, stride("dp"), layout.dp, stride("cp"), layout.cp,
                                    scenario.shard_group) if axis in (GRADIENT_AXIS, SHARD_AXIS, REPLICA_AXIS)
                              else ("link", axis, layout.tp, layout.cp, layout.ep, layout.dp, layout.pp, layout.order))
            return topology, _Links(self, topology, keys)
        return self._memo(("placed", layout.tp, layout.cp, layout.ep, layout.dp, layout.pp, layout.order,
                           layout.dp_shard), place)

    def cost_model(self, layout: Layout, scenario) -> CostModel:
        """The folded cost model of a layout's scenario, on the shared fabric and links (what
        a simulation of it prices, without building them again)."""
        topology, links = self._placed(layout, lambda: scenario)
        costs = CostModel(scenario, topology, self.profile, folded=True)
        costs.__dict__["_folded_links"] = links  # priced once per placement, not per layout
        return costs

    def _compute_key(self, layout: Layout, scenario) -> tuple:
        """What a block's price depends on: layouts that share it share the priced blocks."""
        links = self._placed(layout, scenario)[1]
        compute_key = (layout.tp, layout.cp, layout.ep, layout.micro_batch, layout.recompute,
                       layout.sequence_parallel, layout.tp_comm_overlap, links["tp"], links["cp"], links["ep"])
        # a block's backward also carries the gradient accumulation's adds (but where the GEMMs
        # accumulate), which depend on the sharding, the pipeline it runs under (a PyTorch
        # pipeline may defer the reductions) and the micro-batches (kernel_stack.py
        # accumulation_bytes), and the head's on whether it is the only stage. Under Megatron's
        # stack the blocks' prices before it (the first BLOCK_KEY fields) are shared beyond these.
        kernels = self.space.base.training.kernels
        if kernels.stack in TORCH_STACKS:
            compute_key += (layout.zero, layout.dp_shard, layout.dp, layout.pp, layout.vpp, layout.schedule,
                            self._microbatches(layout))
        elif kernels.accumulation != "fused":  # Megatron's stack defers no reduction: fewer keys
            sharded = layout.zero >= 2
            compute_key += (sharded, layout.pp * layout.vpp == 1)
            if kernels.accumulation == "autograd":
                compute_key += ((layout.dp_shard, layout.dp) if sharded else (), self._microbatches(layout))
        return compute_key

    def _microbatches(self, layout: Layout) -> int:
        return self.space.base.training.global_batch // (layout.micro_batch * layout.dp)

    def _cost_model_for(self, layout: Layout, scenario, compute_key: tuple):
        """A function building the layout's cost model once, when a cache misses."""
        costs = None

        def cost_model() -> CostModel:
            nonlocal costs
            if costs is None:
                costs = self.cost_model(layout, scenario())
                # a layer's price depends on the compute key alone: layouts that share it share
                # the priced layers; under Megatron's stack, whatever their gradient accumulation,
                # which CostModel.block adds per layout
                shared = compute_key if costs.s.training.kernels.stack in TORCH_STACKS else compute_key[:BLOCK_KEY]
                costs._layer_cache = self._memo(("layers", shared), dict)
            return costs
        return cost_model

    def floor(self, layout: Layout) -> float:
        """A lower bound of `estimate(layout, ...)`, read from the blocks' prices: the schedule's
        floor over every stage's compute (PIPELINE_FLOOR), with what sharded data parallelism's
        collectives inside compute cannot hide (`_unit_bounds`), and without the pipeline
        transfers, the data-parallel tail, the optimizer or the recomputation a count of layers
        leaves out (none is negative). A search keeping the best N estimates need not price a
        layout whose floor is above the Nth (tier_one.py). The layout's scenario is built only
        where a cache misses."""
        made = None

        def scenario():
            nonlocal made
            made = made or self.space.scenario(layout)
            return made
        compute_key = self._compute_key(layout, scenario)
        spec = SCHEDULES[layout.schedule]
        # a count of recomputed layers leaves the rest unrecomputed: the floor prices every layer so
        policy = "none" if self.space.recomputed_layers(layout) is not None else None
        total = self._memo(("total", compute_key, policy),
                           lambda: self._totals(self._cost_model_for(layout, scenario, compute_key)(), compute_key,
                                                policy))
        # what ShardingPlan.of reads of a layout: the stage, the shard group, a pipeline's presence
        # and the expert replicas (from the expert grid)
        plan = self._memo(("plan", layout.zero, layout.dp_shard, layout.dp, layout.cp, layout.pp, layout.tp, layout.ep,
                           layout.order), lambda: ShardingPlan.of(scenario()))
        if plan.collectives_in_compute:
            shard = self._placed(layout, scenario)[1][SHARD_AXIS]
            units = self._memo(("units", layout.tp, layout.ep, plan, shard),
                               lambda: self._unit_bounds(self._cost_model_for(layout, scenario, compute_key)(), shard))
            if units is not None:
                stages = layout.pp * layout.vpp
                total = {kind: max(total[kind] + stages * units[kind][0], units[kind][1]) for kind in KINDS}
        total = {**total, "work": total["F"] + (total["BI"] + total["BW"] if spec.split_backward else total["B"])}
        floor = PIPELINE_FLOOR[spec.bubble_rule](layout.pp, self._microbatches(layout), layout.vpp, total)
        return floor * (1 - FLOOR_MARGIN)

    @staticmethod
    def _unit_bounds(costs: CostModel, shard) -> dict | None:
        """{kind: (the least a stage's action lasts beyond its compute, the least all stages'
        actions of that kind last together)} under sharded data parallelism inside compute.
        A stage's units (sharded_dp.unit_pipeline) wait for the first one's gather before any
        computes and end with the last one's reduce-scatter, and all their collectives queue on
        one network: so an action lasts at least its compute plus the smallest unit's gather and
        reduce-scatter, and all of them at least every unit's collectives one after the other.
        None where the units are not all of a layer, the embedding and the head (multi-token
        prediction) or a stage may hold none (a pipeline layout)."""
        s = costs.s
        if s.model.mtp_layers or s.parallel.pipeline_layout is not None:
            return None
        d = Dims.of(s)
        dense, moe = (float(n.sum()) for n in stage_layer_counts(s))
        units = [(1.0, embedding_params(d)), (1.0, head_params(d, s.num_stages == 1))]
        units += [(n, layer_params(d, is_moe).total) for n, is_moe in ((dense, False), (moe, True)) if n]
        bounds = {}
        for kind in KINDS:
            priced = [(n, *costs.unit_collectives(params, kind, shard)[:2]) for n, params in units]
            least = min(g for _, g, _ in priced) + min(r for _, _, r in priced)
            bounds[kind] = (least, sum(n * (g + r) for n, g, r in priced))
        return bounds

    def _totals(self, costs: CostModel, compute_key: tuple, policy: str | None) -> dict:
        """{kind: seconds} of one micro-batch through every stage's blocks (their units' collectives
        left out)."""
        s, links = costs.s, links_of(compute_key)
        dense, moe = (float(n.sum()) for n in stage_layer_counts(s))
        modules = s.model.mtp_layers
        total = {}
        for kind in KINDS:
            total[kind] = (dense * costs.block("layer", kind, links, policy).seconds
                           + (moe * costs.block("moe_layer", kind, links, policy).seconds if s.model.moe else 0.0)
                           + costs.block("embedding", kind, links).seconds
                           + (1 + modules) * costs.block("head", kind, links).seconds
                           + (modules * costs.block("mtp", kind, links, "none" if policy else costs.mtp_recompute).seconds
                              if modules else 0.0))
        return total

    def estimate(self, layout: Layout, scenario) -> Estimate:
        spec = SCHEDULES[layout.schedule]
        v_shape = spec.placement == "v"
        compute_key = self._compute_key(layout, lambda: scenario)
        cost_model = self._cost_model_for(layout, lambda: scenario, compute_key)
        # ZeRO-2/3 may price each unit's gathers and reduce-scatters inside the compute actions,
        # on the shard group the placement gives
        in_compute = ShardingPlan.of(scenario).collectives_in_compute
        sharded = (layout.zero, layout.dp, layout.order, layout.dp_shard) if in_compute else ()
        per_rank = self._memo(("work", compute_key, layout.pp, layout.vpp, v_shape) + sharded,
                              lambda: self._rank_work(layout, scenario, cost_model(), compute_key))
        transfers = self._memo(("p2p", layout.tp, layout.cp, layout.ep, layout.dp, layout.pp, layout.order,
                                layout.micro_batch, layout.sequence_parallel),
                               lambda: self._transfers(cost_model(), layout.pp))
        p2p = 2 * sum(transfers)
        # a channel between two stages carries each micro-batch once per chunk (interleaved:
        # vpp times); where its messages take longer than the compute, it sets the pace
        carried = scenario.num_microbatches * (layout.vpp if spec.p2p_per_chunk else 1)
        pipeline = max(self._pipeline(layout, scenario.num_microbatches, per_rank), carried * max(transfers, default=0.0))
        if not sends_overlap(layout.schedule, scenario.training.overlap_p2p):
            # the compute stream waits out each send a rank makes: a forward's and a backward's per
            # micro-batch and chunk (the engine sends them apart), but one per micro-batch on a
            # two-stage pipeline of one chunk, whose ranks each send one way
            sends = 1 if layout.pp == 2 and layout.vpp == 1 else 2
            pipeline += sends * carried * max(transfers, default=0.0)
        states_key = (layout.tp, layout.pp, layout.vpp, v_shape, layout.dp, layout.cp, layout.ep,
                      layout.zero, layout.dp_shard)
        dp = self._memo(("dp",) + states_key + (layout.order,), lambda: self._dp(layout, scenario, cost_model()))
        dp_tail = self._dp_tail(layout, scenario, dp, per_rank)
        # the placement too: the tied embedding's all-reduce crosses from the first stage to the last
        optimizer = self._memo(("optimizer",) + states_key + (layout.order,),
                               lambda: self._optimizer(cost_model(), layout))
        return Estimate(pipeline + p2p + dp_tail + optimizer, pipeline, p2p, dp_tail, optimizer)

    def _rank_work(self, layout: Layout, s, costs: CostModel, compute_key: tuple) -> list[dict]:
        """Per pipeline rank, {kind: seconds} of one micro-batch through all its chunks."""
        dense, moe = stage_layer_counts(s)
        stage_map = _stage_map(layout)
        held = np.array([[stage_map.stage(r, c) for c in range(layout.vpp)] for r in range(layout.pp)])
        work = {}
        whole_stages = costs.sharding.collectives_in_compute or s.training.recompute_num_layers is not None
        if whole_stages:  # priced once per kind of stage, for every layout that has it
            alike = self._memo(("alike", layout.pp, layout.vpp, _v_shaped(layout), layout.recompute),
                               lambda: _alike_stages(costs))
            shard = costs.shard_link(0)
        for kind in KINDS:
            # the stage's action: its blocks and its units' collectives, or layers under two policies
            if whole_stages:
                per_kind = [self._memo(("stage", compute_key, costs.sharding, shard, signature, kind),
                                       lambda: costs.action(first, kind).seconds) for signature, first in alike[0]]
                per_stage = np.array(per_kind)[alike[1]]
            else:
                blocks = self._memo(("blocks",) + compute_key, lambda: self._blocks(costs, compute_key))
                per_stage = dense * blocks[("layer", kind)] + (moe * blocks[("moe_layer", kind)] if s.model.moe else 0.0)
                per_stage[0] += blocks[("embedding", kind)]
                per_stage[-1] += (1 + s.model.mtp_layers) * blocks[("head", kind)]  # and each module's head
                if s.model.mtp_layers:
                    per_stage += np.array(s.stage_mtp) * costs.block("mtp", kind, links_of(compute_key),
                                                                     costs.mtp_recompute).seconds
            work[kind] = per_stage[held].sum(axis=1).tolist()
        return [{kind: work[kind][r] for kind in KINDS} for r in range(layout.pp)]

    @staticmethod
    def _blocks(costs: CostModel, compute_key: tuple) -> dict:
        """{(block, kind): seconds} of one micro-batch through the embedding, a layer, the head."""
        links = links_of(compute_key)
        names = ("embedding", "layer", "head") + (("moe_layer",) if costs.s.model.moe else ())
        return {(name, kind): costs.block(name, kind, links).seconds for name in names for kind in KINDS}

    @staticmethod
    def _pipeline(layout: Layout, m: int, per_rank: list[dict]) -> float:
        """The busiest rank's compute plus the schedule's bubble (schedules.md section 7)."""
        spec = SCHEDULES[layout.schedule]
        work = [r["F"] + (r["BI"] + r["BW"] if spec.split_backward else r["B"]) for r in per_rank]
        return PIPELINE_TIME[spec.bubble_rule](Pipeline(layout.schedule, layout.pp, m, layout.vpp, per_rank, work))

    @staticmethod
    def _transfers(costs: CostModel, pp: int) -> tuple[float, ...]:
        """Replica 0's message time across each stage boundary (the fill and the drain cross
        each once)."""
        pipe = costs.placement.pipeline()
        return tuple(costs.transfer(pipe[r], pipe[r + 1]) for r in range(pp - 1))

    @staticmethod
    def _dp(layout: Layout, s, costs: CostModel) -> tuple[tuple, tuple, int]:
        """Gradient reduction seconds of each chunk's buckets, per pipeline rank (only the
        first for loop schedules, whose first rank finishes last), the first rank's parameter
        gathers per chunk, and the bucket count. Chunks differ: the first and last stage hold
        the embedding and the head."""
        if layout.dp * layout.cp == 1 and s.edp == 1:
            return (), (), 1
        buckets = dp_buckets_per_chunk(s)
        stage_map, pipe = _stage_map(layout), costs.placement.pipeline()
        ranks = range(layout.pp if _v_shaped(layout) else 1)
        reduce = tuple(tuple(costs.dp_reduce(pipe[r], stage_map.stage(r, c), buckets)[0] * buckets
                             for c in range(layout.vpp)) for r in ranks)
        gather = tuple(costs.param_gather(pipe[0], stage_map.stage(0, c), buckets)[0] * buckets
                       for c in range(layout.vpp)) if gathers_after_step(costs.s) else ()
        return reduce, gather, buckets

    @staticmethod
    def _dp_tail(layout: Layout, s, dp: tuple, per_rank: list[dict]) -> float:
        """What the data-parallel communication adds after the last backward. Loop schedules:
        the first rank finishes last; with overlap each chunk's buckets reduce during its last
        backward, all but what that backward cannot cover (at least one bucket), and the
        chunks' reductions queue on one stream; without overlap all of it waits. V schedules
        defer weight gradients: when each chunk's last one is computed is read from the
        unit-cost replay, and only that weight-gradient pass covers the chunk's buckets."""
        reduce, gather, buckets = dp
        if not reduce:
            return 0.0
        gather_tail = 0.0 if s.training.overlap_param_gather else sum(gather)
        if not s.training.overlap_grad_reduce:
            return sum(reduce[0]) + gather_tail
        last_bucket = reduce[0][0] / buckets  # of the first stage: no backward covers it
        if not _v_shaped(layout):
            # the first rank runs each chunk's last pp backwards in turn, chunk vpp-1 first
            # (Megatron's interleaved table, schedule/generators.py): chunk c's last backward
            # ends c * pp chunk-backwards before the step does
            backward = per_rank[0]["B"] / layout.vpp
            tail = _queued([(c * layout.pp * backward, r) for c, r in enumerate(reduce[0])], buckets, backward)
            return max(tail, last_bucket) + gather_tail
        _, before_end = unit_timeline(layout.schedule, layout.pp, s.num_microbatches)
        unit = sum(r["F"] + r["BI"] + r["BW"] for r in per_rank) / layout.pp / (3 * layout.vpp)
        tail = max(_queued([(lead * unit, r) for lead, r in zip(chunks, reduce[rank])], buckets,
                           per_rank[rank]["BW"] / layout.vpp)
                   for rank, chunks in enumerate(before_end))
        return max(tail, last_bucket) + gather_tail

    @staticmethod
    def _optimizer(costs: CostModel, layout: Layout) -> float:
        stage_map, pipe = _stage_map(layout), costs.placement.pipeline()
        held = [tuple(stage_map.stage(r, c) for c in range(layout.vpp)) for r in range(layout.pp)]
        return max(costs.optimizer(pipe[r], held[r]) + costs.embedding_sync(pipe[r], held[r])
                   for r in range(layout.pp))


class _Links(dict):
    """{axis: GroupLink} of one placement, each priced when first asked for (a floor needs the
    compute's and the shard group's alone), once per key the estimator's memo holds."""

    def __init__(self, estimator: Estimator, topology: Topology, keys: dict):
        super().__init__()
        self._estimator, self._topology, self._keys = estimator, topology, keys

    def __missing__(self, axis: str):
        link = self[axis] = self._estimator._memo(self._keys[axis], lambda: self._topology.group_link(axis))
        self._topology.release_loads()  # the link is priced; the tables behind it are not kept
        return link


def _alike_stages(costs: CostModel) -> tuple[list[tuple], np.ndarray]:
    """The distinct kinds of stage of a layout ((signature, its first stage), in order) and each
    global stage's index among them."""
    kinds: dict[tuple, int] = {}
    index = [kinds.setdefault(costs.stage_alike(stage), len(kinds)) for stage in range(costs.s.num_stages)]
    firsts = {}
    for stage, i in enumerate(index):
        firsts.setdefault(i, stage)
    return [(signature, firsts[i]) for signature, i in kinds.items()], np.array(index)


def _v_shaped(layout: Layout) -> bool:
    return SCHEDULES[layout.schedule].placement == "v"


def _stage_map(layout: Layout) -> StageMap:
    return StageMap(layout.pp, layout.vpp, SCHEDULES[layout.schedule].placement)


# the fields of a compute key a block's price before the gradient accumulation depends on
BLOCK_KEY = 10


def links_of(compute_key: tuple) -> dict:
    """The tp, cp and ep links of a layout's compute key."""
    return dict(zip(("tp", "cp", "ep"), compute_key[7:10]))

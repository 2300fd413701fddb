"""Per-action costs of a scenario: what the engine asks when it replays a schedule.

Compute actions (F, B, BI, BW) of a global stage cost the sum of their ops (compute.py) plus
the TP / EP collectives between them. By default Megatron issues those synchronously on the
compute stream; the overlap switches (Megatron's names, see `tp_overlap.overlap_plan`) hide a
collective under an adjacent GEMM, which then runs on fewer SMs: overlapped communication
is never free. Context-parallel ring exchanges overlap the attention they feed.
Point-to-point, data-parallel and optimizer costs come from the topology and collectives.py.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cached_property

from ..model.kernel_stack import accumulation_bytes
from ..model.params import block_params, embedding_params, head_params, layer_params, mtp_params
from ..model.recompute import mtp_policy, redo_fraction, reruns_forward_collective, stage_policies
from ..model.ops import Dims, embedding_ops, head_ops, is_moe_layer, layer_ops, mtp_is_moe, mtp_ops, stage_layer_range
from ..scenario.kernels import TORCH_STACKS
from ..scenario.sharding import ShardingPlan
from ..cluster.placement import SHARD_AXIS, Placement
from ..cluster.topology import Topology
from .collectives import COLLECTIVE, all_to_all_s_per_byte, bus_factor, collective_time, p2p_time
from .action_cost import ActionCost
from .buckets import GradientBuckets
from .moe_dispatch import all_to_all_slowness, dispatched
from .compute import ComputeModel, block_shape, is_memory_bound, op_class
from .a2a_overlap import paired_layer
from .executor_host import gradient_copies
from .flows import FlowSpec, NetworkFlows
from .optimizer_step import optimizer_seconds
from .pipeline_p2p import PipelineMessages
from .provenance import ANALYTICAL, PROFILE, ProvenanceRecorder
from .sharded_dp import unit_pipeline
from .tp_overlap import Overlap, overlap_plan, overlapped_seconds

# the blocks whose memory-bound kernels a trace can time (costs/trace_memory.py): block -> row
TRACED_BLOCKS = {"block": "layer", "head_block": "head"}


class CostModel(PipelineMessages):
    """Costs asked per global rank (`RankCosts`, costs/interface.py).

    Exact (`folded=False`, full fidelity): each rank is priced on its own process groups,
    paths and slowdown. Folded: the engine replays one pipeline and each of its ranks stands
    for every rank with the same pipeline coordinate, so it is priced as the slowest of
    them: with a degraded NIC, on the slowest group of each axis and the slowest pipeline's
    transfers (the step ends with its slowest replica); with a straggler, at its slowdown.
    Where ranks are truly alike both give the same answer."""

    def __init__(self, scenario, topology: Topology | None = None, profile=None, folded: bool = True):
        self.s = scenario
        self.topology = topology or Topology(scenario)
        self.placement: Placement = self.topology.placement
        self.buckets = GradientBuckets(scenario, self.placement)
        self.compute_model = ComputeModel(scenario, profile)
        self.profile = profile
        self.folded = folded
        self.provenance = ProvenanceRecorder()
        self._stage_cache: dict[tuple, ActionCost] = {}
        self._layer_cache: dict[tuple, ActionCost] = {}
        self._accumulated: dict[tuple, ActionCost] = {}  # backwards plus accumulation: not shared
        self._p2p_cache: dict[tuple[int, int], float] = {}
        self._link_cache: dict[tuple[str, int], object] = {}
        self._rank_links: dict[int, tuple] = {}
        self._rank_cache: dict[tuple[int, int, str], ActionCost] = {}
        self._layer_runs: dict[int, list[tuple[str, str, int]]] = {}
        self._block_shape = block_shape(scenario)
        self._slowdown = {f.straggler.rank: f.straggler.slowdown for f in scenario.faults if f.straggler}

    # ---- who a rank's collectives run with --------------------------------------------
    @cached_property
    def _degraded(self) -> bool:
        """A slowed or failed NIC or uplink, or ECMP's hashing, breaks the symmetry of groups
        and paths."""
        return self.s.network_asymmetric

    @property
    def sharding(self) -> ShardingPlan:
        return self.buckets.sharding

    @property
    def gradient_axes(self) -> tuple[tuple[str, bool], ...]:
        return self.buckets.gradient_axes

    @cached_property
    def _folded_links(self):
        # no "pp": a pipeline transfer is priced on its own path (`_transfer`), not as a ring
        rings = ("tp", "cp") + tuple(axis for axis, _ in self.gradient_axes) + (
            (SHARD_AXIS,) if self.sharding.collectives_in_compute else ())
        if not self._degraded:
            return {axis: self.topology.group_link(axis) for axis in rings + ("ep",)}
        links = {axis: self.topology.slowest_group_link(axis) for axis in rings}
        # expert groups wait for their slowest all-to-all, which a ring's bandwidth does not tell
        links["ep"] = self.topology.slowest_group_link("ep", all_to_all_slowness)
        return links

    def _link(self, axis: str, rank: int):
        """The ring link of `rank`'s group along `axis` (folded: of the slowest group)."""
        if self.folded or not self._degraded:
            return self._folded_links[axis]
        key = (axis, self.placement.group_leader(axis, rank))
        if key not in self._link_cache:
            self._link_cache[key] = self.topology.group_link(axis, key[1])
        return self._link_cache[key]

    def _links_of(self, rank: int) -> tuple:
        """(tp, cp, ep) links of a rank: what its compute actions' collectives run on."""
        if rank not in self._rank_links:
            self._rank_links[rank] = tuple(self._link(axis, rank) for axis in ("tp", "cp", "ep"))
        return self._rank_links[rank]

    def slowdown(self, rank: int) -> float:
        """How much slower than its peers a rank computes (a straggler; folded: the slowest
        rank it stands for)."""
        if not self._slowdown or not self.folded:
            return self._slowdown.get(rank, 1.0)
        pp = self.placement.coords(rank)["pp"]
        return max([1.0] + [f for r, f in self._slowdown.items() if self.placement.coords(r)["pp"] == pp])

    # ---- collectives inside compute ----------------------------------------------------
    def _collective(self, kind: str, nbytes: float, group: str, links: dict | None = None) -> float:
        link = (links or self._folded_links)[group]
        if link.size < 2 or not kind:
            return 0.0
        if kind == "ring":  # context-parallel ring: cp-1 neighbour exchanges of nbytes / (cp-1) each
            steps = link.size - 1
            measured = (self.profile.collective_seconds("send_recv", nbytes / steps, 2)
                        if self.profile is not None else None)
            if measured is not None:  # the device's own send/recv, as the pipeline's messages are priced
                self.provenance.record(f"{group} collectives", PROFILE)
                return steps * measured
            return p2p_time(nbytes, link.bw, link.latency * steps, link.nodes > 1, link.intra_efficiency)
        op = COLLECTIVE[kind]
        plain = link
        if op == "all_to_all":
            link = dispatched(self.s, link)
        if self.profile is not None:
            measured = self.profile.collective_seconds(op, nbytes, link.size)
            if measured is not None:  # NCCL's all-to-all as measured; DeepEP's by its share of that price
                self.provenance.record(f"{group} collectives", PROFILE)
                if link is not plain:
                    measured *= collective_time(op, nbytes, link).seconds / collective_time(op, nbytes, plain).seconds
                return measured
        self.provenance.record(f"{group} collectives", ANALYTICAL)
        return collective_time(op, nbytes, link).seconds

    def _wire(self, kind: str, nbytes: float, group: str, links: dict | None) -> float:
        """Bytes one member sends for a collective (see ActionCost.wire)."""
        n = (links or self._folded_links)[group].size if kind else 0
        if n < 2:
            return 0.0
        return nbytes if kind == "ring" else bus_factor(COLLECTIVE[kind], n) * nbytes

    # ---- compute actions ----------------------------------------------------------------
    def compute(self, rank: int, stage: int, kind: str) -> ActionCost:
        """F, B, BI or BW of one micro-batch of a global stage on a global rank."""
        key = (rank, stage, kind)
        cost = self._rank_cache.get(key)
        if cost is None:  # the engine asks this once per action: hashing links each time showed
            cost = self.action(stage, kind, rank)
            slow = self.slowdown(rank)
            cost = self._rank_cache[key] = cost.slowed(slow) if slow != 1.0 else cost
        return cost

    def action(self, stage: int, kind: str, rank: int = 0) -> ActionCost:
        """F, B, BI or BW of one micro-batch on a global stage, priced on `rank`'s process
        groups (no straggler slowdown)."""
        links = self._links_of(rank)
        shard = self.shard_link(rank)
        key = (stage, kind, links, shard)
        if key not in self._stage_cache:
            alike = (self.stage_alike(stage), kind, links, shard)
            if alike not in self._stage_cache:
                cost = self._action(stage, kind, dict(zip(("tp", "cp", "ep"), links)))
                if shard is not None and shard.size > 1:
                    cost = cost + self._unit_collectives(stage, kind, shard, dict(zip(("tp", "cp", "ep"), links)))
                self._stage_cache[alike] = cost
            self._stage_cache[key] = self._stage_cache[alike]
        return self._stage_cache[key]

    def shard_link(self, rank: int):
        """The shard group's link where sharded data parallelism runs inside compute actions."""
        return self._link(SHARD_AXIS, rank) if self.sharding.collectives_in_compute else None

    def stage_alike(self, stage: int) -> tuple:
        """What a global stage's actions cost depends on besides the kind and the links: stages
        alike in it (the middle ones, mostly) cost the same."""
        return tuple(self.layer_runs(stage)), stage == 0, stage == self.s.num_stages - 1, self._mtp(stage)

    def _unit_collectives(self, stage: int, kind: str, shard, links: dict) -> ActionCost:
        """What sharded data parallelism adds to one compute action of a stage: its units'
        parameter gathers (ZeRO-3: forward, and backward after resharding) and gradient reduce-
        scatters (backward), pipelined with the units' compute (sharded_dp.unit_pipeline), on
        the rank's shard group. Exposed: what the action lasts beyond its units' compute."""
        s, d = self.s, self._dims
        units = [(self.block("embedding", kind, links), embedding_params(d))] if stage == 0 else []
        for name, policy, count in self.layer_runs(stage):
            units += [(self.block(name, kind, links, policy), layer_params(d, name == "moe_layer").total)] * count
        if modules := self._mtp(stage):
            module = mtp_params(d, mtp_is_moe(s), stage == 0).total
            units += [(self.block("mtp", kind, links, self.mtp_recompute), module)] * modules
        if stage == s.num_stages - 1:
            units.append((self.block("head", kind, links), head_params(d, stage == 0)))
            # each module's logits through the same LM head: its weights are the head unit's
            units += [(self.block("head", kind, links), 0.0)] * s.model.mtp_layers
        if kind != "F":
            units.reverse()  # the backward runs the units last to first
        gathers, reduces, wire = [], [], 0.0
        priced: dict[float, tuple[float, float, float]] = {}  # a unit's parameters -> its collectives, once
        for _, params in units:
            if params not in priced:
                priced[params] = self.unit_collectives(params, kind, shard)
            gather, reduce, bytes_ = priced[params]
            gathers.append(gather)
            reduces.append(reduce)
            wire += bytes_
        compute = [cost.seconds for cost, _ in units]
        together = unit_pipeline(compute, gathers, reduces, self.s.gpu.sms)
        exposed = max(0.0, together - sum(compute))
        return ActionCost(exposed, {"dp": sum(gathers) + sum(reduces)}, exposed={"dp": exposed}, wire={"dp": wire})

    def unit_collectives(self, params: float, kind: str, shard) -> tuple[float, float, float]:
        """(gather seconds, reduce-scatter seconds, wire bytes) of one unit of `params` parameters
        in a `kind` action, on the shard group's link `shard` (none where the plan has none)."""
        plan = self.sharding
        gathers = (plan.gathers_in_compute and kind == "F") or (plan.regathers_in_backward and kind in ("B", "BI"))
        reduces = plan.reduces_in_compute and kind in ("B", "BW")
        moved = (("all-gather", params * plan.gather_bytes if gathers else 0.0),
                 ("reduce-scatter", params * plan.grad_bytes if reduces else 0.0))
        gather, reduce = (self._collective(op, n, "dp", {"dp": shard}) if n else 0.0 for op, n in moved)
        return gather, reduce, sum(self._wire(op, n, "dp", {"dp": shard}) for op, n in moved if n)

    def _action(self, stage: int, kind: str, links: dict) -> ActionCost:
        s = self.s
        parts = [self.block("embedding", kind, links) if stage == 0 else ActionCost(0.0)]
        for name, policy, count in self.layer_runs(stage):
            parts += [self.block(name, kind, links, policy)] * count
        if modules := self._mtp(stage):
            parts += [self.block("mtp", kind, links, self.mtp_recompute)] * modules
        if stage == s.num_stages - 1:  # the model's head, then each module's (ops.mtp_dims_ops)
            parts += [self.block("head", kind, links)] * (1 + s.model.mtp_layers)
        return ActionCost.total(parts)

    @cached_property
    def mtp_recompute(self) -> str:
        """The recomputation policy of a multi-token-prediction module (model/recompute.py)."""
        return mtp_policy(self.s.training.recompute, self.s.training.recompute_num_layers)

    def _mtp(self, stage: int) -> int:
        """Multi-token-prediction modules on a global stage (after its layers, before the head)."""
        return self.s.stage_mtp[stage] if self.s.model.mtp_layers else 0

    @cached_property
    def _dims(self) -> Dims:
        return Dims.of(self.s)

    def layer_runs(self, stage: int) -> list[tuple[str, str, int]]:
        """A global stage's transformer layers as runs of alike ones, in order: (block name,
        recomputation policy, how many), each run priced once."""
        if stage not in self._layer_runs:
            s, runs = self.s, []
            for layer, policy in stage_policies(s, stage_layer_range(s, stage)):
                name = "moe_layer" if is_moe_layer(s, layer) else "layer"
                if runs and runs[-1][:2] == [name, policy]:
                    runs[-1][2] += 1
                else:
                    runs.append([name, policy, 1])
            self._layer_runs[stage] = [tuple(run) for run in runs]
        return self._layer_runs[stage]

    def block(self, name: str, kind: str, links: dict, recompute: str | None = None, raw: bool = False) -> ActionCost:
        """F, B, BI or BW of one micro-batch through the embedding, one dense or MoE layer or the head
        (`name`), collectives on `links` (axis -> GroupLink), under `recompute` (default: the scenario's,
        model/recompute.py); `raw`: before a2a_overlap.py pairs F with B and gradients accumulate."""
        recompute = recompute or self.s.training.recompute
        key = (name, kind, tuple(links.values()), recompute)
        if key not in self._layer_cache:  # every dense (every MoE) layer costs the same
            block, ops = {"embedding": ("embedding_block", lambda: embedding_ops(self.s)),
                          "layer": ("block", lambda: layer_ops(self.s, False)),
                          "moe_layer": ("block", lambda: layer_ops(self.s, True)),
                          "mtp": ("mtp_block", lambda: mtp_ops(self.s)),
                          "head": ("head_block", lambda: head_ops(self.s))}[name]
            self._layer_cache[key] = self._block_cost(block, ops(), kind, links, recompute)
        cost = self._layer_cache[key]
        if raw:
            return cost
        if self.s.training.moe_a2a_overlap and name == "moe_layer" and kind in ("F", "B"):
            self.provenance.record("ep all-to-all overlap", ANALYTICAL)
            cost = paired_layer(self, links, recompute)[kind == "B"]
        if kind not in ("B", "BW"):
            return cost
        if key not in self._accumulated:
            self._accumulated[key] = cost + ActionCost(self.compute_model.memory_time(self.accumulated_bytes(name)))
        return self._accumulated[key]

    def accumulated_bytes(self, block: str) -> float:
        """Bytes per micro-batch accumulating one block's weight gradients (kernel_stack.py)."""
        training, params = self.s.training, block_params(self.s, self._dims, block)
        return accumulation_bytes(training.kernels.accumulation, params.dense, params.expert, self.sharding,
                                  self.s.num_microbatches, 4 if training.precision == "fp32" else 2,
                                  torch_stack=training.kernels.stack in TORCH_STACKS)

    def _block_cost(self, block: str, ops, kind: str, links: dict, recompute: str) -> ActionCost:
        return (self._measured_block(block, ops, kind, links, recompute)
                or self.ops_cost(ops, kind, links, block, recompute))

    def _measured_block(self, block: str, ops, kind: str, links: dict, recompute: str) -> ActionCost | None:
        """A whole embedding / layer / head measured by the calibration harness at exactly
        this shape: it includes the glue ops and dispatch that per-op rows miss. A block with
        collectives only where it was measured with its group, which ran them."""
        dtype, shape = self.compute_model.dtype, self._block_shape
        if self.profile is None or (any(op.comm or op.bwd_comm for op in ops)
                                    and not self.profile.block_measured_with_group(block, shape, dtype)):
            return None
        fwd, bwd = (self.profile.block_seconds(block, shape, dtype, pass_) for pass_ in ("fwd", "bwd"))
        if fwd is None or bwd is None:
            return None
        self.provenance.record(f"compute: {block.replace('_', ' ')}s (measured whole)", PROFILE)
        if kind == "F":
            return ActionCost(fwd)
        grads_in = sum(op.bwd_input_flops for op in ops)
        share = grads_in / (grads_in + sum(op.bwd_weight_flops for op in ops) or 1.0)
        if kind == "BW":
            return ActionCost(bwd * (1 - share))
        redo = fwd if recompute == "full" and block == "block" else 0.0  # embedding and head: never again
        if recompute == "selective":
            redo = self.ops_cost([op for op in ops if redo_fraction(op, recompute, self._dims)], "F", links).seconds
        elif recompute == "op":
            redo = sum(self.compute_model.op_time(op).fwd * redo_fraction(op, recompute, self._dims) for op in ops)
        return ActionCost(redo + bwd * (share if kind == "BI" else 1.0), recompute=redo)

    def ops_cost(self, ops, kind: str, links: dict | None = None, block: str | None = None,
                 recompute: str | None = None) -> ActionCost:
        """F, B, BI or BW of a list of ops (one micro-batch), collectives included (on
        `links`, axis -> GroupLink; default: the folded ones); those the overlap switches
        hide are charged with the GEMM they share the GPU with. `recompute`: the policy the
        ops run under (default: the scenario's)."""
        recompute = recompute or self.s.training.recompute
        sms = self.s.gpu.sms
        d = self._dims
        times, traced = self.compute_model.block_times(ops, TRACED_BLOCKS.get(block))
        plan = overlap_plan(self.s.training, self.s.tp, ops, recompute)
        # the GEMM part each overlapped collective is charged with: BI has no wgrad beside it
        hidden: dict[tuple[int, str], tuple[float, Overlap]] = {}
        for i, op in enumerate(ops):
            traced_here = traced and is_memory_bound(op)
            self.provenance.record("compute: memory-bound kernels (traced rate)" if traced_here
                                   else f"compute: {op_class(op)}", times[i].source)
            for direction, name, nbytes in (("fwd", op.comm, op.comm_bytes), ("bwd", op.bwd_comm, op.bwd_comm_bytes),
                                            ("regather", op.comm, op.comm_bytes)):
                key = (i, direction)
                if not name or key not in plan:
                    continue
                j, part, how = plan[key]
                wanted = ("F",) if direction == "fwd" else (("B",) if part == "bwd_weight" else ("B", "BI"))
                if kind in wanted:
                    hidden[(j, part)] = (self._collective(name, nbytes, op.group, links), how)
                    self.provenance.record(f"tp overlap: {how.method}", ANALYTICAL)
        total, comm, exposed_comm, recomputed = 0.0, defaultdict(float), defaultdict(float), 0.0
        wire = defaultdict(float)
        for i, op in enumerate(ops):
            t = times[i]
            if kind == "F":
                wire[op.group] += self._wire(op.comm, op.comm_bytes, op.group, links)
            elif kind in ("B", "BI"):
                wire[op.group] += self._wire(op.bwd_comm, op.bwd_comm_bytes, op.group, links)
                if (i, "regather") in plan or reruns_forward_collective(op, recompute, d):  # the forward's again
                    wire[op.group] += self._wire(op.comm, op.comm_bytes, op.group, links)
            fwd_comm = self._collective(op.comm, op.comm_bytes, op.group, links) if op.comm else 0.0
            bwd_comm = self._collective(op.bwd_comm, op.bwd_comm_bytes, op.group, links) if op.bwd_comm else 0.0
            if (i, "fwd") in plan and kind == "F":
                fwd_comm = 0.0  # charged with its GEMM below
            if (i, "bwd") in plan and kind in ("B", "BI") and (plan[(i, "bwd")][1] != "bwd_weight" or kind == "B"):
                bwd_comm = 0.0
            redo = t.fwd * redo_fraction(op, recompute, d)
            parts = {"fwd": t.fwd, "bwd_input": t.bwd_input, "bwd_weight": t.bwd_weight}
            exposed = 0.0
            for part, seconds in parts.items():
                if (i, part) in hidden:
                    c, how = hidden[(i, part)]
                    if how.splits and times[i].source == "analytical":  # the GEMM split, its FP8 casts whole
                        casts = dict(zip(("fwd", "bwd_input"), self.compute_model.fp8_casts(op)))
                        seconds = self.compute_model.gemm_part_seconds(op, part, how.splits) + casts.get(part, 0.0)
                    together = overlapped_seconds(seconds, c, how, sms)
                    exposed += together - seconds
                    parts[part] = together
            if kind == "F":
                work, c = parts["fwd"], fwd_comm
            elif kind == "BW":
                work, c = parts["bwd_weight"], 0.0
            else:
                work = parts["bwd_input"] + (parts["bwd_weight"] if kind == "B" else 0.0) + redo
                recomputed += redo
                c = bwd_comm + (self._collective(op.comm, op.comm_bytes, op.group, links) if op.comm and redo
                                and reruns_forward_collective(op, recompute, d) else 0.0)
            if op.group == "cp":  # the ring exchange hides behind the attention it feeds
                total += max(work, c)
                comm["cp"] += c
                exposed_comm["cp"] += max(0.0, c - work)
            else:
                total += work + c
                if c:
                    comm[op.group] += c
                    exposed_comm[op.group] += c
            if exposed:  # what overlapped collectives add on top of their GEMMs
                comm["tp"] += exposed
                exposed_comm["tp"] += exposed
        return ActionCost(total, dict(comm), recomputed, {k: v for k, v in exposed_comm.items() if v},
                          {k: v for k, v in wire.items() if v})

    # ---- data parallel ----------------------------------------------------------------------
    def gradient_parts(self, what: str, rank: int, stage: int, buckets: int) -> list[tuple[str, float, float]]:
        """(group axis, seconds, wire bytes per member) of one bucket's "reduce" (all-reduce, or
        reduce-scatter with the distributed optimizer) or "gather", in turn on the data-parallel
        stream: dense parameters over dp x cp, experts over their replicas (Megatron's groups)."""
        return [(axis, *self.gradient_collective(self.gradient_op(what), self._link(axis, rank), stage, buckets,
                                                 expert)) for axis, expert in self.gradient_axes]

    def gradient_op(self, what: str) -> str:
        return self.buckets.gradient_op(what)

    def bucket_bytes(self, op: str, stage: int, buckets: int, expert: bool) -> float:
        return self.buckets.bucket_bytes(op, stage, buckets, expert)

    def _dp_collective(self, what: str, rank: int, stage: int, buckets: int) -> tuple[float, float]:
        parts = self.gradient_parts(what, rank, stage, buckets)
        return sum(part[1] for part in parts), sum(part[2] for part in parts)

    def gradient_collective(self, op: str, link, stage: int, buckets: int, expert: bool) -> tuple[float, float]:
        """(seconds, bytes on the wire per member) of one bucket's collective of a stage's dense
        (or expert) parameters on a ring link of their group."""
        nbytes = self.bucket_bytes(op, stage, buckets, expert)
        if not nbytes or link.size < 2:
            return 0.0, 0.0
        return self._collective(op, nbytes, "dp", {"dp": link}), self._wire(op, nbytes, "dp", {"dp": link})

    def dp_reduce(self, rank: int, stage: int, buckets: int) -> tuple[float, float]:  # (seconds, wire bytes)
        seconds, wire = self._dp_collective("reduce", rank, stage, buckets)
        return seconds + self.gradient_copies(stage, buckets), wire

    def gradient_copies(self, stage: int, buckets: int) -> float:
        """Host copies around one bucket's all-reduce where the profile measured the executor's
        (executor_host.py); Megatron's contiguous gradient buffer has none."""
        return gradient_copies(self, stage, buckets)

    def param_gather(self, rank: int, stage: int, buckets: int) -> tuple[float, float]:
        return self._dp_collective("gather", rank, stage, buckets)

    # ---- the same transfers as flows (costs.network: flow) -----------------------------------
    @cached_property
    def _flows(self) -> NetworkFlows:
        return NetworkFlows(self)

    def link_capacity(self, edge: tuple) -> float:
        return self._flows.capacity(edge)

    def transfer_flows(self, src: int, dst: int) -> FlowSpec:
        return self._flows.transfer(src, dst)

    def dp_flows(self, what: str, rank: int, stage: int, buckets: int, expert: bool = False) -> FlowSpec:
        return self._flows.data_parallel(what, rank, stage, buckets, expert)

    def ep_flows(self, rank: int, stage: int, kind: str) -> FlowSpec:
        return self._flows.expert_parallel(rank, stage, kind)

    def _alone_link(self, axis: str, rank: int):
        key = (f"alone:{axis}", self.placement.group_leader(axis, rank))
        if key not in self._link_cache:
            self._link_cache[key] = self.topology.group_link(axis, key[1], alone=True)
        return self._link_cache[key]

    def expert_alone(self, rank: int, stage: int, kind: str) -> tuple[float, float, float]:
        """(seconds, bytes of a member's buffers, seconds of it that are latency) of the
        expert-parallel all-to-alls inside one compute action of `rank`, with the fabric to its
        group alone. Across nodes the latency is what the bytes at the group's pace leave over;
        inside a node it rides in the pace."""
        tp, cp, _ = self._links_of(rank)
        alone = self._alone_link("ep", rank)
        cost = self._action(stage, kind, {"tp": tp, "cp": cp, "ep": alone})
        seconds, buffer = cost.comm.get("ep", 0.0), cost.wire.get("ep", 0.0) * alone.size / (alone.size - 1)
        pace = all_to_all_s_per_byte(dispatched(self.s, alone)) if alone.nodes > 1 else None
        latency = max(0.0, seconds - buffer * pace) if pace is not None else 0.0
        return seconds, buffer, latency

    def optimizer(self, rank: int, stages: tuple[int, ...]) -> float:
        """The optimizer step of a rank holding `stages` (optimizer_step.py: the executor's
        measured per block, else the bytes each kernel moves at the HBM roofline). The tied
        embedding's all-reduce before it is `embedding_sync`, network time booked apart."""
        return optimizer_seconds(self, stages) * self.slowdown(rank)

    def priced_by_profile(self) -> bool:
        """Whether any price so far came from the measured profile."""
        return self.provenance.priced_by_profile()

    def explain(self) -> list[tuple[str, str]]:
        """(cost, where it comes from) rows for `sim3d run --explain` (explain.py)."""
        from .explain import explain
        return explain(self)

"""Per-action costs of a scenario: what the engine asks when it replays a schedule.

Compute actions (F, B, BI, BW) of a global stage cost the sum of their ops (compute.py) plus
the TP / EP collectives between them, which Megatron issues synchronously on the compute
stream; context-parallel ring exchanges overlap the attention they feed. Point-to-point,
data-parallel and optimizer costs come from the topology and collectives.py.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from functools import cached_property

from ..model.memory import stage_params
from ..model.ops import ACT_BYTES, embedding_ops, head_ops, is_moe_layer, layer_ops, stage_layer_range
from ..placement import Placement
from ..topology import Topology
from .collectives import collective_time, p2p_time
from .compute import ComputeModel, block_shape

COLLECTIVE = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
              "all-to-all": "all_to_all"}
# Adam step, per local parameter: read fp32 master, exp_avg, exp_avg_sq and the gradient,
# write the three fp32 states and the 16-bit model copy (Megatron's fused multi-tensor Adam).
ADAM_BYTES_PER_PARAM = 4 * 3 + 4 + 4 * 3 + 2
# Megatron-core DistributedDataParallelConfig: bucket_size = max(40M, 1M * dp) parameters
# (megatron/core/distributed/distributed_data_parallel.py).
BUCKET_PARAMS = 40_000_000


@dataclass
class ActionCost:
    seconds: float
    comm: dict[str, float] = field(default_factory=dict)  # stream -> seconds of collectives inside


def _op_class(op) -> str:
    if op.gemm is not None:
        return "attention matmuls" if op.name.startswith("attn_") else "GEMMs"
    return "+".join(op.kernels) if op.kernels else "other"


class CostModel:
    def __init__(self, scenario, topology: Topology | None = None, profile=None):
        self.s = scenario
        self.topology = topology or Topology(scenario)
        self.placement: Placement = self.topology.placement
        self.compute = ComputeModel(scenario, profile)
        self.profile = profile
        self.sources: dict[str, set[str]] = defaultdict(set)
        self._stage_cache: dict[tuple[int, str], ActionCost] = {}
        self._p2p_cache: dict[tuple[int, int], float] = {}
        self._pipeline = self.placement.pipeline()
        self._block_shape = block_shape(scenario)

    # ---- collectives inside compute ----------------------------------------------------
    @cached_property
    def _links(self):
        return {axis: self.topology.group_link(axis) for axis in ("tp", "cp", "ep", "dp", "pp")}

    def _collective(self, kind: str, nbytes: float, group: str) -> float:
        link = self._links[group]
        if link.size < 2 or not kind:
            return 0.0
        if kind == "ring":  # context-parallel ring: cp-1 neighbour exchanges
            return p2p_time(nbytes, link.bw, link.latency * (link.size - 1), link.nodes > 1)
        op = COLLECTIVE[kind]
        if self.profile is not None:
            measured = self.profile.collective_seconds(op, nbytes, link.size)
            if measured is not None:
                self.sources[f"{group} collectives"].add("profile")
                return measured
        self.sources[f"{group} collectives"].add("analytical")
        return collective_time(op, nbytes, link).seconds

    # ---- compute actions ----------------------------------------------------------------
    def action(self, stage: int, kind: str) -> ActionCost:
        """Cost of F, B, BI or BW of one micro-batch on a global stage."""
        key = (stage, kind)
        if key not in self._stage_cache:
            self._stage_cache[key] = self._action(stage, kind)
        return self._stage_cache[key]

    def _action(self, stage: int, kind: str) -> ActionCost:
        s = self.s
        parts = [("embedding_block", embedding_ops(s))] if stage == 0 else []
        parts += [("block", layer_ops(s, is_moe_layer(s, layer))) for layer in stage_layer_range(s, stage)]
        if stage == s.num_stages - 1:
            parts.append(("head_block", head_ops(s)))
        total, comm = 0.0, defaultdict(float)
        for block, ops in parts:
            cost = self._measured_block(block, ops, kind) or self.ops_cost(ops, kind)
            total += cost.seconds
            for stream, seconds in cost.comm.items():
                comm[stream] += seconds
        return ActionCost(total, dict(comm))

    def _measured_block(self, block: str, ops, kind: str) -> ActionCost | None:
        """A whole embedding / layer / head measured by the calibration harness at exactly
        this shape: it includes the glue ops and dispatch that per-op rows miss. Only for
        blocks without collectives (the harness measures tp = cp = 1)."""
        if self.profile is None or any(op.comm or op.bwd_comm for op in ops):
            return None
        dtype = self.compute.dtype
        fwd = self.profile.block_seconds(block, self._block_shape, dtype, "fwd")
        bwd = self.profile.block_seconds(block, self._block_shape, dtype, "bwd")
        if fwd is None or bwd is None:
            return None
        self.sources[f"compute: {block.replace('_', ' ')}s (measured whole)"].add("profile")
        recompute = self.s.training.recompute
        if kind == "F":
            return ActionCost(fwd)
        grads_in = sum(op.bwd_input_flops for op in ops)
        share = grads_in / (grads_in + sum(op.bwd_weight_flops for op in ops) or 1.0)
        if kind == "BW":
            return ActionCost(bwd * (1 - share))
        redo = fwd if recompute == "full" else 0.0
        if recompute == "selective":
            redo = self.ops_cost([op for op in ops if op.recompute_selective], "F").seconds
        return ActionCost(redo + bwd * (share if kind == "BI" else 1.0))

    def ops_cost(self, ops, kind: str) -> ActionCost:
        """F, B, BI or BW of a list of ops (one micro-batch), collectives included."""
        recompute = self.s.training.recompute
        total, comm = 0.0, defaultdict(float)
        for op in ops:
            t = self.compute.op_time(op)
            self.sources[f"compute: {_op_class(op)}"].add(t.source)
            fwd_comm = self._collective(op.comm, op.comm_bytes, op.group) if op.comm else 0.0
            bwd_comm = self._collective(op.bwd_comm, op.bwd_comm_bytes, op.group) if op.bwd_comm else 0.0
            redo = recompute == "full" or (recompute == "selective" and op.recompute_selective)
            if kind == "F":
                work, c = t.fwd, fwd_comm
            elif kind == "BW":
                work, c = t.bwd_weight, 0.0
            else:
                work = t.bwd_input + (t.bwd_weight if kind == "B" else 0.0) + (t.fwd if redo else 0.0)
                c = bwd_comm + (fwd_comm if redo and recompute == "full" else 0.0)
            if op.group == "cp":  # the ring exchange hides behind the attention it feeds
                total += max(work, c)
                comm["cp"] += c
            else:
                total += work + c
                if c:
                    comm[op.group] += c
        return ActionCost(total, dict(comm))

    # ---- pipeline point-to-point ----------------------------------------------------------
    @cached_property
    def p2p_bytes(self) -> float:
        """Activation (or its gradient) of one micro-batch crossing a stage boundary, per TP
        rank: b*s*h, split over TP with sequence parallelism (and over CP)."""
        s = self.s
        tokens = s.training.micro_batch * s.model.seq_len / s.cp
        shard = s.tp if s.parallel.sequence_parallel else 1
        return tokens * s.model.hidden * ACT_BYTES[s.training.precision] / shard

    def p2p(self, src_pp: int, dst_pp: int) -> float:
        key = (src_pp, dst_pp)
        if key not in self._p2p_cache:
            self._p2p_cache[key] = self._p2p(src_pp, dst_pp)
        return self._p2p_cache[key]

    def _p2p(self, src_pp: int, dst_pp: int) -> float:
        if self.profile is not None:
            measured = self.profile.collective_seconds("send_recv", self.p2p_bytes, 2)
            if measured is not None:
                self.sources["pipeline p2p"].add("profile")
                return measured
        self.sources["pipeline p2p"].add("analytical")
        pipe = self._pipeline
        a, b = pipe[src_pp], pipe[dst_pp]
        bw, lat = self.topology.path_cost(a, b)
        crosses = self.topology.gpu_of(a)[0] != self.topology.gpu_of(b)[0]
        return p2p_time(self.p2p_bytes, bw, lat, crosses)

    # ---- data parallel --------------------------------------------------------------------
    def chunk_params(self, pp_rank: int, chunk: int, stages):
        """Parameters one rank holds for one chunk: `.dense` (replicated over dp) and
        `.expert` (replicated over the dp/ep expert-data-parallel ranks)."""
        return stage_params(self.s, (stages.stage(pp_rank, chunk),))

    def buckets_per_chunk(self, stages) -> int:
        biggest = max(self.chunk_params(r, c, stages).total for r in range(self.s.pp) for c in range(self.s.vpp))
        bucket = max(BUCKET_PARAMS, 1_000_000 * self.s.dp)
        return max(1, min(16, round(biggest / bucket)))

    def _dp_collective(self, op: str, params, buckets: int) -> tuple[float, float]:
        width = ACT_BYTES[self.s.training.precision]
        dense, expert = params.dense / buckets * width, params.expert / buckets * width
        seconds = self._collective(op, dense, "dp")
        if expert:
            edp = replace(self._links["dp"], size=max(1, self.s.dp // self.s.ep))
            seconds += collective_time(COLLECTIVE[op], expert, edp).seconds
        return seconds, dense + expert

    def dp_bucket(self, pp_rank: int, chunk: int, stages, buckets: int) -> tuple[float, float]:
        """(seconds, bytes) to reduce one gradient bucket over the data-parallel group:
        all-reduce, or reduce-scatter with the distributed optimizer."""
        op = "reduce-scatter" if self.s.parallel.distributed_optimizer else "all-reduce"
        return self._dp_collective(op, self.chunk_params(pp_rank, chunk, stages), buckets)

    def param_gather(self, pp_rank: int, chunk: int, stages, buckets: int) -> tuple[float, float]:
        return self._dp_collective("all-gather", self.chunk_params(pp_rank, chunk, stages), buckets)

    def optimizer(self, pp_rank: int, stages) -> float:
        held = [self.chunk_params(pp_rank, c, stages) for c in range(self.s.vpp)]
        params = sum(p.total for p in held)
        if self.s.parallel.distributed_optimizer:
            params = sum(p.dense / self.s.dp + p.expert / max(1, self.s.dp // self.s.ep) for p in held)
        return self.compute.roofline(0.0, params * ADAM_BYTES_PER_PARAM)

    def explain(self) -> list[tuple[str, str]]:
        compute = sorted(k for k in self.sources if k.startswith("compute"))
        rows = [("cluster", self.topology.describe())]
        rows += [(key, self._describe("compute", self.sources[key])) for key in compute]
        for key in sorted(k for k in self.sources if not k.startswith("compute")):
            rows.append((key, self._describe(key, self.sources[key])))
        return rows

    def _describe(self, kind: str, sources: set[str]) -> str:
        parts = []
        if "profile" in sources and self.profile is not None:
            parts.append(self.profile.describe("compute" if kind == "compute" else "collective"))
        if "analytical" in sources:
            if kind == "compute":
                parts.append(self.compute.describe())
            elif kind == "pipeline p2p":
                parts.append(f"analytical: latency + {self.p2p_bytes / 2**20:.2f} MiB / bandwidth of the placed path")
            else:
                parts.append("analytical: NCCL-like ring / tree / hierarchical, alpha-beta on the placed links")
        return "; ".join(parts)

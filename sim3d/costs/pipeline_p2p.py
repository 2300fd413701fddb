"""Pipeline point-to-point: the message one TP rank sends across a stage boundary, and the
seconds it takes on its placed path (a profile's send_recv rows where they have it), with
Megatron-LM 2020-22's scatter/gather where the scenario runs it; and the word embedding's
gradient all-reduce between the pipeline's ends. A part of `CostModel`, which
holds what these read: the scenario, its topology, placement and profile, and its caches."""

from __future__ import annotations

from functools import cached_property

from ..model.ops import ACT_BYTES, Dims
from ..model.params import tied_embedding
from ..scenario.sharding import grad_bytes
from .collectives import p2p_time
from .provenance import ANALYTICAL, PROFILE


class PipelineMessages:
    """`CostModel`'s pipeline messages (mixed in: it reads the cost model's own attributes)."""

    @cached_property
    def p2p_bytes(self) -> float:
        """What one TP rank sends of a micro-batch's activation (or its gradient) crossing a
        stage boundary: b*s*h, split over TP with sequence parallelism or under Megatron-LM
        2020-22's scatter/gather (and over CP)."""
        s = self.s
        tokens = s.training.micro_batch * s.model.seq_len / s.cp
        shard = s.tp if s.parallel.sequence_parallel or self._scattered_p2p else 1
        return tokens * s.model.hidden * ACT_BYTES[s.training.precision] / shard

    @cached_property
    def _scattered_p2p(self) -> bool:
        """Pipeline messages split over TP and all-gathered at the receiver (Megatron-LM
        2020-22, megatron/p2p_communication.py @a8d172b, --scatter-gather-tensors-in-pipeline:
        only without SP, whose messages are split already)."""
        s = self.s
        return s.training.p2p_scatter_gather and s.tp > 1 and not s.parallel.sequence_parallel

    def p2p_gather_seconds(self, dst: int) -> float:
        """The receiver's all-gather of a scattered message over its TP group (gather_split_1d_tensor)."""
        if not self._scattered_p2p:
            return 0.0
        return self._collective("all-gather", self.p2p_bytes * self.s.tp, "tp",
                                dict(zip(("tp", "cp", "ep"), self._links_of(dst))))

    def transfer(self, src: int, dst: int) -> float:
        """Seconds to move one micro-batch's activation (or gradient) from global rank `src`
        to `dst` (folded: between those pipeline stages on the slowest pipeline)."""
        key = (src, dst)
        if key not in self._p2p_cache:
            self._p2p_cache[key] = self._p2p(src, dst)
        return self._p2p_cache[key]

    def _p2p(self, src: int, dst: int) -> float:
        return self._p2p_send(src, dst) + self.p2p_gather_seconds(dst)

    def _p2p_send(self, src: int, dst: int) -> float:
        if self.profile is not None:
            measured = self.profile.collective_seconds("send_recv", self.p2p_bytes, 2)
            if measured is not None:
                self.provenance.record("pipeline p2p", PROFILE)
                return measured
        self.provenance.record("pipeline p2p", ANALYTICAL)
        if not (self.folded and self._degraded):
            return self._transfer(src, dst)
        p = self.placement
        a, b = p.coords(src)["pp"], p.coords(dst)["pp"]
        return max(self._transfer(pipe[a], pipe[b]) for pipe in p.pipelines())

    def _transfer(self, a: int, b: int, nbytes: float | None = None, hops: int = 1) -> float:
        """A message of `nbytes` (default a pipeline message) from a to b, `hops` latencies."""
        bw, lat = self.topology.path_cost(a, b)
        crosses = self.topology.gpu_of(a)[0] != self.topology.gpu_of(b)[0]
        nbytes = self.p2p_bytes if nbytes is None else nbytes
        return p2p_time(nbytes, bw, hops * lat, crosses, self.topology.nvlink_efficiency)

    def embedding_sync(self, rank: int, stages: tuple[int, ...]) -> float:
        """Seconds of the tied word embedding's gradient all-reduce before the optimizer step,
        between the ranks of the first and the last stage (Megatron's embedding group;
        megatron/core/distributed/finalize_model_grads.py, _allreduce_word_embedding_grads):
        vocab / tp x hidden gradients at the width of the data-parallel reduction, a two-rank
        ring (two latencies, each rank sends the buffer once); folded under a network fault,
        the slowest pipeline's. An untied model with multi-token prediction all-reduces it
        between the first stage and the module's, whose embedding copy it updates
        (finalize_model_grads.py: share_embeddings_and_output_weights or mtp_num_layers). Zero
        otherwise, where pp is 1, or where one rank holds both ends (V schedules)."""
        s = self.s
        if tied_embedding(Dims.of(s)):
            partner = s.num_stages - 1
        elif s.model.mtp_layers:
            partner = next(stage for stage, modules in enumerate(s.stage_mtp) if modules)
        else:
            return 0.0
        if partner == 0 or (0 in stages) == (partner in stages):
            return 0.0
        p, c = self.placement, self.placement.coords(rank)
        pipes = [p.pipeline(tp=c["tp"], dp=c["dp"], cp=c["cp"])]
        if self.folded and self._degraded:
            pipes = p.pipelines()
        nbytes = s.model.vocab * s.model.hidden / s.tp * grad_bytes(s.training)
        return max(self._transfer(pipe[0], pipe[partner % s.pp], nbytes, hops=2) for pipe in pipes)

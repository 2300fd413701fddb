"""What the engine may ask about costs: questions about global ranks, never the Scenario.

`CostModel` answers them from the topology, the compute model and a calibration profile;
the engine's tests answer them with unit costs. A fault anywhere (a slow NIC, a straggler)
reaches the engine only through these answers, for the ranks it touches.
"""

from __future__ import annotations

from typing import Protocol

from ..cluster.placement import Placement
from .flows import FlowSpec
from .action_cost import ActionCost


class RankCosts(Protocol):
    placement: Placement
    p2p_bytes: float  # one micro-batch's activation (or gradient) crossing a stage boundary

    def compute(self, rank: int, stage: int, kind: str) -> ActionCost:
        """F, B, BI or BW of one micro-batch of a global stage on a global rank, with the
        collectives inside it."""

    def transfer(self, src: int, dst: int) -> float:
        """Seconds to send `p2p_bytes` from one global rank to another."""

    def dp_reduce(self, rank: int, stage: int, buckets: int) -> tuple[float, float]:
        """(seconds, bytes) of one gradient bucket of a stage over the rank's data-parallel group."""

    def param_gather(self, rank: int, stage: int, buckets: int) -> tuple[float, float]:
        """(seconds, bytes) of gathering one bucket of updated parameters."""

    def optimizer(self, rank: int, stages: tuple[int, ...]) -> float:
        """Seconds of the optimizer step's kernels on a rank holding these stages."""

    def embedding_sync(self, rank: int, stages: tuple[int, ...]) -> float:
        """Seconds of the tied word embedding's gradient all-reduce that precedes the optimizer
        step on a rank holding these stages (network time, zero on most ranks)."""

    # asked only on the flow network (ReplayOptions.flows)
    def link_capacity(self, edge: tuple) -> float:
        """Bytes/s one direction of a graph edge offers to flows."""

    def transfer_flows(self, src: int, dst: int) -> FlowSpec:
        """The flow of one `transfer` (folded: bundled with every rank `src` stands for)."""

    gradient_axes: tuple[tuple[str, bool], ...]  # (placement group, expert?) of each bucket's collectives

    def dp_flows(self, what: str, rank: int, stage: int, buckets: int, expert: bool = False) -> FlowSpec:
        """The flow of one bucket's "reduce" or "gather" of the dense parameters over the rank's
        gradient group, or of the experts over their replicas (folded: bundled over every
        such group of its pipeline stage)."""

    def gradient_copies(self, stage: int, buckets: int) -> float:
        """Host seconds around one bucket's reduce beside its flows (the executor's copies of its
        gradients into one buffer and back; `dp_reduce` already holds them)."""

    def ep_flows(self, rank: int, stage: int, kind: str) -> FlowSpec:
        """The flow of the expert-parallel all-to-alls inside one compute action (folded:
        bundled over every expert-parallel group of its pipeline stage)."""

"""`faults`: a straggler GPU and the fabric's degraded or failed NICs, uplinks and leaves, each
one entry of the scenario's list (docs/what-if.md)."""

from __future__ import annotations

from pydantic import Field, field_validator

from .bounds import Factor, Gbps, Nic, Rank
from .strict import Strict


class Straggler(Strict):
    rank: Rank
    slowdown: Factor  # the rank's compute takes this many times as long

    @field_validator("slowdown")
    @classmethod
    def _slower_only(cls, value):
        if value < 1:
            raise ValueError(f"{value:g} would make this GPU {1 / value:,.4g}x faster than its preset; a straggler's "
                             "slowdown is at least 1 (a faster GPU is cluster.bf16_tflops or another preset)")
        return value


class SlowLink(Strict):
    node: Rank
    nic_gbps: Gbps


class NicFault(Strict):
    """One NIC of a node (counted as the node's `nics_per_node` are) degraded to `gbps`, or
    failed at 0: its GPUs then reach the network through another NIC of the node over NVLink
    (NCCL's PXN)."""
    node: Rank
    nic: Nic
    gbps: float = Field(ge=0.0, le=1e12)

    @field_validator("gbps")
    @classmethod
    def _failed_or_running(cls, value):
        if 0 < value < 1e-3:
            raise ValueError(f"{value} Gb/s: give 0 for a failed NIC, or at least 0.001 Gb/s")
        return value


class UplinkFault(Strict):
    """A leaf's uplinks to the spine degraded to `gbps` in all (some of its spine links down)."""
    leaf: Rank
    gbps: Gbps


class LeafFault(Strict):
    """A leaf switch down: the NICs cabled to it are cut off, and their GPUs reach the
    network through the node's other NICs over NVLink (NCCL's PXN), if it has any left."""
    leaf: Rank


class Fault(Strict):
    straggler: Straggler | None = None
    link: SlowLink | None = None  # every NIC of a node at nic_gbps
    nic: NicFault | None = None
    uplink: UplinkFault | None = None
    leaf: LeafFault | None = None

    @property
    def network(self) -> bool:
        """A fault of the fabric (it breaks the symmetry of groups and paths)."""
        return self.straggler is None

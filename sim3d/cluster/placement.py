"""Rank placement: which global rank holds which (tp, cp, ep, dp, pp) coordinate, and the
process groups that follow. One rank order for the simulator and the executor alike.

Megatron's convention (megatron/core/parallel_state.py, RankGenerator): `order` lists the
axes innermost first, so with "tp-cp-ep-dp-pp" consecutive ranks form a tensor-parallel
group and the pipeline axis is outermost. The dense layers lay ranks out over (tp, cp, dp, pp),
ignoring ep. The experts take a second grid over the same ranks, as Megatron-Core's expert
RankGenerator does (parallel_state.py, initialize_model_parallel; MoE parallel folding,
arXiv:2504.14960): the same order over (etp, ep, edp, pp) with cp 1, edp = tp*cp*dp/(etp*ep).
With etp = tp (the default) an expert group splits the dp*cp ranks of one tensor-parallel
rank; with etp 1 it may span tensor-parallel ranks too. Both grids must give the same
pipeline groups (`pipelines_agree`).

Gradients are reduced over GRADIENT_AXIS, the dp x cp ranks of a (tp, pp) coordinate: context-
parallel ranks hold the same weights and see different tokens, so Megatron-Core reduces dense
gradients over the data-parallel group *with* context parallelism
(megatron/core/distributed/distributed_data_parallel.py @0011998: the dense buffers take
`intra_dp_cp_group`), and its distributed optimizer shards over the same group.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

DENSE_AXES = ("tp", "cp", "dp", "pp")
GRADIENT_AXIS = "dp-cp"
EXPERT_GRADIENT_AXIS = "edp"  # the ranks holding the same expert shard: its gradients' group
# Sharded data parallelism over fewer ranks than dp x cp (HSDP): a GRADIENT_AXIS group is cut
# into shard groups of consecutive members (torchtitan's mesh puts dp_shard inside
# dp_replicate, parallel_dims.py), and the members at the same place of each shard group
# replicate one shard.
SHARD_AXIS = "dp-shard"
REPLICA_AXIS = "dp-replicate"


@dataclass(frozen=True)
class Placement:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    order: str = "tp-cp-ep-dp-pp"
    etp: int | None = None  # expert tensor parallelism; None: tp
    shard: int | None = None  # members of a SHARD_AXIS group; None: all dp x cp ranks

    @classmethod
    def of(cls, scenario) -> "Placement":
        return cls(scenario.tp, scenario.pp, scenario.dp, scenario.cp, scenario.ep, scenario.parallel.order,
                   scenario.etp, scenario.shard_group)

    @property
    def shard_group_size(self) -> int:
        return self.shard or self.gradient_group_size

    @cached_property
    def _expert_sizes(self) -> dict[str, int]:
        etp = self.tp if self.etp is None else self.etp
        return {"tp": etp, "cp": 1, "ep": self.ep, "dp": self.tp * self.cp * self.dp // (etp * self.ep), "pp": self.pp}

    @cached_property
    def _expert_strides(self) -> dict[str, int]:
        return _strides(self.order.split("-"), self._expert_sizes)

    @property
    def expert_data_parallel(self) -> int:
        """Ranks holding the same expert shard: the stage's tp*cp*dp ranks over etp x ep."""
        return self._expert_sizes["dp"]

    @property
    def pipelines_agree(self) -> bool:
        """Whether the expert grid puts each rank on the pipeline stage the dense grid does
        (Megatron asserts the two grids' pipeline groups are equal)."""
        return self.pp == 1 or self._expert_strides["pp"] == self._strides["pp"]

    @property
    def expert_grid_problem(self) -> str | None:
        """Why this expert grid would not run, or not be priced right; None when it is fine.
        Megatron-Core's initialize_model_parallel refuses grids whose pipelines differ from the
        dense ones, and, unless pp is last (or 1), an expert data parallelism other than dp;
        sim3d prices expert TP collectives (etp = tp > 1) on the dense TP group, so the order
        must keep the two TP groups equal."""
        if not self.pipelines_agree or not (self.order.endswith("pp") or self.pp == 1
                                            or self.expert_data_parallel == self.dp):
            return "puts the experts' pipelines or data parallelism apart from the dense ones (Megatron refuses it)"
        etp = self.tp if self.etp is None else self.etp
        if etp > 1 and self._expert_strides["tp"] != self._strides["tp"]:
            return "puts the experts' tensor-parallel groups apart from the dense ones (sim3d prices them on those)"
        return None

    def _expert_coord(self, rank: int, axis: str) -> int:
        return (rank // self._expert_strides[axis]) % self._expert_sizes[axis]

    def group_size(self, axis: str) -> int:
        """Members of every group along `axis`, without listing one."""
        if axis in DENSE_AXES:
            return getattr(self, axis)
        return {"ep": self.ep, GRADIENT_AXIS: self.gradient_group_size, EXPERT_GRADIENT_AXIS: self.expert_data_parallel,
                SHARD_AXIS: self.shard_group_size,
                REPLICA_AXIS: self.gradient_group_size // self.shard_group_size}[axis]

    @property
    def gradient_group_size(self) -> int:
        """Members of a GRADIENT_AXIS group: the ranks a gradient bucket is reduced over."""
        return self.dp * self.cp

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @cached_property
    def _dense_order(self) -> tuple[str, ...]:
        return tuple(axis for axis in self.order.split("-") if axis != "ep")

    @cached_property
    def _strides(self) -> dict[str, int]:
        return _strides(self._dense_order, {axis: getattr(self, axis) for axis in DENSE_AXES})

    def stride(self, axis: str) -> int:
        """Rank distance between neighbours of a dense axis: with the axis size and the world
        size it fixes every group along that axis."""
        return self._strides[axis]

    def rank(self, tp: int = 0, pp: int = 0, dp: int = 0, cp: int = 0) -> int:
        coords = {"tp": tp, "pp": pp, "dp": dp, "cp": cp}
        return sum(coords[a] * self._strides[a] for a in DENSE_AXES)

    def coord(self, rank: int, axis: str) -> int:
        """One dense coordinate of a global rank (`coords(rank)[axis]`, without the others)."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside 0..{self.world_size - 1}")
        return (rank // self._strides[axis]) % getattr(self, axis)

    def coords(self, rank: int) -> dict[str, int]:
        """{'tp', 'cp', 'dp', 'pp', 'ep'} coordinates of a global rank (ep: its index in its
        expert group, on the expert grid)."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside 0..{self.world_size - 1}")
        out = {a: (rank // self._strides[a]) % getattr(self, a) for a in DENSE_AXES}
        out["ep"] = self._expert_coord(rank, "ep")
        return out

    @cached_property
    def _groups(self) -> dict[tuple[str, int], tuple[tuple[int, ...], int]]:
        return {}

    def group(self, axis: str, rank: int) -> list[int]:
        """Ranks of `rank`'s process group along `axis` (tp, cp, dp, pp, ep, dp-cp or edp), in group order."""
        return list(self.shared_group(axis, rank)[0])

    def shared_group(self, axis: str, rank: int) -> tuple[tuple[int, ...], int]:
        """(the group of `group`, as one tuple every member shares: not to be changed, and the
        same object on every call; `rank`'s position in it), without copying the group: link
        tables ask it for each of 100,000 ranks."""
        key = (axis, rank)
        if key not in self._groups:
            if not 0 <= rank < self.world_size:
                raise ValueError(f"rank {rank} outside 0..{self.world_size - 1}")
            members = tuple(self._list_group(axis, rank))
            for i, member in enumerate(members):  # every member lists the same group
                self._groups[(axis, member)] = (members, i)
        return self._groups[key]

    def _list_group(self, axis: str, rank: int) -> list[int]:
        if axis in DENSE_AXES:  # the ranks that differ from `rank` in that coordinate alone
            stride, size = self._strides[axis], getattr(self, axis)
            first = rank - (rank // stride) % size * stride
            return list(range(first, first + size * stride, stride))
        c = self.coords(rank)
        if axis in ("ep", EXPERT_GRADIENT_AXIS):
            grid = "ep" if axis == "ep" else "dp"
            stride = self._expert_strides[grid]
            first = rank - self._expert_coord(rank, grid) * stride
            return [first + i * stride for i in range(self._expert_sizes[grid])]
        if axis == GRADIENT_AXIS:  # cp innermost, as Megatron lists its dp-cp groups
            return [self.rank(tp=c["tp"], pp=c["pp"], dp=f // self.cp, cp=f % self.cp)
                    for f in range(self.dp * self.cp)]
        if axis in (SHARD_AXIS, REPLICA_AXIS):
            members = self._list_group(GRADIENT_AXIS, rank)
            at, shard = members.index(rank), self.shard_group_size
            if axis == SHARD_AXIS:
                return members[at - at % shard: at - at % shard + shard]
            return members[at % shard::shard]
        raise ValueError(f"unknown axis {axis!r}; expected one of tp, cp, ep, dp, pp, {GRADIENT_AXIS}, "
                         f"{EXPERT_GRADIENT_AXIS}")

    def group_leader(self, axis: str, rank: int) -> int:
        """The first rank of `rank`'s group along `axis` (= group(axis, rank)[0]) without listing
        the group: O(1) where a group of thousands would cost thousands."""
        c = self.coords(rank)
        if axis in DENSE_AXES:
            return rank - c[axis] * self._strides[axis]
        if axis in ("ep", EXPERT_GRADIENT_AXIS):
            grid = "ep" if axis == "ep" else "dp"
            return rank - self._expert_coord(rank, grid) * self._expert_strides[grid]
        if axis == GRADIENT_AXIS:
            return self.rank(tp=c["tp"], pp=c["pp"])
        if axis in (SHARD_AXIS, REPLICA_AXIS):
            return self.group(axis, rank)[0]
        raise ValueError(f"unknown axis {axis!r}; expected one of tp, cp, ep, dp, pp, {GRADIENT_AXIS}, "
                         f"{EXPERT_GRADIENT_AXIS}")

    def groups(self, axis: str) -> list[list[int]]:
        """All disjoint groups along `axis`, sorted by their first rank."""
        seen, out = set(), []
        for rank in range(self.world_size):
            if rank not in seen:
                g = self.group(axis, rank)
                seen.update(g)
                out.append(g)
        return out

    def group_array(self, axis: str):
        """`groups(axis)` as a numpy array, a row per group: built from the strides for the dense
        axes and GRADIENT_AXIS, where listing 131,072 ranks' groups one by one takes seconds."""
        import numpy as np
        ranks = np.arange(self.world_size)
        if axis in DENSE_AXES:
            stride, size = self._strides[axis], getattr(self, axis)
            firsts = ranks[(ranks // stride) % size == 0]
            return firsts[:, None] + np.arange(size) * stride
        if axis == GRADIENT_AXIS:  # cp innermost, as _list_group lists it
            first = ((ranks // self._strides["dp"]) % self.dp == 0) & ((ranks // self._strides["cp"]) % self.cp == 0)
            members = np.arange(self.dp * self.cp)
            return ranks[first][:, None] + (members // self.cp) * self._strides["dp"] + (members % self.cp) * \
                self._strides["cp"]
        return np.array(self.groups(axis), dtype=np.int64)

    def pipeline(self, tp: int = 0, dp: int = 0, cp: int = 0) -> list[int]:
        """Global ranks of one pipeline, stage 0 first."""
        return [self.rank(tp=tp, pp=s, dp=dp, cp=cp) for s in range(self.pp)]

    def pipeline_coords(self) -> list[dict[str, int]]:
        """(tp, dp, cp) of every pipeline, dp outermost and tp innermost: one order for every
        caller, since the engine's process order and the costs' slowest-of-all scans follow it."""
        return [dict(tp=t, dp=d, cp=c) for d in range(self.dp) for c in range(self.cp) for t in range(self.tp)]

    def pipelines(self) -> list[list[int]]:
        """Global ranks of every pipeline (each stage 0 first), in `pipeline_coords` order."""
        return [self.pipeline(**coords) for coords in self.pipeline_coords()]


def _strides(order, sizes: dict[str, int]) -> dict[str, int]:
    """Rank distance between neighbours along each axis, innermost first (RankGenerator)."""
    strides, stride = {}, 1
    for axis in order:
        strides[axis] = stride
        stride *= sizes[axis]
    return strides

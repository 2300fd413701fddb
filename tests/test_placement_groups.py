"""Process groups of a placement against their definition by coordinates: a dense axis's group
is the ranks that differ from a rank in that coordinate alone, every member of a group lists
the same group, and the groups along an axis partition the ranks (sim3d/cluster/placement.py
lists them by strides and caches a group for all its members)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from sim3d.cluster.placement import (DENSE_AXES, EXPERT_GRADIENT_AXIS, GRADIENT_AXIS, REPLICA_AXIS, SHARD_AXIS,
                                     Placement)

ORDERS = ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]  # Megatron-Core's default and pp before dp


@st.composite
def placements(draw):
    tp, pp, cp = (draw(st.sampled_from([1, 2, 4])) for _ in range(3))
    dp = draw(st.sampled_from([1, 2, 3, 4]))
    ep = draw(st.sampled_from([e for e in (1, 2, 4) if (tp * cp * dp) % (tp * e) == 0]))
    shard = draw(st.sampled_from([s for s in (None, 1, 2, 4) if s is None or (dp * cp) % s == 0]))
    return Placement(tp, pp, dp, cp, ep, draw(st.sampled_from(ORDERS)), None, shard)


@settings(max_examples=60, deadline=None)
@given(placements(), st.data())
def test_groups_are_what_their_coordinates_define(p, data):
    coords = [p.coords(r) for r in range(p.world_size)]
    asked = data.draw(st.permutations(range(p.world_size)))  # a group is cached for all its members once asked
    for axis in (*DENSE_AXES, "ep", GRADIENT_AXIS, EXPERT_GRADIENT_AXIS, SHARD_AXIS, REPLICA_AXIS):
        seen: set[int] = set()
        for rank in asked:
            group = p.group(axis, rank)
            assert rank in group and len(group) == p.group_size(axis)
            # listed afresh by each member (p.group answers a member from the cache it just filled)
            assert all(p._list_group(axis, m) == group for m in group)
            if axis in DENSE_AXES:
                same = [r for r in range(p.world_size)
                        if all(coords[r][a] == coords[rank][a] for a in DENSE_AXES if a != axis)]
                assert group == sorted(same, key=lambda r: coords[r][axis])
            if axis == GRADIENT_AXIS:  # cp innermost, as Megatron lists its dp-cp groups
                same = [r for r in range(p.world_size)
                        if (coords[r]["tp"], coords[r]["pp"]) == (coords[rank]["tp"], coords[rank]["pp"])]
                assert group == sorted(same, key=lambda r: (coords[r]["dp"], coords[r]["cp"]))
            seen.update(group)
        assert seen == set(range(p.world_size))


@settings(max_examples=30, deadline=None)
@given(placements())
def test_one_coordinate_is_that_of_all_of_them(p):
    for rank in range(p.world_size):
        assert {axis: p.coord(rank, axis) for axis in DENSE_AXES} == {a: p.coords(rank)[a] for a in DENSE_AXES}


@settings(max_examples=60, deadline=None)
@given(placements())
def test_group_array_lists_the_groups(p):
    """The array built from strides (link tables at 131,072 GPUs) holds what `groups` lists one
    rank at a time, group for group and member for member."""
    for axis in (*DENSE_AXES, "ep", GRADIENT_AXIS, EXPERT_GRADIENT_AXIS, SHARD_AXIS, REPLICA_AXIS):
        assert p.group_array(axis).tolist() == p.groups(axis)

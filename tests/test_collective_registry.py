"""A collective is one registry entry: a toy one registered here alone is priced by the cost
model's public functions exactly as its closed form says."""

import pytest

from sim3d.cluster.topology import GroupLink
from sim3d.costs import collectives
from sim3d.costs.collectives import (COLLECTIVE, COLLECTIVES, NETWORK_EFFICIENCY, NVLINK_N_HALF_BYTES, Collective,
                                     bus_factor, collective_named, collective_time, register_collective)

# nccl-tests' broadcast: busbw = algbw (PERFORMANCE.md), a ring of n - 1 hops; LL not priced
BROADCAST = Collective("toy_broadcast", "toy-broadcast", lambda n: 1.0, lambda n: n - 1, None, aliases=("toybcast",))


@pytest.fixture
def broadcast(monkeypatch):
    monkeypatch.setitem(COLLECTIVES, BROADCAST.name, BROADCAST)  # both undone after the test
    monkeypatch.setitem(COLLECTIVE, BROADCAST.op_name, BROADCAST.name)
    return register_collective(BROADCAST)


def _link(nodes):
    per_node = 8 // nodes
    return GroupLink(size=8, bw=100e9, latency=5e-6, nodes=nodes, per_node=per_node, intra_bw=100e9, inter_bw=25e9,
                     intra_latency=2e-6, inter_latency=5e-6, intra_efficiency=0.8,
                     ring_intra_bw=100e9, ring_inter_bw=25e9)


def test_toy_collective_inside_a_node_is_its_closed_form(broadcast):
    nbytes = 64 * 2**20
    got = collective_time("toy_broadcast", nbytes, _link(1))
    assert got.algorithm == "ring"
    assert got.seconds == pytest.approx(7 * 5e-6 + (nbytes + NVLINK_N_HALF_BYTES) / (100e9 * 0.8))


def test_toy_collective_across_nodes_is_its_closed_form(broadcast):
    nbytes = 64 * 2**20
    got = collective_time("toy_broadcast", nbytes, _link(2))
    assert got.seconds == pytest.approx(7 * 5e-6 + nbytes / min(100e9 * 0.8, 25e9 * NETWORK_EFFICIENCY))


def test_toy_collective_names_reach_every_reader(broadcast):
    assert COLLECTIVE["toy-broadcast"] == "toy_broadcast"  # op graph spelling -> nccl-tests name
    assert bus_factor("toy_broadcast", 8) == 1.0
    assert collective_named("toybcast") == "toy_broadcast"  # a profile's spelling


def test_unregistered_collective_is_refused():
    with pytest.raises(ValueError, match="unknown collective 'toy_broadcast'"):
        collective_time("toy_broadcast", 1e6, _link(1))


def test_shipped_entries_keep_nccl_tests_bus_factors():
    assert [bus_factor(name, 4) for name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")] \
        == [1.5, 0.75, 0.75, 0.75, 1.0]
    assert collectives.COLLECTIVES["all_reduce"].reduction_trees

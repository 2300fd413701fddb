"""Max-min fairness against allocations computed by hand, and the bottleneck property on
random flow sets (every flow is at its ceiling or has a full link on which no flow is faster)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim3d.engine.maxmin import Flow, FlowSet, max_min_rates


def rates(flows, caps):
    max_min_rates(flows, caps.__getitem__)
    return [f.rate for f in flows]


def test_two_flows_halve_a_link():
    assert rates([Flow({"a": 1}), Flow({"a": 1})], {"a": 10}) == pytest.approx([5, 5])


def test_a_flow_bottlenecked_elsewhere_leaves_the_rest_to_the_others():
    # link a (10) carries f1 and f2; link b (4) carries f2 and f3: b fills first at 2 each,
    # and f1 takes what f2 leaves of a
    flows = [Flow({"a": 1}), Flow({"a": 1, "b": 1}), Flow({"b": 1})]
    assert rates(flows, {"a": 10, "b": 4}) == pytest.approx([8, 2, 2])


def test_a_ceiling_hands_the_rest_to_the_link_partner():
    assert rates([Flow({"a": 1}, cap=3), Flow({"a": 1})], {"a": 10}) == pytest.approx([3, 7])


def test_a_ring_crossing_a_link_twice_gets_a_third_of_it_beside_one_flow():
    # rates rise together; the ring puts 2 bytes on the link per byte of progress
    assert rates([Flow({"a": 2}), Flow({"a": 1})], {"a": 12}) == pytest.approx([4, 4])


def test_four_flows_on_three_links_of_different_capacities():
    # L1 (1) is the first bottleneck at 1/3 for f1, f2, f3; f4 then takes what f3 leaves of
    # L2 (2 - 1/3), which L3 (3) allows (1/3 + 5/3 < 3)
    flows = [Flow({"L1": 1, "L3": 1}), Flow({"L1": 1}), Flow({"L1": 1, "L2": 1}), Flow({"L2": 1, "L3": 1})]
    assert rates(flows, {"L1": 1, "L2": 2, "L3": 3}) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 5 / 3])


def test_an_unbounded_flow_is_refused():
    with pytest.raises(ValueError, match="unbounded"):
        max_min_rates([Flow({})], {}.__getitem__)


links = st.sampled_from("abcde")
flow_sets = st.lists(
    st.tuples(st.dictionaries(links, st.sampled_from([0.5, 1.0, 2.0]), min_size=1, max_size=4),
              st.one_of(st.just(float("inf")), st.floats(0.1, 20))),
    min_size=1, max_size=8)
capacities = st.fixed_dictionaries({e: st.floats(0.5, 50) for e in "abcde"})


@settings(max_examples=200, deadline=None)
@given(flow_sets, capacities)
def test_max_min_is_feasible_and_every_flow_has_a_bottleneck(spec, caps):
    flows = [Flow(dict(edges), cap) for edges, cap in spec]
    max_min_rates(flows, caps.__getitem__)
    tol = 1e-6
    for edge, capacity in caps.items():
        assert sum(f.rate * f.edges.get(edge, 0) for f in flows) <= capacity * (1 + tol)
    for f in flows:
        assert f.rate <= f.cap * (1 + tol)
        if f.rate >= f.cap * (1 - tol):
            continue
        full = [e for e in f.edges
                if sum(g.rate * g.edges.get(e, 0) for g in flows) >= caps[e] * (1 - tol)]
        assert any(all(f.rate >= g.rate * (1 - tol) for g in flows if e in g.edges) for e in full), \
            "a flow below its ceiling must have a full link on which it is among the fastest"


@settings(max_examples=100, deadline=None)
@given(flow_sets, capacities, st.data())
def test_incremental_updates_equal_a_full_recompute(spec, caps, data):
    net = FlowSet(caps.__getitem__)
    flows = [Flow(dict(edges), cap) for edges, cap in spec]
    for f in flows:
        net.add(f)
    gone = data.draw(st.sets(st.sampled_from(range(len(flows)))))
    for i in sorted(gone):
        net.remove(flows[i])
    left = [f for i, f in enumerate(flows) if i not in gone]
    got = [f.rate for f in left]
    fresh = [Flow(dict(f.edges), f.cap) for f in left]
    max_min_rates(fresh, caps.__getitem__)
    assert got == pytest.approx([f.rate for f in fresh], rel=1e-9)

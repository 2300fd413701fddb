"""The cluster's plain graph (sim3d/cluster/graph.py) answers as networkx.Graph does."""

import networkx as nx

from sim3d.cluster.graph import Graph
from sim3d.cluster.topology import Topology
from sim3d.scenario import load_scenario


def test_edges_neighbours_and_attributes_as_networkx():
    ours, theirs = Graph(), nx.Graph()
    steps = [("a", "b", 1), ("c", "a", 2), ("b", "c", 3), ("a", "b", 4), ("d", "d", 5), ("c", "e", 6)]
    for g in (ours, theirs):
        g.add_node("z")
        for u, v, bw in steps:
            g.add_edge(u, v, bw=bw, kind=f"{u}{v}")  # ("a", "b") twice: its attributes are updated
    assert list(ours) == list(theirs) and list(ours.nodes) == list(theirs.nodes) and len(ours) == len(theirs)
    assert list(ours.edges(data=True)) == list(theirs.edges(data=True))
    assert list(ours.edges()) == list(theirs.edges())
    assert list(ours.edges("c")) == list(theirs.edges("c"))
    assert ours.edges["b", "a"] is ours.edges["a", "b"] and ours.edges["b", "a"] == {"bw": 4, "kind": "ab"}
    assert list(ours["a"]) == list(theirs["a"]) and "e" in ours and "q" not in ours


def test_the_flagships_links_once_each():
    graph = Topology(load_scenario("scenarios/gpt3.yaml")).graph
    edges = [(u, v) for u, v, _ in graph.edges(data=True)]
    assert len(edges) == len({frozenset(e) for e in edges}) == sum(len(graph[n]) for n in graph) // 2

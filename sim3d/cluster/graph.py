"""The cluster's links as a plain undirected graph: what topology.py asks of one (an edge's
attributes, a node's neighbours, every edge once), without networkx, whose import took a
tenth of a second of every `sim3d run` for these few dictionary look-ups (routes are
computed from the fabric's structure, not searched). Where the two overlap this behaves as
networkx.Graph does: nodes and neighbours in the order they were added, one attribute dict
shared by both directions of an edge, `edges(data=True)` yielding each edge once."""

from __future__ import annotations

from typing import Hashable, Iterator


class Graph:
    def __init__(self):
        self._adjacent: dict[Hashable, dict[Hashable, dict]] = {}
        self.edges = Edges(self._adjacent)

    def add_node(self, node: Hashable) -> None:
        self._adjacent.setdefault(node, {})

    def add_edge(self, u: Hashable, v: Hashable, **attributes) -> None:
        """Add the edge, or update the attributes of the edge there already."""
        data = self._adjacent.setdefault(u, {}).get(v)
        if data is None:
            data = self._adjacent[u][v] = {}
            self._adjacent.setdefault(v, {})[u] = data
        data.update(attributes)

    @property
    def nodes(self):
        return self._adjacent.keys()

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._adjacent)

    def __contains__(self, node) -> bool:
        return node in self._adjacent

    def __len__(self) -> int:
        return len(self._adjacent)

    def __getitem__(self, node: Hashable) -> dict[Hashable, dict]:
        """The node's neighbours, each with the attributes of the edge to it."""
        return self._adjacent[node]


class Edges:
    """`graph.edges[u, v]`: the edge's attributes (either direction); `graph.edges(node)`: the
    node's edges as (node, neighbour); `graph.edges(data=True)`: every edge once, as
    (u, v, attributes)."""

    def __init__(self, adjacent: dict):
        self._adjacent = adjacent

    def __getitem__(self, edge: tuple) -> dict:
        u, v = edge
        return self._adjacent[u][v]

    def __call__(self, node: Hashable | None = None, data: bool = False) -> Iterator[tuple]:
        if node is not None:
            return ((node, v, d) if data else (node, v) for v, d in self._adjacent[node].items())
        return self._each_once(data)

    def _each_once(self, data: bool) -> Iterator[tuple]:
        seen = set()
        for u, neighbours in self._adjacent.items():
            for v, d in neighbours.items():
                if v not in seen:
                    yield (u, v, d) if data else (u, v)
            seen.add(u)

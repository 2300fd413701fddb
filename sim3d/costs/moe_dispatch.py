"""The expert all-to-all's bytes across nodes under the dispatcher a scenario names
(`training.moe_dispatcher`).

NCCL's all-to-all (Megatron's alltoall dispatcher) sends every copy of a token to the rank of
its expert: k copies for top-k routing, of which k (N - 1) / N leave the node on average when
the experts spread evenly over the group's N nodes. DeepEP sends a token once to each other node
that holds one of its experts, over the network to the GPU on the same rail, and forwards it
there over NVLink to the experts' GPUs (deepseek-ai/DeepEP README, "normal kernels"; DeepSeek-V3,
arXiv:2412.19437 sec. 3.2.2); its combine sums a node's copies before sending them back. So the
network carries the number of distinct other nodes a token goes to instead of its copies:

* with group-limited routing whose groups are the group's nodes (DeepSeek-V3: 256 experts in
  8 groups of 32, each token among 4 groups, expert-parallel over 64 GPUs on 8 nodes), g chosen
  groups, g (N - 1) / N of them other nodes: g / k of the copies' bytes (4 / 8 for DeepSeek-V3);
* otherwise, experts drawn evenly: (N - 1)(1 - (1 - 1/N)^k) other nodes on average (drawn with
  replacement, a bound within a few percent of drawing k distinct experts).

The NVLink side carries every copy either way, so only the network term of the all-to-all's
price scales (collectives.all_to_all_s_per_byte).
"""

from __future__ import annotations

from dataclasses import replace

from .collectives import all_to_all_s_per_byte


def network_share(s, nodes: int) -> float:
    """The bytes an expert all-to-all sends across nodes under the scenario's dispatcher over
    what NCCL's all-to-all sends, for a group spread over `nodes` nodes."""
    moe = s.model.moe
    if s.training.moe_dispatcher != "deepep" or moe is None or nodes < 2:
        return 1.0
    k = moe.top_k
    copies = k * (nodes - 1) / nodes
    if moe.router_groups == nodes:
        distinct = moe.router_group_topk * (nodes - 1) / nodes
    else:
        distinct = (nodes - 1) * (1 - (1 - 1 / nodes) ** k)
    return min(1.0, distinct / copies)


def dispatched(s, link):
    """An expert group's link with the network share of its all-to-all that the scenario's
    dispatcher sends."""
    share = network_share(s, link.nodes) if link.a2a_network_s else 1.0
    return replace(link, a2a_network_s=link.a2a_network_s * share) if share < 1.0 else link


def all_to_all_slowness(link) -> tuple:
    """Orders expert groups from fastest to slowest: by their all-to-all across nodes, then
    as rings (groups inside one node)."""
    return (all_to_all_s_per_byte(link) if link.nodes > 1 else 0.0, -link.bw, -link.inter_bw, link.latency)

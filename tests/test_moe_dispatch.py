"""`training.moe_dispatcher: deepep` (costs/moe_dispatch.py): a token crosses the network once per
other node its experts are on, not once per copy; checked against hand counts of the expected
node counts and on DeepSeek-V3's expert all-to-all."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d.costs.collectives import NETWORK_EFFICIENCY
from sim3d.costs.cost_model import CostModel
from sim3d.costs.moe_dispatch import network_share
from sim3d.scenario import load_scenario, scenario_from_dict
from sim3d.scenario.importers import from_megatron
from sim3d.scenario.load import ScenarioError
from sim3d.scenario.megatron_export import to_megatron_args

DSV3 = Path(__file__).resolve().parent.parent / "scenarios" / "deepseek-v3.yaml"


def test_group_limited_routing_over_the_nodes_sends_a_token_to_its_chosen_groups_only():
    """DeepSeek-V3: 8 copies, 7/8 of them to other nodes; 4 chosen groups (= nodes), 4 x 7/8
    of them other nodes: half the bytes (arXiv:2412.19437 sec. 3.2.2: at most 4 nodes)."""
    assert network_share(load_scenario(DSV3), 8) == pytest.approx(0.5, rel=1e-12)


def test_without_group_limits_a_token_goes_to_the_distinct_nodes_of_its_experts():
    s = load_scenario(DSV3, ["model.moe.router_groups=null", "model.moe.router_group_topk=null"])
    # 8 experts drawn evenly over 8 nodes: 7 (1 - (7/8)^8) other nodes, against 8 x 7/8 copies
    assert network_share(s, 8) == pytest.approx(1 - (7 / 8) ** 8, rel=1e-12)
    assert network_share(s, 1) == 1.0  # inside a node nothing crosses the network
    assert network_share(load_scenario(DSV3, ["training.moe_dispatcher=alltoall"]), 8) == 1.0


def test_deepseek_v3s_expert_all_to_alls_cross_the_network_at_half_the_bytes():
    """Its expert groups span 8 nodes and are network-bound (the NICs' pace per byte is below
    NVLink's), so the bytes part of each dispatch and combine halves; the latencies stay."""
    def ep_seconds(*sets):
        costs = CostModel(load_scenario(DSV3, list(sets)))
        link = costs._folded_links["ep"]
        assert link.nodes == 8 and link.a2a_network_s / NETWORK_EFFICIENCY / 2 > link.a2a_nvlink_s / link.intra_efficiency
        cost = costs.block("moe_layer", "F", dict(zip(("tp", "cp", "ep"), costs._links_of(0))))
        return cost.comm["ep"], 2 * (link.size - 1) * link.latency  # a dispatch and a combine
    deepep, latency = ep_seconds()
    plain, _ = ep_seconds("training.moe_dispatcher=alltoall")
    assert deepep - latency == pytest.approx(0.5 * (plain - latency), rel=1e-9)


def test_the_dispatcher_and_the_groups_go_out_and_come_back_as_megatron_arguments():
    s = load_scenario(DSV3)
    args = [str(a) for a in to_megatron_args(s)]
    assert args[args.index("--moe-flex-dispatcher-backend") + 1] == "deepep"
    back = from_megatron(args, name="back", gpu="h100-sxm", gpus=1024, gpus_per_node=8)
    assert back.unmapped == []
    t = scenario_from_dict(back.scenario)
    assert (t.training.moe_dispatcher, t.model.moe.router_groups, t.model.moe.router_group_topk) == ("deepep", 8, 4)
    older = from_megatron(args[:args.index("--moe-token-dispatcher-type")] + ["--moe-enable-deepep"],
                          name="older", gpu="h100-sxm", gpus=1024, gpus_per_node=8)
    assert older.scenario["training"]["moe_dispatcher"] == "deepep"


@pytest.mark.parametrize("sets, words", [
    (["model.moe.router_group_topk=null"], "give both"),
    (["model.moe.router_groups=6"], "must divide the experts"),
    (["model.moe.router_group_topk=1"], "hold the top_k"),  # 8 experts from one group of 32: fine
])
def test_group_limits_that_cannot_route_are_refused(sets, words):
    if words == "hold the top_k":
        load_scenario(DSV3, sets)
        with pytest.raises(ScenarioError, match=words):
            load_scenario(DSV3, sets + ["model.moe.router_groups=64"])  # one of 64 groups of 4 experts
        return
    with pytest.raises(ScenarioError, match=words):
        load_scenario(DSV3, sets)

"""`training.moe_dispatcher: deepep` (costs/moe_dispatch.py): a token crosses the network once per
other node its experts are on, not once per copy; checked against hand counts of the expected
node counts and on DeepSeek-V3's expert all-to-all."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d.costs.collectives import NETWORK_EFFICIENCY
from sim3d.costs.cost_model import CostModel
from sim3d.costs.moe_dispatch import dispatched, network_share
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
    flex = args.index("--moe-flex-dispatcher-backend")
    older = args[:flex] + ["--moe-enable-deepep"] + args[flex + 2:]  # the flex type, its older switch
    assert from_megatron(older, name="older", gpu="h100-sxm", gpus=1024,
                         gpus_per_node=8).scenario["training"]["moe_dispatcher"] == "deepep"


@pytest.mark.parametrize("flags, dispatcher, unpriced", [
    (["--moe-token-dispatcher-type", "flex"], "deepep", []),  # Megatron's default backend
    (["--moe-token-dispatcher-type", "alltoall", "--moe-flex-dispatcher-backend", "deepep"], "alltoall", []),
    (["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep"], None, ["hybridep"]),
    (["--moe-token-dispatcher-type", "allgather"], "allgather", []),
    ([], "allgather", []),  # Megatron-Core's default (transformer_config.py: moe_token_dispatcher_type)
    (["--moe-flex-dispatcher-backend", "deepep"], "allgather", []),  # a backend is read under flex only
])
def test_the_importer_reads_the_dispatcher_as_megatron_does(flags, dispatcher, unpriced):
    """Megatron-Core reads --moe-flex-dispatcher-backend (default deepep) under `flex` only."""
    args = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
            "--vocab-size", "32000", "--num-experts", "8", "--expert-model-parallel-size", "2",
            "--micro-batch-size", "1", "--global-batch-size", "8"]
    got = from_megatron(args + flags, name="x", gpu="h100-sxm", gpus=2, gpus_per_node=2)
    assert got.scenario.get("training", {}).get("moe_dispatcher") == dispatcher
    assert [any(word in note for note in got.unmapped) for word in unpriced] == [True] * len(unpriced)
    with pytest.raises(ValueError, match="needs --moe-token-dispatcher-type flex"):
        from_megatron(args + ["--moe-enable-deepep"], name="x", gpu="h100-sxm", gpus=2, gpus_per_node=2)


@pytest.mark.parametrize("sets, words", [
    (["model.moe.router_group_topk=null"], "give both"),
    (["model.moe.router_groups=6"], "must divide the experts"),
    (["model.moe.router_group_topk=1"], "hold the top_k"),  # 8 experts from one group of 32: fine
    (["model.moe.top_k=2"], "an expert in each chosen group"),  # 2 experts over 4 chosen groups
])
def test_group_limits_that_cannot_route_are_refused(sets, words):
    if words == "hold the top_k":
        load_scenario(DSV3, sets)
        with pytest.raises(ScenarioError, match=words):
            load_scenario(DSV3, sets + ["model.moe.router_groups=64"])  # one of 64 groups of 4 experts
        return
    with pytest.raises(ScenarioError, match=words):
        load_scenario(DSV3, sets)


def test_the_link_report_lays_deepeps_network_bytes_at_its_share():
    """analysis/traffic.py: an expert group's all-to-all edges, the network ones at half the
    bytes under DeepEP on DeepSeek-V3, NVLink's as they were."""
    from sim3d.analysis.traffic import group_edges
    from sim3d.cluster.topology import Topology

    def edges(*sets):
        topology = Topology(load_scenario(DSV3, list(sets)))
        group = list(topology.placement.groups("ep")[0])
        kinds = {edge: topology.graph.edges[edge]["kind"] for edge, _ in group_edges(topology, group)}
        return {edge: load for edge, load in group_edges(topology, group)}, kinds
    deepep, kinds = edges()
    plain, _ = edges("training.moe_dispatcher=alltoall")
    assert set(deepep) == set(plain) and {"nvlink"} < set(kinds.values())
    for edge, load in plain.items():
        assert deepep[edge] == pytest.approx(load if kinds[edge] == "nvlink" else 0.5 * load, rel=1e-12)


def test_a_profiles_measured_all_to_all_is_scaled_by_deepeps_share():
    """A measured row is NCCL's all-to-all (a DeepEP run launches no NCCL all-to-all to time):
    DeepEP's price is it times the analytical ratio of the two dispatchers."""
    from sim3d.costs.collectives import collective_time

    class Measured:  # one measured all-to-all price for every size
        def collective_seconds(self, op, nbytes, n):
            return 0.02 if op == "all_to_all" else None

        def __getattr__(self, name):
            return lambda *a, **k: None

    costs = CostModel(load_scenario(DSV3))
    link = costs._folded_links["ep"]
    costs.profile = Measured()
    ratio = collective_time("all_to_all", 1e8, dispatched(costs.s, link)).seconds / collective_time("all_to_all", 1e8, link).seconds
    assert costs._collective("all-to-all", 1e8, "ep") == pytest.approx(0.02 * ratio, rel=1e-12)
    assert ratio < 0.6


def test_a_nemo_config_names_its_dispatcher_as_megatron_does():
    from sim3d.scenario.nemo_import import from_nemo
    model = {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16, "seq_length": 1024, "vocab_size": 32000,
             "num_moe_experts": 8, "expert_model_parallel_size": 2, "micro_batch_size": 1, "global_batch_size": 8,
             "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}
    config = {"trainer": {"num_nodes": 1, "devices": 2}, "model": model}
    got = from_nemo(config, name="nemo", gpu="h100-sxm")
    assert got.scenario["training"]["moe_dispatcher"] == "deepep"
    assert got.scenario["model"]["moe"]["experts"] == 8  # NeMo's num_moe_experts is Megatron's --num-experts
    assert not any("dispatcher" in note for note in got.unmapped)
    plain = from_nemo({**config, "model": {**model, "moe_token_dispatcher_type": "alltoall"}}, name="nemo", gpu="h100-sxm")
    assert plain.scenario["training"]["moe_dispatcher"] == "alltoall"


def test_explain_names_deepeps_share():
    costs = CostModel(load_scenario(DSV3))
    costs.action(2, "F")  # stages 0 and 1 hold the three dense first layers
    ep = dict(costs.explain())["ep collectives"]
    assert "DeepEP" in ep
    plain = CostModel(load_scenario(DSV3, ["training.moe_dispatcher=alltoall"]))
    plain.action(2, "F")
    assert "DeepEP" not in dict(plain.explain())["ep collectives"]


@pytest.mark.parametrize("sets, warned", [
    ([], False),
    (["parallel.ep=8", "parallel.dp=64"], True),  # every expert group inside one node of 8 GPUs
    (["training.moe_dispatcher=alltoall", "parallel.ep=8", "parallel.dp=64"], False),
])
def test_deepep_where_it_changes_nothing_says_so(sets, warned):
    s = load_scenario(DSV3, sets)
    assert any("deepep changes only" in w for w in s.warnings()) == warned


def test_the_allgather_dispatcher_gathers_every_ranks_tokens_whatever_top_k():
    """Megatron-Core's MoEAllGatherTokenDispatcher gathers the tokens of its TP x EP group to
    every rank and reduce-scatters the experts' outputs back: per rank ep x etp x b x s/tp x h
    elements, against the all-to-all's top_k x capacity x b x s/tp x h copies, and no second
    sort by expert. Hand counts on scenarios/moe-1024.yaml: b 1, s 4096, tp 4 with SP, h 4096,
    bf16, ep 8, top 2, capacity 1.25; its experts tensor-parallel over the 4 TP ranks (etp 4),
    or whole on each rank (etp 1)."""
    from sim3d.model.ops import layer_ops
    moe = Path(__file__).resolve().parent.parent / "scenarios" / "moe-1024.yaml"
    s = load_scenario(moe)
    assert (s.training.micro_batch, s.model.seq_len, s.tp, s.parallel.sequence_parallel, s.model.hidden, s.ep,
            s.etp, s.model.moe.top_k, s.model.moe.capacity_factor) == (1, 4096, 4, True, 4096, 8, 4, 2, 1.25)
    own = 1 * 4096 // 4 * 4096 * 2  # bytes of the tokens a rank routes

    def ops(*sets):
        return {op.name: op for op in layer_ops(load_scenario(moe, list(sets)), True)}

    exchanged = ops("parallel.etp=1")
    assert exchanged["moe_dispatch"].comm_bytes == own * 2 * 1.25 and exchanged["moe_dispatch"].comm == "all-to-all"
    assert "moe_sort_by_expert" in exchanged
    gathered = ops("parallel.etp=1", "training.moe_dispatcher=allgather")
    dispatch, combine = gathered["moe_dispatch"], gathered["moe_combine"]
    assert (dispatch.comm, dispatch.bwd_comm, dispatch.comm_bytes) == ("all-gather", "reduce-scatter", own * 8)
    assert (combine.comm, combine.bwd_comm, combine.comm_bytes) == ("reduce-scatter", "all-gather", own * 8)
    assert "moe_sort_by_expert" not in gathered and "moe_unsort_by_expert" not in gathered
    assert gathered["expert_up"].gemm == exchanged["expert_up"].gemm  # the experts see the same copies
    # etp 4: one gather over the 32 ranks of TP x EP, priced as the EP gather of own x 8 and then
    # the TP gather of those to own x 32: every rank receives own x 31 either way
    sharded = ops("training.moe_dispatcher=allgather")
    assert sharded["moe_dispatch"].comm_bytes == own * 8
    assert (sharded["moe_tp_gather"].comm_bytes, sharded["moe_tp_scatter"].comm_bytes) == (own * 32, own * 32)
    assert ops()["moe_tp_gather"].comm_bytes == own * 2 * 1.25 * 4  # the all-to-all's copies, gathered over TP
    with pytest.raises(ScenarioError, match="sequence_parallel"):
        load_scenario(moe, ["training.moe_dispatcher=allgather", "parallel.sequence_parallel=false"])


def test_the_allgather_dispatcher_round_trips_through_megatron_arguments():
    s = load_scenario(DSV3, ["training.moe_dispatcher=allgather"])
    args = [str(a) for a in to_megatron_args(s)]
    assert args[args.index("--moe-token-dispatcher-type") + 1] == "allgather"
    assert not any("allgather" in w for w in s.warnings())
    assert any("changes nothing" in w for w in load_scenario(DSV3, ["training.moe_dispatcher=allgather",
                                                                    "parallel.ep=1"]).warnings())


def test_an_imported_moe_without_expert_parallelism_gets_no_dispatcher_and_a_default_is_said():
    args = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
            "--vocab-size", "32000", "--num-experts", "8", "--micro-batch-size", "1", "--global-batch-size", "8"]
    alone = from_megatron(args, name="x", gpu="h100-sxm", gpus=2, gpus_per_node=2)
    assert "moe_dispatcher" not in alone.scenario.get("training", {})  # ep 1: there is no dispatch to price
    spread = from_megatron(args + ["--expert-model-parallel-size", "2"], name="x", gpu="h100-sxm", gpus=2,
                           gpus_per_node=2)
    assert any(note.startswith("training.moe_dispatcher allgather") for note in spread.assumed)

"""Traffic per link: laid on the graph from the trace, against closed forms and itself."""

import pytest

import sim3d
from sim3d.analysis.traffic import LINK_COLUMNS
from sim3d.report.trace import LINKS_PID


def layout(tp, pp, dp, nodes, gpus_per_node, costs=None, **training):
    return dict(name="links", model=dict(layers=4, hidden=1024, heads=16, vocab=32000, seq_len=1024),
                parallel=dict(tp=tp, pp=pp, dp=dp, sequence_parallel=tp > 1),
                training=dict(micro_batch=1, global_batch=4 * dp, recompute="none", **training),
                cluster=dict(gpu="h100-sxm", nodes=nodes, gpus_per_node=gpus_per_node), costs=costs or {})


def edge(links, src, dst):
    row = links[(links.src == src) & (links.dst == dst)]
    assert len(row) == 1, (src, dst)
    return row.iloc[0]


def test_pipeline_messages_cross_the_network_once_each_way():
    """pp2 over two one-GPU nodes: the activation of each of m micro-batches goes out over
    node 0's NIC, its gradient comes back: m * b*s*h*2 bytes per direction."""
    r = sim3d.simulate(layout(1, 2, 1, 2, 1))
    m, message = 4, 1 * 1024 * 1024 * 2
    out, back = edge(r.links, "gpu0.0", "nic0.0"), edge(r.links, "nic0.0", "gpu0.0")
    assert out.bytes == m * message and back.bytes == m * message
    assert out.busy_fraction == pytest.approx(out.bytes / (out.bandwidth_Bps * r.step_time))
    assert list(r.links.columns) == list(LINK_COLUMNS)


def test_tensor_parallel_bytes_follow_megatron_and_the_trace():
    """tp8 with sequence parallelism: a layer's forward all-gathers twice and reduce-scatters
    twice b*s*h*2 bytes; in a ring each rank sends 7/8 of each (2 x 7/8 for an all-reduce). Every byte a rank's trace
    says it sent leaves its GPU on its NVLink."""
    r = sim3d.simulate(layout(8, 1, 1, 1, 8))
    trace = r.trace
    forward = trace[(trace.kind == "TP_COMM") & (trace["rank"] == 0)]
    first = forward.iloc[0]  # the first forward of rank 0
    activation = 1 * 1024 * 1024 * 2
    per_layer = 4 * 7 / 8 * activation
    # + the embedding's reduce-scatter and the LM head's all-gather, + Megatron's vocab-parallel
    # cross entropy: three all-reduces (max, target logit, sum of exp) of b*s fp32 values
    loss = 3 * 2 * 7 / 8 * 1024 * 4
    assert first.bytes == pytest.approx(4 * per_layer + 2 * 7 / 8 * activation + loss)
    sent = trace[(trace["rank"] == 0) & (trace.stream == "tp")].bytes.sum()
    assert edge(r.links, "gpu0.0", "switch0").bytes == pytest.approx(sent)


@pytest.mark.parametrize("tp,pp,dp,nodes", [(2, 2, 4, 2), (4, 2, 2, 2), (1, 4, 8, 4)])
def test_folded_links_equal_every_gpu_replayed(tp, pp, dp, nodes):
    """Folding lays one pipeline's bytes on every rank it stands for: on a symmetric layout
    that is exactly what replaying every GPU gives."""
    s = layout(tp, pp, dp, nodes, 8)
    folded, full = sim3d.simulate(s), sim3d.simulate(s, full_fidelity=True)
    assert folded.step_time == pytest.approx(full.step_time, rel=1e-9)
    a, b = folded.links.sort_values(["src", "dst"]), full.links.sort_values(["src", "dst"])
    assert a.src.tolist() == b.src.tolist() and a.dst.tolist() == b.dst.tolist()
    assert a.bytes.to_numpy() == pytest.approx(b.bytes.to_numpy(), rel=1e-9)
    assert (a.bytes > 0).sum() > 0


def test_a_rail_optimized_fabric_keeps_data_parallel_traffic_off_the_spine():
    """dp rings join GPU k of every node, which share rail k: leaf k switches them. On a
    fat tree with 16 nodes per leaf, 32 nodes need the spine."""
    s = layout(8, 1, 32, 32, 8)
    rail = sim3d.simulate(s).links
    tree = sim3d.simulate(s, **{"cluster.inter_node.fabric": "fat-tree"}).links
    assert rail[rail.kind == "uplink"].bytes.sum() == 0
    assert tree[tree.kind == "uplink"].bytes.sum() > 0
    assert rail[rail.kind == "ib"].bytes.sum() == pytest.approx(tree[tree.kind == "ib"].bytes.sum())


@pytest.mark.parametrize("path,sets", [
    ("scenarios/gpt3.yaml", {"cluster.inter_node.fabric": "fat-tree", "cluster.inter_node.oversubscription": 4}),
    ("scenarios/llama3.1-70b.yaml", {}),
    ("scenarios/moe-1024.yaml", {}),
    # cp pairs put a data-parallel ring's members on rails 0, 2, 4, 6: its hops between nodes
    # change rail, which a single path would send over the spine (it once read 153% busy)
    ("scenarios/llama3.1-8b.yaml", {"cluster.nodes": 128, "parallel.dp": 512, "training.global_batch": 512}),
])
def test_no_link_carries_more_than_it_can(path, sets):
    """The bytes laid on each link fit in its bandwidth over the step: the traffic accounting
    and the costs that timed the step agree on which links carry what."""
    r = sim3d.simulate(path, **sets)
    assert r.links.busy_fraction.max() <= 1.0
    assert r.links.bytes.sum() > 0


def integral(points, end):
    """Area under a step function given as [(t, level from t on)] up to `end`."""
    ts = [t for t, _ in points] + [end]
    return sum(level * (ts[i + 1] - ts[i]) for i, (_, level) in enumerate(points))


@pytest.mark.parametrize("tp,pp,dp,nodes,full,network", [(2, 2, 4, 2, False, "analytical"), (1, 4, 8, 4, False, "flow"),
                                                         (2, 2, 4, 2, True, "flow"), (1, 2, 2, 4, False, "flow")])
def test_link_timelines_carry_the_bytes_of_the_link_table(tp, pp, dp, nodes, full, network):
    """Busy fraction over time, integrated and times bandwidth, is the bytes the link table
    lays on that link: the counter tracks and links.csv account for the same traffic. On
    the flow network a link between nodes (only flows cross it) is never over 100% busy."""
    gpus = 1 if nodes == 4 and dp == 2 else 8
    r = sim3d.simulate(layout(tp, pp, dp, nodes, gpus, costs=dict(network=network)), full_fidelity=full)
    timelines = r.link_timelines(top=6)
    assert len(timelines) == 6
    table = r.links.set_index(r.links.src + "->" + r.links.dst)
    for link, points in timelines.items():
        assert all(level >= 0 for _, level in points)
        if network == "flow" and table.kind[link] != "nvlink":
            assert max(level for _, level in points) <= 1 + 1e-9, f"{link} more than 100% busy"
        moved = integral(points, r.step_time) * table.bandwidth_Bps[link]
        assert moved == pytest.approx(table.bytes[link], rel=1e-6)


def test_perfetto_trace_has_a_counter_track_per_busiest_link(tmp_path):
    import json

    r = sim3d.simulate(layout(1, 2, 1, 2, 1))
    from sim3d.report.outputs import write_run_outputs
    write_run_outputs(r, tmp_path, plots=False)
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == set(r.link_timelines())
    assert {e["pid"] for e in counters} == {LINKS_PID}  # a process of their own, no rank's
    assert max(e["args"]["busy %"] for e in counters) > 0


def test_tp_folded_full_fidelity_lays_the_bytes_of_every_rank(monkeypatch):
    """At full fidelity TP rank 0 replays for its twin peers (the straggler's pipeline is
    replayed rank by rank): every link carries what replaying every rank puts on it, and so do
    the busiest links' timelines."""
    s = {**layout(4, 2, 2, 2, 8), "faults": [{"straggler": {"rank": 9, "slowdown": 1.3}}]}
    folded = sim3d.simulate(s, full_fidelity=True)
    assert folded.sim.represented and 9 in folded.sim.ranks
    monkeypatch.setattr(sim3d.engine.run, "unfolded_pipelines", lambda scenario: None)
    every = sim3d.simulate(s, full_fidelity=True)
    assert not every.sim.represented and folded.step_time == pytest.approx(every.step_time, rel=1e-12)
    a, b = folded.links.sort_values(["src", "dst"]), every.links.sort_values(["src", "dst"])
    assert a.bytes.to_numpy() == pytest.approx(b.bytes.to_numpy(), rel=1e-9)
    ta, tb = folded.link_timelines(top=4), every.link_timelines(top=4)
    assert set(ta) == set(tb)
    for link in ta:
        assert integral(ta[link], folded.step_time) == pytest.approx(integral(tb[link], every.step_time), rel=1e-9)


def test_expert_gradients_cross_the_network_on_their_own_ring():
    """dp 16 over two nodes with ep 8: the dense gradients' ring joins all 16 GPUs and leaves
    node 0 once (rank 7 -> 8), but each expert shard's replicas are {r, r + 8}, so every GPU of
    node 0 sends its experts' share across. A member's ring bytes split as
    (n-1)/n x parameters of each group: 15/16 of the dense, 1/2 of the experts."""
    from sim3d.model.params import stage_params

    s = dict(name="moe-links", model=dict(layers=2, hidden=1024, heads=16, vocab=32000, seq_len=1024,
                                           moe=dict(experts=8, top_k=2)),
             parallel=dict(tp=1, pp=1, dp=16, ep=8), training=dict(micro_batch=1, global_batch=32, recompute="none"),
             cluster=dict(gpu="h100-sxm", nodes=2, gpus_per_node=8))
    r = sim3d.simulate(s)
    assert r.costs.placement.group("edp", 0) == [0, 8]
    params = stage_params(r.costs.s, (0,))
    expert = params.expert / 2 / (params.dense * 15 / 16 + params.expert / 2)
    per_rank = r.trace[(r.trace.stream == "dp") & (r.trace["rank"] == 0)].bytes.sum()
    out_of_node0 = r.links[r.links.src.str.startswith("gpu0.") & r.links.dst.str.startswith("nic0.")].bytes.sum()
    assert 0.05 < expert < 0.95
    assert out_of_node0 == pytest.approx(per_rank * (1 - expert) + 8 * per_rank * expert, rel=1e-6)
    table = r.links.set_index(r.links.src + "->" + r.links.dst)
    for link, points in r.link_timelines(top=4).items():  # the counter tracks split them alike
        assert integral(points, r.step_time) * table.bandwidth_Bps[link] == pytest.approx(table.bytes[link], rel=1e-6)


@pytest.mark.parametrize("label", ["leaf0", "a,b", 'say "x"', "two\nlines"])
def test_links_csv_is_what_pandas_writes(label):
    """links.csv is formatted without pandas, a row at a time where no label needs quotes:
    the file must be pandas' own (QUOTE_MINIMAL, floats as %.6g) either way."""
    import numpy as np
    import pandas as pd
    from sim3d.report.outputs import links_csv
    links = {"src": np.array(["gpu0.0", label], dtype=object), "dst": np.array(["switch0", "spine0"], dtype=object),
             "kind": np.array(["nvlink", "uplink"], dtype=object), "bandwidth_Bps": np.array([3e11, 5e10]),
             "bytes": np.array([6.426341e11, 0.0]), "busy_fraction": np.array([0.0770837123, 1 / 3])}
    assert links_csv(links).decode() == pd.DataFrame(links).to_csv(index=False, float_format="%.6g")


@pytest.mark.parametrize("sets", [
    [],
    ["cluster.inter_node.fabric=fat-tree", "cluster.inter_node.oversubscription=4"],
    ["cluster.inter_node.fabric=fat-tree", "cluster.inter_node.routing=ecmp"],
    ["faults=[{nic: {node: 1, nic: 3, gbps: 0}}]"],
])
def test_paths_laid_piece_by_piece_are_the_paths_laid_whole(sets):
    """path_loads.lay sums bytes per sending GPU, leaf pair and receiving GPU (or per path under
    ECMP): the same bytes on every edge as laying each routed path."""
    from collections import defaultdict
    import random
    from sim3d.cluster.path_loads import lay
    from sim3d.cluster.topology import Topology
    from sim3d.scenario.load import load_scenario
    topology = Topology(load_scenario("scenarios/gpt3.yaml", sets))
    rng = random.Random(7)
    pairs = [(rng.randrange(1024), rng.randrange(1024), rng.uniform(1, 1e6)) for _ in range(3000)]
    pairs += [(8 * n + 3, 8 * n + 5, 10.0) for n in range(4)]  # inside a node
    whole: dict = defaultdict(float)
    for a, b, nbytes in pairs:
        for e in topology.path(a, b):
            whole[e] += nbytes
    by_number = lay(topology, *zip(*pairs))
    assert len(by_number) == 2 * topology.graph.number_of_edges()
    laid = {edge: by_number[k] for edge, k in topology.edge_index.items()}
    assert set(e for e, v in laid.items() if v) == set(e for e, v in whole.items() if v)
    for e, nbytes in whole.items():
        assert laid[e] == pytest.approx(nbytes, rel=1e-12)


@pytest.mark.parametrize("tp,pp,dp,nodes,gpus", [(8, 2, 4, 8, 8), (2, 2, 4, 4, 4), (1, 2, 8, 4, 4), (4, 1, 4, 2, 8)])
def test_ring_hops_laid_at_once_are_those_laid_group_by_group(tp, pp, dp, nodes, gpus):
    """Where every group lies in one node or has one member per node, a link table lays a whole
    axis's ring hops at once; group by group, through the topology's NIC spreading, gives the
    same hops in the same order (so the same sums to the last bit)."""
    import numpy as np
    from sim3d.analysis.traffic import _ring_hops, _ring_hops_group_by_group
    from sim3d.cluster.topology import Topology
    from sim3d.scenario.load import scenario_from_dict
    topology = Topology(scenario_from_dict(layout(tp, pp, dp, nodes, gpus)))
    placement = topology.placement
    weights = np.random.default_rng(3).uniform(1, 1e6, placement.world_size)
    weights[::5] = 0.0  # a rank that sends nothing on the axis lays no hop
    for axis in [axis for axis in ("tp", "dp", "dp-cp") if placement.group_size(axis) > 1]:
        at_once = _ring_hops(topology, placement, axis, weights)
        by_group = _ring_hops_group_by_group(topology, placement, axis, weights, placement.group_array(axis))
        for ours, theirs in zip(at_once, by_group):
            assert np.array_equal(ours, theirs)


def test_a_step_that_moves_nothing_has_a_link_table_of_zero_bytes():
    links = sim3d.simulate("scenarios/tiny.yaml").links  # one GPU: no message, no collective
    assert len(links) > 0 and links.bytes.dtype == float and (links.bytes == 0).all() and (links.busy_fraction == 0).all()

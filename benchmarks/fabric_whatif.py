"""The README's fabric what-if: GPT-3 175B, Llama 3.1 8B and a 64-expert MoE on a
rail-optimized fabric and on a fat tree at 1:1, 2:1, 4:1 and 8:1 (adaptive routing) and at
1:1 with ECMP, with the analytical network and with flows.

    python benchmarks/fabric_whatif.py

Then the same GPT-3 step with a NIC, a node's NICs or a rail leaf switch failed or slowed, and
Llama 3.1 405B on 16,384 GPUs on Meta's three-tier cluster (`--tiers` runs only that part).
Prints one markdown row per case: step time both ways, exposed data-parallel time (flow),
bytes over the spine, the busiest uplink's mean utilisation, and how much sharing links
slowed the flows (summed over flows).
"""

from __future__ import annotations

import sim3d

MODELS = [
    ("GPT-3 175B, tp8 pp16 dp8, 128 nodes", "scenarios/gpt3.yaml", []),
    ("Llama 3.1 8B, tp1 cp2 dp512, 128 nodes, batch 512", "scenarios/llama3.1-8b.yaml",
     ["parallel.dp=512", "cluster.nodes=128", "training.global_batch=512"]),
    ("MoE 64 experts top-2, tp4 pp4 ep64 (dp64), 128 nodes", "scenarios/moe-1024.yaml", ["parallel.ep=64"]),
]
FABRICS = [("rail-optimized", 1), ("fat-tree", 1), ("fat-tree", 2), ("fat-tree", 4), ("fat-tree", 8),
           ("fat-tree, ECMP", 1)]  # routing: ecmp (flows hashed onto uplinks) instead of adaptive


def main(models=MODELS) -> None:
    print("| model, layout | fabric | oversub. | step (analytical) | step (flow) | exposed DP (flow) "
          "| EP (flow) | over the spine | busiest uplink | slowed by sharing |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, path, sets in models:
        for fabric, over in FABRICS:
            fab = sets + [f"cluster.inter_node.fabric={fabric.split(',')[0]}",
                          f"cluster.inter_node.oversubscription={over}"]
            if fabric.endswith("ECMP"):
                fab.append("cluster.inter_node.routing=ecmp")
            analytical = sim3d.simulate(path, sets=fab)
            flow = sim3d.simulate(path, sets=fab + ["costs.network=flow"])
            links = flow.links
            up = links[links.kind == "uplink"]
            spine = up[up.dst.str.startswith("spine")].bytes.sum()
            busiest = up.busy_fraction.max() if len(up) else 0.0
            print(f"| {label} | {fabric} | {over} | {analytical.step_time:.4f} s | {flow.step_time:.4f} s "
                  f"| {flow.breakdown['dp']:.4f} s | {flow.breakdown['ep']:.4f} s | {spine / 1e12:.1f} TB | {busiest:.1%} "
                  f"| {flow.sim.network.slowed_s:.2f} s |")
            label = ""


FAULTS = [("none", []), ("NIC 3 of node 0 failed", ["faults=[{nic: {node: 0, nic: 3, gbps: 0}}]"]),
          ("node 0's NICs at 100 Gb/s", ["faults=[{link: {node: 0, nic_gbps: 100}}]"]),
          ("rail leaf 3 failed", ["faults=[{leaf: {leaf: 3}}]"])]


def faults() -> None:
    """GPT-3 on its rail-optimized fabric with a fault, every GPU replayed, both network models."""
    print("\n| fault (gpt3.yaml, full fidelity) | step (analytical) | step (flow) |")
    print("|---|---:|---:|")
    for label, sets in FAULTS:
        steps = [sim3d.simulate("scenarios/gpt3.yaml", sets=sets + [f"costs.network={network}"],
                                full_fidelity=True).step_time for network in ("analytical", "flow")]
        print(f"| {label} | {steps[0]:.4f} s | {steps[1]:.4f} s |")


LLAMA_16K = ["parallel.tp=8", "parallel.pp=16", "parallel.cp=1", "parallel.dp=128", "parallel.vpp=2",
             "training.global_batch=2048", "cluster.nodes=2048"]
# Llama 3 Herd of Models (arXiv:2407.21783) section 3.3.1: two 8-GPU servers per ToR switch,
# 192 racks (3,072 GPUs) per pod at full bisection, pods joined at 1:7
META_CLUSTER = ["cluster.inter_node.fabric=fat-tree", "cluster.inter_node.nodes_per_leaf=2",
                "cluster.inter_node.nodes_per_pod=384"]
ORDERS = [("pipeline stages across pods (tp-cp-ep-dp-pp, Megatron's default)", "tp-cp-ep-dp-pp"),
          ("data parallel across pods (tp-cp-ep-pp-dp, Meta's order)", "tp-cp-ep-pp-dp")]


def tiers() -> None:
    """Llama 3.1 405B as Meta trained it (tp 8, pp 16, dp 128) on its three-tier cluster with the
    pods joined at 1:1 and at 1:7, with each rank order."""
    print("\n| Llama 3.1 405B, 16,384 GPUs | pods joined at | step (analytical) | step (flow) "
          "| longest SEND_F (flow) | core links' busiest |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, order in ORDERS:
        for ratio in (1, 7):
            sets = LLAMA_16K + META_CLUSTER + [f"parallel.order={order}", f"cluster.inter_node.pod_oversubscription={ratio}"]
            analytical = sim3d.simulate("scenarios/llama3.1-405b.yaml", sets=sets)
            flow = sim3d.simulate("scenarios/llama3.1-405b.yaml", sets=sets + ["costs.network=flow"])
            sends = flow.trace[flow.trace.kind == "SEND_F"]
            core = flow.links[flow.links.kind == "core"]
            print(f"| {label} | 1:{ratio} | {analytical.step_time:.4f} s | {flow.step_time:.4f} s "
                  f"| {(sends.end_s - sends.start_s).max() * 1e3:.2f} ms | {core.busy_fraction.max():.1%} |")
            label = ""


if __name__ == "__main__":
    import sys
    if "--tiers" not in sys.argv:
        main()
        faults()
    tiers()

"""The README's fabric what-if: GPT-3 175B, Llama 3.1 8B and a 64-expert MoE on a
rail-optimized fabric and on a fat tree at 1:1, 2:1, 4:1 and 8:1, with the analytical
network and with flows.

    python benchmarks/fabric_whatif.py

Then the same GPT-3 step with a NIC, a node's NICs or a rail leaf switch failed or slowed.
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
FABRICS = [("rail-optimized", 1), ("fat-tree", 1), ("fat-tree", 2), ("fat-tree", 4), ("fat-tree", 8)]


def main(models=MODELS) -> None:
    print("| model, layout | fabric | oversub. | step (analytical) | step (flow) | exposed DP (flow) "
          "| EP (flow) | over the spine | busiest uplink | slowed by sharing |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, path, sets in models:
        for fabric, over in FABRICS:
            fab = sets + [f"cluster.inter_node.fabric={fabric}", f"cluster.inter_node.oversubscription={over}"]
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


if __name__ == "__main__":
    main()
    faults()

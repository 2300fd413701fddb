"""What `costs.network: flow` costs: wall time against the analytical network, against GPUs
and against the number of flows, folded and at full fidelity.

    python benchmarks/flow_network.py

Timing lives here, never in tests. One row per case: the step both ways, the wall time of
the replay both ways, the flows the network carried, flows per second of replay, and how
much sharing links slowed the flows (summed over flows).
"""

from __future__ import annotations

import gc
import time

from sim3d.engine import replay_step
from sim3d.scenario.load import load_scenario

GPT3 = "scenarios/gpt3.yaml"
# gpt3's layout (tp8 pp16) with more or fewer data-parallel replicas: GPUs grow, the
# pipeline (and so the folded schedule) stays the same; the flows per bundle grow with dp
CASES = [(f"gpt3 dp{dp}", GPT3, [f"parallel.dp={dp}", f"cluster.nodes={16 * dp}",
                                 f"training.global_batch={192 * dp}"], False) for dp in (1, 2, 8, 32)]
# more micro-batches: more transfers and so more flows, same GPUs
CASES += [(f"gpt3 m{m}", GPT3, [f"training.global_batch={8 * m}"], False) for m in (48, 384)]
CASES += [
    ("gpt3-512-interleaved", "scenarios/gpt3-512-interleaved.yaml", [], False),
    ("llama3.1-405b", "scenarios/llama3.1-405b.yaml", [], False),
    ("gpt-1t", "scenarios/gpt-1t.yaml", [], False),
    ("moe-1024", "scenarios/moe-1024.yaml", [], False),
    # expert-parallel all-to-alls as flows: EP 64 across two fat-tree leaves at 4:1, then at 16k
    ("moe ep64 fat-tree 4:1", "scenarios/moe-1024.yaml", ["parallel.ep=64", "cluster.inter_node.fabric=fat-tree",
                                                          "cluster.inter_node.oversubscription=4"], False),
    ("moe ep64 16,384 GPUs", "scenarios/moe-1024.yaml", ["parallel.ep=64", "cluster.nodes=2048", "parallel.dp=1024",
                                                         "training.global_batch=16384"], False),
    ("gpt-13b (64 GPUs)", "scenarios/gpt-13b.yaml", [], True),
    ("gpt3 dp1 (128 GPUs)", GPT3, ["parallel.dp=1", "cluster.nodes=16", "training.global_batch=192"], True),
    ("gpt3 dp2 (256 GPUs)", GPT3, ["parallel.dp=2", "cluster.nodes=32", "training.global_batch=384"], True),
]


def timed(path: str, sets: list[str], full: bool):
    scenario = load_scenario(path, sets)
    gc.collect()
    start = time.perf_counter()
    result = replay_step(scenario, full_fidelity=full).result
    return scenario, result, time.perf_counter() - start


def main() -> None:
    print(f"{'case':22} {'mode':6} {'GPUs':>6} {'step an.':>9} {'step flow':>9} {'diff':>7} {'wall an.':>8} "
          f"{'wall flow':>9} {'flows':>8} {'flows/s':>8} {'slowed s':>9}")
    for name, path, sets, full in CASES:
        scenario, analytical, wall_a = timed(path, sets, full)
        _, flow, wall_f = timed(path, sets + ["costs.network=flow"], full)
        n = flow.network
        print(f"{name:22} {'full' if full else 'folded':6} {scenario.num_gpus:>6} {analytical.step_time:>9.4f} "
              f"{flow.step_time:>9.4f} {flow.step_time / analytical.step_time - 1:>+7.2%} {wall_a:>8.2f} "
              f"{wall_f:>9.2f} {n.flows:>8,} {n.flows / flow.wall_s:>8,.0f} {n.slowed_s:>9.3f}")
        del analytical, flow


if __name__ == "__main__":
    main()

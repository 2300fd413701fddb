"""`training.p2p_scatter_gather`: Megatron-LM 2020-22's pipeline messages without SP, split
over the TP ranks on the wire and all-gathered on arrival (megatron/p2p_communication.py,
--scatter-gather-tensors-in-pipeline): priced as 1/tp of the message on the path plus the
receiver's all-gather, by hand."""

from __future__ import annotations

import pytest

import sim3d
from sim3d.costs.collectives import collective_time, p2p_time
from sim3d.costs.cost_model import CostModel
from sim3d.scenario import scenario_from_dict


def _scenario(scatter: bool, sp: bool = False, tp: int = 8) -> dict:
    return dict(name="sg", model=dict(layers=8, hidden=4096, heads=32, vocab=51200, seq_len=2048),
                parallel=dict(tp=tp, pp=2, dp=1, sequence_parallel=sp),
                training=dict(micro_batch=1, global_batch=8, p2p_scatter_gather=scatter),
                cluster=dict(gpu="a100-80gb", nodes=2, gpus_per_node=tp))  # a stage per node


def _costs(raw: dict) -> CostModel:
    return CostModel(scenario_from_dict(raw))


def test_a_scattered_message_is_an_eighth_on_the_wire_and_a_gather_on_arrival():
    whole, scattered = _costs(_scenario(False)), _costs(_scenario(True))
    message = 1 * 2048 * 4096 * 2  # b * s * h in 16 bits
    assert whole.p2p_bytes == message and scattered.p2p_bytes == message / 8
    src, dst = 0, 8  # TP rank 0 of stage 0 (node 0) and of stage 1 (node 1)
    bw, latency = scattered.topology.path_cost(src, dst)
    tp_link = scattered._links_of(dst)[0]
    by_hand = (p2p_time(message / 8, bw, latency, True, scattered.topology.nvlink_efficiency)
               + collective_time("all_gather", message, tp_link).seconds)
    assert scattered.transfer(src, dst) == pytest.approx(by_hand, rel=1e-12)
    assert scattered.transfer(src, dst) < whole.transfer(src, dst)


@pytest.mark.parametrize("sp, tp", [(True, 8), (False, 1)])
def test_nothing_is_scattered_with_sequence_parallelism_or_without_tensor_parallelism(sp, tp):
    on, off = _costs(_scenario(True, sp, tp)), _costs(_scenario(False, sp, tp))
    assert on.p2p_bytes == off.p2p_bytes
    assert on.transfer(0, tp) == off.transfer(0, tp)


def test_the_trace_and_the_flow_model_carry_the_scattered_bytes():
    run = sim3d.simulate(_scenario(True))
    sends = run.trace[(run.trace["stream"] == "pp") & (run.trace["bytes"] > 0)]
    assert set(sends["bytes"]) == {2048 * 4096 * 2 // 8}
    flow = sim3d.simulate(_scenario(True), sets=("costs.network=flow",))
    assert flow.step_time == pytest.approx(run.step_time, rel=1e-6)  # nothing shares the path here

"""`training.moe_a2a_overlap` (costs/a2a_overlap.py): Megatron-Core's combined 1F1B runs an MoE
layer's forward beside another micro-batch's backward, each one's all-to-alls under the other's
compute. Checked against hand counts, its bounds, Megatron's asserts and its flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d.costs.a2a_overlap import paired
from sim3d.costs.action_cost import ActionCost
from sim3d.costs.cost_model import CostModel
from sim3d.scenario import load_scenario
from sim3d.scenario.importers import from_megatron
from sim3d.scenario.load import ScenarioError
from sim3d.scenario.megatron_export import to_megatron_args

MOE = Path(__file__).resolve().parent.parent / "scenarios" / "moe-1024.yaml"
INTERLEAVED = ["schedule=interleaved-1f1b", "parallel.vpp=2"]  # Megatron's overlap needs it at pp > 1


def test_the_pair_hides_its_all_to_alls_under_its_compute_by_hand():
    # F: 6 ms of compute + 4 of all-to-all; B: 14 + 6; one window holding all of it: compute 20,
    # all-to-alls 10, the compute slowed while they run by 16 of 132 SMs: 20 + 10 x 16/116 ms
    forward = ActionCost(10.0, {"ep": 4.0}, 0.0, {"ep": 4.0}, {"ep": 1e6})
    backward = ActionCost(20.0, {"ep": 6.0}, 1.0, {"ep": 6.0}, {"ep": 2e6})
    f, b = paired(forward, backward, [(20.0, 10.0)], 132)
    left = 10 * 16 / 116
    assert f.seconds == pytest.approx(6 + 0.4 * left) and b.seconds == pytest.approx(14 + 0.6 * left)
    assert (f.exposed["ep"], b.exposed["ep"]) == (pytest.approx(0.4 * left), pytest.approx(0.6 * left))
    assert f.comm["ep"] == f.exposed["ep"]  # what the summary's exposed communication adds up
    assert (b.wire, b.recompute) == ({"ep": 2e6}, 1.0)  # what moved and what ran again is unchanged


def test_an_all_to_all_longer_than_its_window_is_exposed_by_the_difference():
    """Megatron runs each all-to-all beside one piece of the other pass, and the pieces wait on
    each other: an all-to-all the pair's total compute could hide is exposed where its own
    window is shorter (model_chunk_schedule_plan.py)."""
    forward = ActionCost(10.0, {"ep": 8.0}, 0.0, {"ep": 8.0})
    backward = ActionCost(30.0, {"ep": 2.0}, 0.0, {"ep": 2.0})
    f, b = paired(forward, backward, [(30.0, 0.0), (0.0, 8.0), (0.0, 2.0)], 132)
    assert f.seconds + b.seconds == pytest.approx(30.0 + 10.0)  # nothing hid: every all-to-all alone
    whole, _ = paired(forward, backward, [(30.0, 10.0)], 132)  # one window would have hidden them
    assert whole.seconds < f.seconds


@pytest.mark.parametrize("windows", [[(5.0, 1.0), (9.0, 2.0)], [(1.0, 7.0), (2.0, 9.0)], [(3.0, 3.0), (3.0, 3.0)],
                                     [(0.1, 5.0), (8.0, 0.0)]])
def test_the_pair_is_never_slower_than_apart_nor_faster_than_either_stream(windows):
    g, c = sum(w[0] for w in windows), sum(w[1] for w in windows)
    forward = ActionCost(g / 2 + c / 3, {"ep": c / 3}, 0.0, {"ep": c / 3})
    backward = ActionCost(g / 2 + 2 * c / 3, {"ep": 2 * c / 3}, 0.0, {"ep": 2 * c / 3})
    f, b = paired(forward, backward, windows, 132)
    assert f.seconds + b.seconds <= forward.seconds + backward.seconds + 1e-12
    assert f.seconds + b.seconds >= max(g, c) - 1e-12


def test_an_moe_layers_forward_and_backward_are_priced_as_a_pair():
    from sim3d.costs.a2a_overlap import _windows
    plain = CostModel(load_scenario(MOE, INTERLEAVED))
    over = CostModel(load_scenario(MOE, INTERLEAVED + ["training.moe_a2a_overlap=true"]))
    links = plain._folded_links
    raw = [plain.block("moe_layer", kind, links, raw=True) for kind in "FB"]
    assert [over.block("moe_layer", kind, links, raw=True) for kind in "FB"] == raw
    windows = _windows(over, links, over.s.training.recompute)
    # the four windows hold the pair's compute and all-to-alls, split as Megatron runs them
    assert sum(g for g, _ in windows) == pytest.approx(sum(r.seconds - r.exposed["ep"] for r in raw), rel=1e-9)
    assert sum(c for _, c in windows) == pytest.approx(sum(r.exposed["ep"] for r in raw), rel=1e-9)
    f, b = (over.block("moe_layer", kind, links) for kind in "FB")
    assert f.seconds + b.seconds < raw[0].seconds + raw[1].seconds
    assert f.seconds + b.seconds >= sum(g for g, _ in windows)


def test_the_summary_counts_only_the_all_to_alls_left_exposed():
    from sim3d.api import simulate
    plain = simulate(MOE, sets=INTERLEAVED)
    over = simulate(MOE, sets=INTERLEAVED + ["training.moe_a2a_overlap=true"])
    assert over.step_time < plain.step_time
    assert over.summary["comm_exposed_s"] < plain.summary["comm_exposed_s"]
    flow = simulate(MOE, sets=INTERLEAVED + ["training.moe_a2a_overlap=true", "costs.network=flow"])
    assert flow.step_time == pytest.approx(over.step_time, rel=0.05)  # what is left is priced with the compute


@pytest.mark.parametrize("sets, need", [
    (["parallel.ep=1", "parallel.dp=64"], "parallel.ep > 1"),
    (["parallel.vpp=1"], "virtual pipeline"),
    (["schedule=zb-h1", "parallel.vpp=1"], "interleaved-1f1b schedule"),
    (["training.moe_dispatcher=allgather"], "not allgather"),
    (["training.recompute=full"], "no full recomputation"),
    (["training.recompute=selective", "training.recompute_modules=[moe]"], "no `moe` in"),
    (["training.precision=fp32"], "bf16, fp16 or fp8"),
    (["model.mtp_layers=2"], "at most one multi-token"),
    (["training.kernels.stack=eager"], "Transformer Engine"),
])
def test_what_megatron_asserts_of_the_overlap_is_refused(sets, need):
    base = ["training.moe_a2a_overlap=true", *INTERLEAVED]
    load_scenario(MOE, base)  # the base layout is one Megatron runs
    with pytest.raises(ScenarioError, match=need):
        load_scenario(MOE, base + sets)


def test_the_flags_come_in_and_go_out_as_megatrons():
    args = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
            "--vocab-size", "32000", "--num-experts", "8", "--expert-model-parallel-size", "2",
            "--moe-token-dispatcher-type", "alltoall", "--micro-batch-size", "1", "--global-batch-size", "8",
            "--overlap-moe-expert-parallel-comm"]
    got = from_megatron(args, name="x", gpu="h100-sxm", gpus=2, gpus_per_node=2)
    assert got.scenario["training"]["moe_a2a_overlap"] is True
    exported = [str(a) for a in to_megatron_args(load_scenario(MOE, ["training.moe_a2a_overlap=true", *INTERLEAVED]))]
    assert "--overlap-moe-expert-parallel-comm" in exported and "--delay-wgrad-compute" in exported
    assert "--overlap-moe-expert-parallel-comm" not in [str(a) for a in to_megatron_args(load_scenario(MOE))]


def test_a_rows_notes_turn_it_on_only_when_said_of_this_run():
    from sim3d.validation.published_row import scenario_dict_of
    cells = dict(id="x", source="s", model="Qwen3 235B (MoE)", params_b=235, layers=8, hidden=1024, heads=16,
                 ffn_hidden=4096, vocab=32000, seq_len=1024, gpu="H100-SXM5-80GB", num_gpus=16, tp=1, pp=2, dp=8,
                 cp=1, ep=8, vp=2, micro_batch=1, global_batch=64, sequence_parallel=None, recompute=None,
                 distributed_optimizer=None, metric="tokens_per_s_per_gpu", value=1.0)
    said = "precision=bf16; num_experts=8; moe_router_topk=2; framework=Megatron-Bridge; moe_a2a_overlap=True"
    assert scenario_dict_of({**cells, "notes": said})["training"]["moe_a2a_overlap"] is True
    later = "precision=bf16; num_experts=8; moe_router_topk=2; later recipe uses moe_a2a_overlap=True - not pinned to this run."
    assert "moe_a2a_overlap" not in scenario_dict_of({**cells, "notes": later})["training"]


def test_the_extra_warm_up_forward_holds_one_more_chunk_on_every_rank():
    """Megatron runs one more warm-up forward before the combined 1F1B steps (schedules.py:
    num_warmup_microbatches + 1): each rank holds one more chunk's activations at its peak, the
    largest of its chunks (layers x the per-layer bytes Korthikanti's formulas give)."""
    import numpy as np
    from sim3d.model.memory import _layer_activation_bytes, memory_report, stage_layer_counts
    from sim3d.model.ops import Dims
    plain_s = load_scenario(MOE, INTERLEAVED)
    plain = memory_report(plain_s)
    over = memory_report(load_scenario(MOE, INTERLEAVED + ["training.moe_a2a_overlap=true"]))
    d = Dims.of(plain_s)
    dense, moe = stage_layer_counts(plain_s)
    per_stage = (dense * _layer_activation_bytes(d, False, plain_s.training.recompute)
                 + moe * _layer_activation_bytes(d, True, plain_s.training.recompute))
    pp = plain_s.pp
    for rank, (a, b) in enumerate(zip(plain.rows, over.rows)):
        largest = max(per_stage[chunk * pp + rank] for chunk in range(2))  # interleaved: stage c*pp + rank
        assert b.inflight == a.inflight + 1
        assert b.activations - a.activations == pytest.approx(largest, rel=1e-9)
    assert over.worst.total > plain.worst.total and np.isfinite(over.worst.total)

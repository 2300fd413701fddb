"""Stages that hold only the embedding or only the loss: with Megatron's
account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split each counts as a
layer, and one counted layer per stage leaves the first stage the embedding alone and the last
the loss alone (Megatron-Core transformer_block.py get_num_layers_to_build). k*p - 2 layers on
p ranks, under every schedule that runs them."""

from __future__ import annotations

import pytest

import sim3d
from sim3d.errors import ScenarioError
from sim3d.scenario.load import load_scenario

ACCOUNTED = ["parallel.account_for_embedding_in_pipeline_split=true",
             "parallel.account_for_loss_in_pipeline_split=true"]


def layout(schedule: str, p: int, vpp: int, layers: int) -> list[str]:
    return [f"schedule={schedule}", f"parallel.pp={p}", f"parallel.vpp={vpp}", f"model.layers={layers}",
            "parallel.tp=1", "parallel.dp=1", f"cluster.nodes={max(1, p // 8)}", f"cluster.gpus_per_node={min(p, 8)}",
            f"training.global_batch={4 * p}", "training.micro_batch=1", *ACCOUNTED]


# (schedule, chunks per rank as a function of k): a chunk per counted layer where the schedule
# interleaves; ZB-V two chunks per rank, so k = 2 and 4
CASES = [("1f1b", 1, k) for k in (1, 2, 3, 4)] + [("zb-h1", 1, k) for k in (1, 2)] + \
        [("zb-h2", 1, k) for k in (1, 2)] + [("interleaved-1f1b", k, k) for k in (2, 3, 4)] + \
        [("zbv", 2, k) for k in (2, 4)]


@pytest.mark.parametrize("schedule, vpp, k", CASES)
@pytest.mark.parametrize("p", [8, 32])
def test_k_p_minus_2_layers_validate_and_simulate(schedule, vpp, k, p):
    if p == 32 and k > 2:
        pytest.skip("one deep pipeline per schedule is enough")
    sets = layout(schedule, p, vpp, k * p - 2)
    s = load_scenario("scenarios/gpt-1.3b.yaml", sets)
    per_stage = k // vpp  # counted layers per global stage
    assert s.stage_layers == (per_stage - 1,) + (per_stage,) * (p * vpp - 2) + (per_stage - 1,)
    result = sim3d.simulate(s)
    assert result.step_time > 0 and result.summary["fits_in_memory"]
    if per_stage == 1:  # the embedding-only stage's forward is the embedding alone: far below a layer's
        forwards = result.trace[result.trace.kind == "F"]
        first, second = (forwards[forwards.stage == g] for g in (0, 1))
        assert len(first) and len(second)
        assert (first.end_s - first.start_s).max() < 0.2 * (second.end_s - second.start_s).max()


def test_fewer_counted_layers_than_stages_or_an_uneven_count_is_refused():
    with pytest.raises(ScenarioError, match="8 stages exceeds 5 layers \\(\\+ 2 counted for the embedding / loss\\)"):
        load_scenario("scenarios/gpt-1.3b.yaml", layout("1f1b", 8, 1, 5))
    with pytest.raises(ScenarioError, match="= 9 is not divisible by pp\\*vpp = 8"):
        load_scenario("scenarios/gpt-1.3b.yaml", layout("1f1b", 8, 1, 7))


def test_the_per_rank_layer_counts_stay_a_loop_placement_option():
    with pytest.raises(ScenarioError, match="places stages in a V"):
        load_scenario("scenarios/gpt-1.3b.yaml", [
            "schedule=zbv", "parallel.pp=4", "parallel.vpp=2", "parallel.tp=1", "parallel.dp=1", "model.layers=24",
            "cluster.gpus_per_node=4", "training.global_batch=16", "training.micro_batch=1",
            "parallel.decoder_first_pipeline_num_layers=2", "parallel.decoder_last_pipeline_num_layers=2"])

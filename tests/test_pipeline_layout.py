"""`parallel.pipeline_layout`: Megatron-Core's --pipeline-model-parallel-layout, each stage's
layers written out ("Et|(tt|)*6,t|L"), so ranks may hold uneven chunks; parsed as Megatron-Core
parses it (pipeline_parallel_layer_layout.py) and checked against the splits it replaces."""

from __future__ import annotations

import pytest

import sim3d
from sim3d.scenario import scenario_from_dict
from sim3d.scenario.importers import from_megatron
from sim3d.scenario.load import ScenarioError
from sim3d.scenario.megatron_export import to_megatron_args
from sim3d.scenario.pipeline_split import layout_stages


def _scenario(layers: int, pp: int, vpp: int = 1, schedule: str = "interleaved-1f1b", **parallel) -> dict:
    return dict(name="layout", model=dict(layers=layers, hidden=1024, heads=16, vocab=32000, seq_len=1024),
                parallel=dict(tp=1, pp=pp, dp=1, vpp=vpp, **parallel),
                training=dict(micro_batch=1, global_batch=4 * pp), schedule=schedule if vpp > 1 else "1f1b",
                cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=pp))


@pytest.mark.parametrize("text, stages", [
    ("Ettt|(tt|)*2,t|L", ["Ettt", "tt", "tt", "t", "L"]),  # Megatron's docstring example, shortened
    ("E|t*4|tttt|L", ["E", "tttt", "tttt", "L"]),
    ("(|tt)*2,tL", ["", "tt", "tttL"]),  # its "(|ab)*2,cd -> |ab|abcd"
])
def test_the_grammar_is_megatrons(text, stages):
    assert layout_stages(text) == stages


def test_a_layout_places_the_layers_it_writes():
    s = scenario_from_dict(_scenario(18, pp=4, vpp=2, pipeline_layout="E|t*4|tttt|ttt|ttt|tt|tt|L"))
    assert s.stage_layers == (0, 4, 4, 3, 3, 2, 2, 0)
    assert sum(s.stage_layers) == 18


@pytest.mark.parametrize("layout, flags, layers, pp, vpp", [
    # a chunk per layer with the embedding and the loss alone on theirs: what the account flags say
    ("E|(t|)*14L", dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True),
     14, 4, 4),
    ("Etttt|tttt|tttt|ttttL", {}, 16, 4, 1),  # the even split
])
def test_a_layout_equal_to_a_split_simulates_the_same_step(layout, flags, layers, pp, vpp):
    by_layout = sim3d.simulate(_scenario(layers, pp, vpp, pipeline_layout=layout))
    by_split = sim3d.simulate(_scenario(layers, pp, vpp, **flags))
    assert by_layout.scenario.stage_layers == by_split.scenario.stage_layers
    assert by_layout.summary["step_time_s"] == pytest.approx(by_split.summary["step_time_s"], rel=1e-12)


def test_a_stage_that_holds_nothing_passes_the_activations_on():
    empty = sim3d.simulate(_scenario(3, pp=4, pipeline_layout="Et|t||tL"))
    assert empty.scenario.stage_layers == (1, 1, 0, 1)
    sends = empty.trace[empty.trace["kind"] == "SEND_F"]
    assert sorted(set(sends["stage"])) == [0, 1, 2]  # the empty stage 2 sends on what it received
    fuller = sim3d.simulate(_scenario(4, pp=4, pipeline_layout="Et|t|t|tL"))
    shorter = sim3d.simulate(_scenario(3, pp=3, pipeline_layout="Et|t|tL"))
    # less work than four layers, one hop and one stage's bubble more than three on three ranks
    assert shorter.summary["step_time_s"] < empty.summary["step_time_s"] < fuller.summary["step_time_s"]


def test_a_layout_that_unrolls_without_end_is_refused():
    with pytest.raises((ScenarioError, ValueError), match="unrolls to over"):
        scenario_from_dict(_scenario(4, pp=4, pipeline_layout="Et*99999999999|L")).stage_layers


@pytest.mark.parametrize("layout, vpp, extra, words", [
    ("Et|(tt|)*6,t|L", 2, {}, "not a multiple of pp=4"),
    ("Et|t|t|tL", 2, {}, "make vpp=1"),
    ("Et|t|t|t", 1, {}, "the loss (L) closes the last"),
    ("tE|t|t|tL", 1, {}, "the embedding (E) opens the first stage"),
    ("Et|t|t|ttL", 1, {}, "5 transformer layers"),
    ("Et|t|t|tmL", 1, {}, "but model.mtp_layers is 0"),
    ("Et|t|t|tL", 1, dict(decoder_first_pipeline_num_layers=1), "drop decoder_first_pipeline_num_layers"),
])
def test_layouts_megatron_would_refuse_are_refused(layout, vpp, extra, words):
    with pytest.raises((ScenarioError, ValueError), match=words.replace("(", r"\(").replace(")", r"\)")):
        s = scenario_from_dict(_scenario(4, pp=4, vpp=vpp, pipeline_layout=layout, **extra))
        s.stage_layers


def test_v_schedules_place_stages_their_own_way():
    with pytest.raises((ScenarioError, ValueError), match="places stages in a V"):
        scenario_from_dict(_scenario(6, pp=4, vpp=2, schedule="zbv", pipeline_layout="Et|t|t|t|t|t||L"))


def test_the_layout_goes_out_and_comes_back_as_megatron_arguments():
    s = scenario_from_dict(_scenario(18, pp=4, vpp=2, pipeline_layout="E|t*4|tttt|ttt|ttt|tt|tt|L"))
    args = [str(a) for a in to_megatron_args(s)]
    assert args[args.index("--pipeline-model-parallel-layout") + 1] == "E|t*4|tttt|ttt|ttt|tt|tt|L"
    assert "--num-layers-per-virtual-pipeline-stage" not in args  # Megatron refuses both
    back = from_megatron(args, name="back", gpu="h100-sxm", gpus=4, gpus_per_node=4)
    assert back.unmapped == []
    t = scenario_from_dict(back.scenario)
    assert (t.vpp, t.stage_layers, t.schedule) == (2, s.stage_layers, "interleaved-1f1b")


def test_the_planner_searches_the_layouts_stage_count():
    """A layout of 7 layers over 4 stages: the planner's pipelines are the ways pp x vpp make
    those 4 stages (7 is prime: no even split would give it one), each with the layout's split."""
    from sim3d.studies.space import Space
    base = scenario_from_dict(_scenario(7, pp=4, vpp=1, pipeline_layout="Et|tt|tt|ttL"))
    layouts, _ = Space(base, 4, {}).layouts()
    assert {(layout.pp, layout.vpp) for layout in layouts if layout.pp > 1} == {(4, 1), (2, 2)}

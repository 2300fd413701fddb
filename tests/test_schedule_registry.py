"""A schedule is one registered `ScheduleSpec` (sim3d/schedule/specs.py): a toy schedule
defined in this file alone runs through the scenario checks, the schedule proof, the
simulator, the planner and the executor; and every registered spec answers every rule."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim3d import simulate
from sim3d.cli.app import app
from sim3d.scenario.megatron_export import SCHEDULE_ELSEWHERE
from sim3d.scenario.torchtitan import pytorch_schedules
from sim3d.schedule import GENERATORS, ScheduleConstraint, build, prove
from sim3d.schedule.specs import (BUBBLE_RULES, CHUNKS, PLACEMENTS, SCHEDULES, ScheduleSpec, planned_schedules,
                                  register_spec, schedule_spec, unregister_spec)
from sim3d.studies.plan import plan
from sim3d.studies.space import parse_choices

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "scenarios" / "tiny.yaml"
TOY = "toy-1f1b"


def toy_generator(pp: int, m: int, vpp: int = 1):
    """1F1B's action lists under another name: the simplest schedule that is not built in."""
    return dataclasses.replace(build("1f1b", pp, m, vpp), name=TOY)


@pytest.fixture
def toy():
    spec = register_spec(ScheduleSpec(TOY, toy_generator, "loop", "one", split_backward=False, steady_inflight=True,
                                      bubble_rule="fill-drain", p2p_per_chunk=False, blocking_sends=True))
    yield spec
    unregister_spec(TOY)
    assert TOY not in SCHEDULES and TOY not in GENERATORS


def _pp2(*extra):
    return ["parallel.pp=2", "cluster.gpus_per_node=2", f"schedule={TOY}", *extra]


def test_the_toy_validates_and_its_schedule_is_proved(toy):
    result = CliRunner().invoke(app, ["validate", str(TINY), "--json", *[f"--set={o}" for o in _pp2()]])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["schedule"] == TOY and report["pp"] == 2
    # 1F1B's in-flight bound: rank r holds at most pp - r micro-batches
    assert report["peak_inflight"] == [2, 1]


def test_the_toy_is_refused_with_its_own_layout_rule(toy):
    result = CliRunner().invoke(app, ["validate", str(TINY), *[f"--set={o}" for o in _pp2("parallel.vpp=2")]])
    assert result.exit_code != 0
    assert f"schedule {TOY} runs one chunk per rank, got vpp=2" in result.output


def test_the_toy_simulates_as_the_1f1b_it_copies(toy):
    sets = ["parallel.pp=2", "cluster.gpus_per_node=2"]
    mine = simulate(str(TINY), sets=sets + [f"schedule={TOY}"])
    theirs = simulate(str(TINY), sets=sets + ["schedule=1f1b"])
    assert mine.step_time == theirs.step_time


def test_the_planner_proposes_the_toy(toy, tmp_path):
    assert TOY in planned_schedules()
    choices = parse_choices(["parallel.pp=2", "parallel.tp=1", "training.micro_batch=2"],
                            [f"schedule={TOY},1f1b"])
    result = plan(TINY, 2, choices, finalists=4, workers=1)
    planned = set(result.candidates["schedule"])
    assert planned == {TOY, "1f1b"}
    best = result.finalists.groupby("schedule")["step_time_s"].min()
    assert best[TOY] == best["1f1b"]


def test_the_toy_executes_for_real(toy, monkeypatch):
    pytest.importorskip("torch")
    import multiprocessing
    from sim3d.executor import execute
    from sim3d.executor.reference import CHECK_RTOL

    # forked ranks inherit this process's registry; a forkserver's would not know the toy
    fork = multiprocessing.get_context("fork")
    monkeypatch.setattr(multiprocessing, "get_context", lambda method=None: fork)
    r = execute(str(TINY), steps=2, check=True, overrides=_pp2())
    assert r.passed, r.summary()
    assert r.check["max_rel"] <= CHECK_RTOL


def test_an_unknown_name_is_refused_with_a_suggestion():
    with pytest.raises(ScheduleConstraint, match=r"did you mean dualpipev\?"):
        schedule_spec("dualpipe")


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_every_registered_spec_answers_every_rule(name):
    spec = schedule_spec(name)
    assert spec.name == name and GENERATORS[name] is spec.generator
    assert spec.placement in PLACEMENTS and spec.chunks in CHUNKS and spec.bubble_rule in BUBBLE_RULES
    pp, m = 4, 16
    vpp = spec.default_vpp
    assert spec.accepts(pp, vpp, m), spec.layout_problems(pp, vpp, m)
    sched = build(name, pp, m, vpp)
    assert sched.stages.placement == spec.placement and sched.num_microbatches == m
    kinds = {a.kind.value for rank in sched.ranks for a in rank}
    assert ("BW" in kinds) == spec.split_backward
    wrong_vpp = 1 if vpp != 1 else 2
    assert any(p.startswith("parallel.vpp:") for p in spec.layout_problems(pp, wrong_vpp, m))
    prove(sched)
    assert (name in SCHEDULE_ELSEWHERE) == (spec.megatron_elsewhere is not None)


def test_a_half_described_spec_is_refused():
    with pytest.raises(ValueError, match="placement 'ring'"):
        ScheduleSpec("half", toy_generator, "ring", "one", split_backward=False, steady_inflight=True,
                     bubble_rule="fill-drain", p2p_per_chunk=False)


def test_pytorch_names_are_torchs_schedule_classes():
    """Each spec's `pytorch_name` is a class of torch.distributed.pipelining (torchtitan's
    pipeline_parallel_schedule spelling), which the torchtitan importer reads from the registry."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    named = pytorch_schedules()
    assert {"1F1B", "GPipe", "Interleaved1F1B"} <= set(named)
    for pytorch_name, (name, vpp) in named.items():
        assert hasattr(schedules, "Schedule" + pytorch_name), pytorch_name
        assert vpp == SCHEDULES[name].default_vpp


def test_the_planner_has_a_pipeline_time_for_every_bubble_rule():
    from sim3d.studies.estimate import PIPELINE_TIME
    assert set(PIPELINE_TIME) == set(BUBBLE_RULES)
    assert all(spec.bubble_rule in PIPELINE_TIME for spec in SCHEDULES.values())

"""Public PyTorch profiler traces that this project did not record (tests/fixtures/traces/hta/,
from facebookresearch/HolisticTraceAnalysis tests/data, MIT): `sim3d calibrate --from-trace`
classifies their kernels, writes a profile a scenario then prices from, and measures their
steps. The figures checked are what the files themselves hold (their device, NCCL version,
ranks, steps and record_param_comms sizes), not values sim3d computed before."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.costs.kineto import read_trace, read_traces
from sim3d.costs.profile import Profile
from sim3d.costs.trace_profile import step_truth

HTA = Path(__file__).resolve().parent / "fixtures" / "traces" / "hta"
A100_NCCL = HTA / "nccl_data.json.gz"  # one rank of two, A100, NCCL 2.17.1, all-reduce and broadcast kernels
SAMPLED = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]  # two ranks of a 128-rank job
PUBLIC = [A100_NCCL, *SAMPLED]


@pytest.mark.parametrize("path", PUBLIC, ids=lambda p: p.name)
def test_public_traces_are_classified_and_calibrate_a_profile(tmp_path, path):
    out = tmp_path / "profile.csv"
    made = CliRunner().invoke(app, ["calibrate", "--from-trace", str(path), "--out", str(out), "--json"])
    assert made.exit_code == 0, made.output
    provenance = json.loads(made.stdout)
    assert provenance["unclassified_share"] < 0.10  # the bound on each public fixture
    assert sum(provenance["kind_shares"].values()) == pytest.approx(1.0)
    assert len(Profile.load(out).table) == sum(provenance["rows"].values()) > 0


def test_the_a100_trace_is_read_with_its_device_nccl_and_collectives():
    trace = read_trace(A100_NCCL)
    assert (trace.device_name, trace.nccl, trace.rank, trace.world_size) == ("NVIDIA A100-PG509-200", "2.17.1", 0, 2)
    assert [s.name for s in trace.steps] == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    comms = {(k.detail, k.comm.group_size, k.comm.dtype) for k in trace.kernels if k.kind == "collective"}
    assert ("all_reduce", 2, "Float") in comms and ("broadcast", 2, "Float") in {c[:2] + (c[2],) for c in comms}
    truth = step_truth([trace])
    assert truth.kinds_s["collective"] > 0 and truth.comm_exposed_s <= truth.comm_s


def test_a_scenario_prices_its_data_parallel_all_reduce_from_the_a100_trace(tmp_path):
    out = tmp_path / "a100.csv"
    CliRunner().invoke(app, ["calibrate", "--from-trace", str(A100_NCCL), "--out", str(out)])
    profile = Profile.load(out)
    # every row is a two-rank fp32 all-reduce the trace's record_param_comms sized (4 bytes per element)
    assert set(profile.table["op"]) == {"all_reduce"} and set(profile.table["group_size"]) == {2}
    assert (profile.table["bytes"] == 4 * profile.table["numel"]).all()
    scenario = dict(name="a100-dp2", model=dict(layers=2, hidden=1024, heads=8, vocab=8192, seq_len=1024),
                    parallel=dict(dp=2), training=dict(micro_batch=1, global_batch=2, precision="bf16"),
                    cluster=dict(gpu="a100-80gb", nodes=1, gpus_per_node=2), costs=dict(profile=str(out)))
    sources = dict(sim3d.simulate(scenario).explain())
    assert sources["dp collectives"].startswith(f"profile {out}")
    assert sources["compute: GEMMs (16-bit)"].startswith("roofline")  # the trace timed no GEMM with its shape


def test_two_sampled_ranks_make_fp32_gemm_rows_an_fp32_scenario_prices_from(tmp_path):
    traces = read_traces(SAMPLED)
    assert [t.rank for t in traces] == [0, 1] and {t.world_size for t in traces} == {128}
    out = tmp_path / "sampled.csv"
    made = CliRunner().invoke(app, ["calibrate", "--from-trace", str(SAMPLED[0]), "--from-trace", str(SAMPLED[1]),
                                    "--out", str(out)])
    assert made.exit_code == 0, made.output
    table = Profile.load(out).table
    assert set(table.query("op == 'gemm'")["dtype"]) == {"fp32"}
    scenario = dict(name="fp32", model=dict(layers=2, hidden=2048, heads=16, vocab=8192, seq_len=512),
                    training=dict(micro_batch=1, global_batch=1, precision="fp32"),
                    cluster=dict(gpu="a100-80gb", nodes=1, gpus_per_node=1), costs=dict(profile=str(out)))
    sources = dict(sim3d.simulate(scenario).explain())
    assert sources["compute: GEMMs (16-bit)"].startswith(f"profile {out}")


def test_a_folder_stands_for_the_traces_in_it(tmp_path):
    ranks = tmp_path / "traces"
    ranks.mkdir()
    for path in SAMPLED:
        (ranks / path.name).write_bytes(path.read_bytes())
    (ranks / "notes.txt").write_text("not a trace")
    runner = CliRunner()
    made = runner.invoke(app, ["calibrate", "--from-trace", str(ranks), "--out", str(tmp_path / "p.csv"), "--json"])
    assert made.exit_code == 0, made.output
    assert [t["rank"] for t in json.loads(made.stdout)["traces"]] == [0, 1]
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = runner.invoke(app, ["calibrate", "--from-trace", str(empty), "--out", str(tmp_path / "q.csv")])
    assert refused.exit_code == 2 and "no profiler trace" in refused.stderr

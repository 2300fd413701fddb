"""`sweep --zip KEY,KEY`: values that go together are paired, not crossed (issue 34 item 4),
and the pairing is part of the study a resume must match."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.errors import ScenarioError
from sim3d.studies.sweep import grid_shape, parse_grid, parse_zip, points

cli = CliRunner()
GRID = ["--grid", "schedule=1f1b,interleaved-1f1b", "--grid", "parallel.vpp=1,2"]
ZIP = ["--zip", "schedule,parallel.vpp"]


@pytest.fixture
def two_stages(tmp_path):
    """tiny.yaml on two pipeline ranks, where interleaving (vpp=2) is possible."""
    path = tmp_path / "pp2.yaml"
    path.write_text("name: pp2\nmodel: {layers: 4, hidden: 64, heads: 4, vocab: 256, seq_len: 32}\n"
                    "parallel: {tp: 1, pp: 2, dp: 1}\n"
                    "training: {micro_batch: 2, global_batch: 8, recompute: none, precision: fp32}\n"
                    "schedule: 1f1b\ncluster: {gpu: a100-80gb, nodes: 1, gpus_per_node: 2}\n")
    return path


def sweep(scenario, out, *extra):
    return cli.invoke(app, ["sweep", str(scenario), "--out", str(out), "--workers", "1", *extra],
                      catch_exceptions=False)


def test_zipped_keys_are_one_axis_of_pairs():
    zips = parse_zip(["schedule,parallel.virtual_pipeline_model_parallel_size"])  # aliases resolve
    assert zips == [["schedule", "parallel.vpp"]]
    grid = parse_grid(["schedule=1f1b,interleaved-1f1b,zbv", "training.micro_batch=1,2", "parallel.vpp=1,2,2"], zips)
    found = points(grid, zips)
    assert len(found) == 6  # 3 pairs x 2 micro-batch sizes, not 3 x 2 x 3
    assert {(p["schedule"], p["parallel.vpp"]) for p in found} == {("1f1b", "1"), ("interleaved-1f1b", "2"),
                                                                  ("zbv", "2")}
    assert all(list(p) == list(grid) for p in found)  # keys in the grid's order, as labels always were
    assert grid_shape(grid, zips) == "3 schedule+parallel.vpp x 2 training.micro_batch"
    # without a zip nothing changes: the cartesian product, in the same order as before
    plain = parse_grid(["a.b=1,2", "c.d=x,y"])
    assert points(plain) == [{"a.b": "1", "c.d": "x"}, {"a.b": "1", "c.d": "y"},
                             {"a.b": "2", "c.d": "x"}, {"a.b": "2", "c.d": "y"}]


@pytest.mark.parametrize("grid, zips, message", [
    (["schedule=1f1b,interleaved-1f1b", "parallel.vpp=1,2,3"], ["schedule,parallel.vpp"],
     "got 2 for schedule, 3 for parallel.vpp"),
    (["schedule=1f1b,interleaved-1f1b", "parallel.vpp=1,2"], ["schedule,parallel.pp"], "not a --grid key"),
    (["schedule=1f1b,1f1b", "parallel.vpp=1,1"], ["schedule,parallel.vpp"], "(1f1b, 1) are given twice"),
    (["schedule=1f1b,zbv", "parallel.vpp=1,2"], ["schedule"], "expected KEY,KEY"),
    (["schedule=1f1b,zbv", "parallel.vpp=1,2"], ["schedule,parallel.vpp", "parallel.vpp,schedule"], "zipped twice"),
])
def test_a_bad_zip_is_one_line_of_bad_input(grid, zips, message):
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_grid(grid, parse_zip(zips))


def test_sweep_runs_the_pairs_only(two_stages, tmp_path):
    result = sweep(two_stages, tmp_path / "out", *GRID, *ZIP)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "out" / "results.csv", dtype=str, keep_default_na=False)
    assert sorted(zip(table["schedule"], table["parallel.vpp"])) == [("1f1b", "1"), ("interleaved-1f1b", "2")]
    assert (table["error"] == "").all()  # the crossed pairs (1f1b with vpp 2, ...) are never run
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["zip"] == [["schedule", "parallel.vpp"]]
    bad = sweep(two_stages, tmp_path / "bad", "--grid", "schedule=1f1b,zbv", "--grid", "parallel.vpp=1", *ZIP)
    assert bad.exit_code == 2 and "got 2 for schedule, 1 for parallel.vpp" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_resume_refuses_another_zip(two_stages, tmp_path):
    out = tmp_path / "out"
    assert sweep(two_stages, out, *GRID, *ZIP).exit_code == 0
    before = (out / "results.csv").read_bytes()
    crossed = sweep(two_stages, out, *GRID, "--resume")  # the same grid crossed would add the failing pairs
    assert crossed.exit_code == 2 and "zip was [['schedule', 'parallel.vpp']]" in crossed.stderr
    assert (out / "results.csv").read_bytes() == before
    assert sweep(two_stages, out, *GRID, *ZIP, "--resume").exit_code == 0
    assert (out / "results.csv").read_bytes() == before  # nothing left to run
    # and a crossed sweep cannot be resumed as a zipped one
    plain = tmp_path / "plain"
    grid = ["--grid", "schedule=1f1b", "--grid", "training.micro_batch=1,2"]
    assert sweep(two_stages, plain, *grid).exit_code == 0
    zipped = sweep(two_stages, plain, *grid[:2], "--grid", "training.micro_batch=1", "--zip",
                   "schedule,training.micro_batch", "--resume")
    assert zipped.exit_code == 2 and "zip was None" in zipped.stderr


def test_a_record_from_before_zip_resumes_without_one(two_stages, tmp_path):
    out = tmp_path / "out"
    grid = ["--grid", "training.micro_batch=1,2"]
    assert sweep(two_stages, out, *grid).exit_code == 0
    record = json.loads((out / "sweep.json").read_text())
    del record["zip"]  # as sim3d wrote it before --zip existed
    (out / "sweep.json").write_text(json.dumps(record))
    assert sweep(two_stages, out, "--grid", "training.micro_batch=1,2,4", "--resume").exit_code == 0

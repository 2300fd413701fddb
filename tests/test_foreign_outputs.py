"""Issue 49, item 2 and its rule: a command never replaces a file in its output folder that
sim3d did not write (sim3d/util/ownership.py): the folder's manifest lists sim3d's files, and
committed reports, which have none, are known by their own first bytes. `--force` replaces."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.util.ownership import MARKS, written_by_sim3d

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "scenarios" / "tiny.yaml")
runner = CliRunner()
# every fixed-name output, as a committed report holds it (no manifest: it is not committed)
COMMITTED = {
    "summary.json": "reports/gpt3-175b", "trace.csv": "reports/gpt3-175b", "trace.json": "reports/gpt3-175b",
    "trace.parquet": "reports/gpt3-175b", "links.csv": "reports/gpt3-175b", "schedule.csv": "reports/gpt3-175b",
    "candidates.csv": "reports/llama3.1-8b-plan-8", "finalists.csv": "reports/llama3.1-8b-plan-8",
    "goodput.csv": "reports/llama3.1-405b-goodput", "rules.json": "reports/rules-of-thumb",
    "index.md": "reports/rules-of-thumb",
}
USERS = {".json": '{"step": 1.5, "note": "my own"}\n', ".csv": "step,seconds\n1,2.5\n", ".md": "# My notes\n",
         ".parquet": "PAR1 not sim3d's", ".png": "\x89PNG drawn by hand"}


def test_every_marked_name_has_a_committed_example():
    assert set(MARKS) - {"samples.csv", "scenario.yaml", "trace.json.gz"} == set(COMMITTED)


def test_a_gzipped_trace_is_known_without_a_manifest(tmp_path):
    """The review's find: a --trace json.gz folder whose manifest was lost refused its own trace."""
    folder = tmp_path / "gz"
    assert runner.invoke(app, ["run", TINY, "--no-plots", "--trace", "json.gz", "--out", str(folder)]).exit_code == 0
    (folder / "manifest.json").unlink()
    assert written_by_sim3d(folder / "trace.json.gz")
    import gzip
    (folder / "trace.json.gz").write_bytes(gzip.compress(b'{"mine": 1}'))
    assert not written_by_sim3d(folder / "trace.json.gz")


def test_the_executors_scenario_is_known_by_its_comment(tmp_path):
    from sim3d.executor.launch import scenario_yaml
    from sim3d.scenario.load import load_scenario
    (tmp_path / "scenario.yaml").write_text(scenario_yaml(load_scenario(TINY)))
    assert written_by_sim3d(tmp_path / "scenario.yaml")
    (tmp_path / "scenario.yaml").write_text("name: mine\n")
    assert not written_by_sim3d(tmp_path / "scenario.yaml")


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_sim3d_outputs_are_told_from_a_users_files_of_the_same_name(tmp_path, name):
    ours = tmp_path / "ours" / name
    ours.parent.mkdir()
    shutil.copyfile(ROOT / COMMITTED[name] / name, ours)
    assert written_by_sim3d(ours)
    mine = tmp_path / "mine" / name
    mine.parent.mkdir()
    mine.write_text(USERS[Path(name).suffix])
    assert not written_by_sim3d(mine)


def test_a_name_the_manifest_lists_is_sim3ds(tmp_path):
    (tmp_path / "links.csv").write_text("a,b\n")
    assert not written_by_sim3d(tmp_path / "links.csv")
    (tmp_path / "manifest.json").write_text('{"files": [{"name": "links.csv", "bytes": 4, "mtime_ns": 0}]}')
    assert written_by_sim3d(tmp_path / "links.csv")


def test_run_leaves_a_users_file_alone_and_writes_nothing(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "links.csv").write_text(USERS[".csv"])
    ran = runner.invoke(app, ["run", TINY, "--no-plots", "--out", str(folder)])
    assert ran.exit_code == 2 and "links.csv: exists and is not a file sim3d wrote" in ran.stderr, ran.output
    assert (folder / "links.csv").read_text() == USERS[".csv"]
    assert not (folder / "summary.json").exists()  # refused before any output was replaced
    forced = runner.invoke(app, ["run", TINY, "--no-plots", "--out", str(folder), "--force"])
    assert forced.exit_code == 0 and (folder / "links.csv").read_text().startswith("src,dst,kind")


def test_run_replaces_a_committed_report_with_no_manifest(tmp_path):
    """A fresh clone's reports/gpt3-175b/: the README's flagship command writes over it."""
    folder = tmp_path / "gpt3-175b"
    shutil.copytree(ROOT / "reports" / "gpt3-175b", folder, ignore=shutil.ignore_patterns("manifest.json"))
    ran = runner.invoke(app, ["run", TINY, "--out", str(folder)])
    assert ran.exit_code == 0, ran.output
    assert '"name": "tiny"' in (folder / "summary.json").read_text()


@pytest.mark.parametrize("command, name", [
    (["goodput", TINY, "--no-plots"], "goodput.csv"),
    (["plan", TINY, "--no-plots"], "candidates.csv"),
    (["run", TINY, "--samples", "4", "--no-plots"], "samples.csv"),
    (["sweep", TINY, "--grid", "training.micro_batch=1"], "sweep.png"),
    (["execute", TINY], "scenario.yaml"),
])
def test_other_commands_refuse_too(tmp_path, command, name):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / name).write_text(USERS[".csv"])
    ran = runner.invoke(app, [*command, "--out", str(folder)])
    assert ran.exit_code == 2 and f"{name}: exists and is not a file sim3d wrote" in ran.stderr, ran.output
    assert (folder / name).read_text() == USERS[".csv"]


def test_no_output_replaces_an_input_even_forced(tmp_path):
    """Hostile re-run, defect A: a profile named links.csv, a scenario named summary.json, in the
    output folder, were replaced with --force."""
    folder = tmp_path / "out"
    folder.mkdir()
    profile = folder / "links.csv"
    shutil.copyfile(ROOT / "calibrate" / "profiles" / "cpu-amd-epyc.csv", profile)
    before = profile.read_bytes()
    ran = runner.invoke(app, ["run", TINY, "--set", f"costs.profile={profile}", "--out", str(folder), "--force",
                              "--no-plots"])
    assert ran.exit_code == 2 and "is an input of this command" in ran.stderr, ran.output
    assert profile.read_bytes() == before
    scenario = folder / "summary.json"
    shutil.copyfile(TINY, scenario)
    ran = runner.invoke(app, ["run", str(scenario), "--out", str(folder), "--force", "--no-plots"])
    assert ran.exit_code == 2 and "is an input of this command" in ran.stderr, ran.output


def test_execute_never_rewrites_the_scenario_it_reads(tmp_path):
    """Defect B: `execute FOLDER/scenario.yaml --out FOLDER` replaced the scenario it ran."""
    folder = tmp_path / "e"
    assert runner.invoke(app, ["execute", TINY, "--out", str(folder)]).exit_code == 0
    scenario = folder / "scenario.yaml"
    before = scenario.read_bytes()
    ran = runner.invoke(app, ["execute", str(scenario), "--set", "parallel.dp=2", "--out", str(folder)])
    assert ran.exit_code == 2 and "is an input of this command" in ran.stderr, ran.output
    assert scenario.read_bytes() == before


def test_a_measured_trace_is_not_replaced_by_a_simulated_one(tmp_path):
    """Defect C: `run` into an executed run's folder replaced its measured trace.csv silently."""
    folder = tmp_path / "e"
    assert runner.invoke(app, ["execute", TINY, "--out", str(folder)]).exit_code == 0
    measured = (folder / "trace.csv").read_bytes()
    ran = runner.invoke(app, ["run", TINY, "--out", str(folder), "--no-plots"])
    assert ran.exit_code == 2 and "was measured by `sim3d execute`" in ran.stderr, ran.output
    assert (folder / "trace.csv").read_bytes() == measured
    assert runner.invoke(app, ["execute", TINY, "--out", str(folder)]).exit_code == 0  # its own command may

"""The command line as a user meets it: outputs, JSON keys, exit codes, studies."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.analysis.summary import SUMMARY_KEYS

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_schedule_table_and_bubble_line():
    result = invoke("schedule", "1f1b", "--pp", 4, "--microbatches", 8)
    assert result.exit_code == 0
    assert "rank 0: F0 F1 F2 F3 B0 F4 B1" in result.stdout
    assert "bubble: 27.3%" in result.stdout


def test_schedule_rejects_impossible_interleaving():
    result = invoke("schedule", "interleaved-1f1b", "--pp", 4, "--microbatches", 6)
    assert result.exit_code == 2
    assert "multiple of pp" in result.stderr


def test_run_json_has_every_summary_key(tmp_path):
    result = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--json", "--no-plots", "--out", tmp_path)
    assert result.exit_code == 0
    summary = json.loads(result.stdout)
    assert set(SUMMARY_KEYS) <= set(summary)
    assert summary["num_gpus"] == 32 and summary["num_microbatches"] == 8
    assert 0 < summary["mfu"] < 1 and summary["step_time_s"] > 0
    assert summary["hardware_tflops_per_gpu"] >= summary["model_tflops_per_gpu"]


def test_run_writes_trace_and_plots(tmp_path):
    result = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--out", tmp_path, "--set", "parallel.vpp=2",
                    "--set", "schedule=interleaved-1f1b")
    assert result.exit_code == 0, result.stderr
    for name in ("summary.json", "links.csv", "trace.csv", "trace.json", "gantt.png", "memory.png", "links.png",
                 "schedule.csv"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert not (tmp_path / "gantt.pdf").exists()  # PDF on request (--pdf): it doubles the plotting time
    trace = pd.read_csv(tmp_path / "trace.csv")
    assert list(trace.columns) == ["rank", "stage", "chunk", "microbatch", "kind", "stream", "start_s", "end_s",
                                   "bytes", "peer"]
    assert set(trace.chunk[trace.kind == "F"]) == {0, 1}
    chrome = json.loads((tmp_path / "trace.json").read_text())
    assert any(e.get("ph") == "X" for e in chrome["traceEvents"])
    busiest = json.loads((tmp_path / "summary.json").read_text())["busiest_links"]
    links = pd.read_csv(tmp_path / "links.csv")
    assert [(b["src"], b["dst"]) for b in busiest] == list(zip(links.src[:8], links.dst[:8]))


def test_run_trace_formats_and_pdf(tmp_path):
    import gzip
    result = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--out", tmp_path / "gz", "--trace", "json.gz", "--pdf")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(gzip.open(tmp_path / "gz" / "trace.json.gz", "rt").read())
    assert any(e.get("ph") == "X" for e in doc["traceEvents"])
    assert (tmp_path / "gz" / "gantt.pdf").stat().st_size > 0 and not (tmp_path / "gz" / "trace.json").exists()
    result = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--out", tmp_path / "none", "--trace", "none",
                    "--no-plots")
    assert result.exit_code == 0 and not list((tmp_path / "none").glob("trace.json*"))
    assert (tmp_path / "none" / "trace.csv").exists()
    bad = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--out", tmp_path / "bad", "--trace", "xml")
    assert bad.exit_code == 2 and "json.gz" in bad.stderr


def test_run_explain_names_sources(tmp_path):
    result = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--explain", "--no-plots", "--out", tmp_path)
    assert result.exit_code == 0
    assert "roofline" in result.stdout and "where each cost comes from" in result.stdout


def test_validate_prints_layout_and_memory():
    result = invoke("validate", ROOT / "scenarios" / "gpt3.yaml")
    assert result.exit_code == 0
    for text in ("tp=8 pp=16 dp=8", "1024", "192 per step", "6 (96 layers over 16 stages)", "fits"):
        assert text in result.stdout


def test_validate_175b_on_one_gpu_does_not_fit():
    result = invoke("validate", ROOT / "scenarios" / "gpt3.yaml", "--set", "parallel.tp=1", "--set", "parallel.pp=1",
                    "--set", "parallel.dp=1", "--set", "cluster.nodes=1", "--set", "cluster.gpus_per_node=1")
    assert result.exit_code == 0
    assert "does not fit" in result.stdout and "weights+grads+optimizer alone" in result.stdout


def test_sweep_writes_results_and_resumes(tmp_path):
    args = ["sweep", ROOT / "scenarios" / "mesh-32.yaml", "--grid", "cluster.inter_node.nic_gbps=100,400",
            "--out", tmp_path, "--workers", 1]
    assert invoke(*args).exit_code == 0
    table = pd.read_csv(tmp_path / "results.csv")
    assert len(table) == 2 and (tmp_path / "sweep.png").exists()
    slow, fast = table.sort_values("cluster.inter_node.nic_gbps").step_time_s
    assert fast <= slow  # a faster network never makes the step slower
    assert invoke(*args).exit_code == 2  # refuses to overwrite
    args[3] = "cluster.inter_node.nic_gbps=100,400,800"
    assert invoke(*args, "--resume").exit_code == 0
    assert len(pd.read_csv(tmp_path / "results.csv")) == 3


def test_a_sweep_over_null_and_a_value_plots_both(tmp_path):
    """null (the default) is a grid value like any other: both points run and are drawn."""
    result = invoke("sweep", ROOT / "scenarios" / "tiny.yaml", "--grid", "model.ffn_hidden=null,512",
                    "--out", tmp_path, "--workers", 1)
    assert result.exit_code == 0, result.stderr
    assert len(pd.read_csv(tmp_path / "results.csv")) == 2 and (tmp_path / "sweep.png").exists()
    from sim3d.report.sweep_plot import _numbers_first  # its x axis: numbers in order, null last, text a-z
    values = pd.Series(["null", "1024", "512"])
    assert values.sort_values(key=_numbers_first, na_position="last").tolist() == ["512", "1024", "null"]
    assert pd.Series(["zbv", "1f1b"]).sort_values(key=_numbers_first).tolist() == ["1f1b", "zbv"]


def test_plan_ranks_layouts_that_fit(tmp_path):
    result = invoke("plan", ROOT / "scenarios" / "gpt-1.3b.yaml", "--gpus", 8, "--top", 3, "--workers", 1,
                    "--finalists", 6, "--out", tmp_path)
    assert result.exit_code == 0, result.stderr
    assert "best layouts" in result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("│ 1 ")]
    assert lines


@pytest.mark.parametrize("scenario", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_every_scenario_runs(scenario, tmp_path):
    result = invoke("run", scenario, "--json", "--no-plots", "--out", tmp_path)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["step_time_s"] > 0


def test_every_result_command_prints_only_json_with_json(tmp_path):
    tiny = ROOT / "scenarios" / "tiny.yaml"
    assert invoke("run", tiny, "--json", "--no-plots", "--out", tmp_path / "a").exit_code == 0
    commands = {
        "validate": ["validate", tiny],
        "schedule": ["schedule", "1f1b", "--pp", 4, "-m", 8],
        "plan": ["plan", tiny, "--gpus", 2, "--workers", 1, "--out", tmp_path / "plan"],
        "sweep": ["sweep", tiny, "--grid", "training.micro_batch=1,2", "--out", tmp_path / "sweep", "--workers", 1],
        "execute": ["execute", tiny, "--steps", 1, "--out", tmp_path / "exec"],
        "compare": ["compare", tmp_path / "a", tmp_path / "a"],
    }
    parsed = {}
    for name, args in commands.items():
        result = invoke(*args, "--json")
        assert result.exit_code == 0, (name, result.output)
        parsed[name] = json.loads(result.stdout)  # nothing but JSON on stdout
    assert parsed["schedule"]["bubble_fraction"] == pytest.approx(3 / 11)  # (p-1)/(m+p-1)
    assert parsed["validate"]["num_actions"] > 0 and parsed["validate"]["fits_in_memory"]
    assert parsed["plan"]["ranked"][0]["step_time_s"] > 0
    assert len(parsed["sweep"]) == 2 and parsed["compare"]["step_rel_err"] == 0
    assert len(parsed["execute"]["losses"]) == 1


def test_commands_that_need_torch_say_how_to_get_it():
    """torch is an extra (sim3d[executor]): without it, execute says what to install (exit 2)
    while the simulator keeps working."""
    code = ("import sys; sys.modules['torch'] = None; from sim3d.cli.app import app; "
            "import sim3d; sim3d.simulate('scenarios/tiny.yaml'); app(['execute', 'scenarios/tiny.yaml'])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "pip install 'sim3d[executor]'" in result.stderr


def test_shell_completion_completes_commands():
    """`sim3d --install-completion` installs what this exercises: the shell asks the command
    itself (click's protocol) and gets the matching commands back."""
    import os
    script = Path(sys.executable).parent / "sim3d"
    env = dict(os.environ, _SIM3D_COMPLETE="complete_bash", COMP_WORDS="sim3d imp", COMP_CWORD="1")
    result = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.split() == ["import"]
    env.update(COMP_WORDS="sim3d import ", COMP_CWORD="2")
    result = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert set(result.stdout.split()) == {"megatron", "nemo", "torchtitan"}


def test_piped_messages_stay_one_line_each(tmp_path):
    """A line that names a long path is one record when piped (it used to wrap at 120 columns,
    splitting `wrote ... to` from the folder)."""
    folder = tmp_path / ("a-rather-long-folder-name-for-the-outputs-of-this-run" * 2)
    result = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--no-plots", "--out", folder)
    assert result.exit_code == 0, result.stderr
    wrote = [line for line in result.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1 and wrote[0].endswith(f"to {folder}/")


def test_gantt_for_papers_sizes_and_windows(tmp_path):
    from PIL import Image
    result = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--out", tmp_path / "col", "--gantt-size", "column",
                    "--gantt-window", "0,0.01")
    assert result.exit_code == 0, result.stderr
    width_in = Image.open(tmp_path / "col" / "gantt.png").size[0] / 200  # plot_gantt saves at 200 dpi
    assert abs(width_in - 3.5) < 0.2  # an IEEE column
    for option, value, word in (("--gantt-size", "poster", "column"), ("--gantt-window", "5,1", "START < END"),
                                ("--gantt-window", "a,b", "START,END"), ("--gantt-window", "0,inf", "finite"),
                                ("--gantt-window", "0,1e-6", "narrower than the 10 us")):
        bad = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--out", tmp_path / "bad", option, value)
        assert bad.exit_code == 2 and word in bad.stderr, (option, value, bad.stderr)
    late = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--out", tmp_path / "late", "--gantt-window", "100,200")
    assert late.exit_code == 2 and "after the step ends" in late.stderr
    result = invoke("schedule", "1f1b", "--pp", "4", "-m", "8", "--gantt", tmp_path / "s.png", "--gantt-size", "page")
    assert result.exit_code == 0, result.stderr


def test_gantt_ranks_are_checked_against_what_was_simulated(tmp_path):
    ok = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--out", tmp_path / "a", "--gantt-ranks", "0,8")
    assert ok.exit_code == 0, ok.stderr
    folded = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--out", tmp_path / "b", "--gantt-ranks", "1")
    assert folded.exit_code == 2 and "--full-fidelity" in folded.stderr
    bad = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--out", tmp_path / "c", "--gantt-ranks", "x")
    assert bad.exit_code == 2 and "global ranks" in bad.stderr
    # at full fidelity a rank folded into its twin (here every rank but one pipeline's) is drawn as the twin
    every = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--out", tmp_path / "d", "--full-fidelity",
                   "--gantt-ranks", "1,31")
    assert every.exit_code == 0, every.stderr


def test_bad_input_leaves_no_plotting_process_behind(tmp_path):
    """A scenario that does not load leaves no process behind and no output folder."""
    import multiprocessing
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: {layers: 0}\n")
    result = invoke("run", bad, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "model" in result.stderr
    assert multiprocessing.active_children() == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("path", ["no-such.yaml", "."])
def test_a_scenario_path_that_is_no_file_is_refused_before_the_plotting_process_starts(path, monkeypatch):
    """`sim3d run` forks its plotting process early; a mistyped path must not pay for it."""
    from sim3d.report import outputs
    monkeypatch.setattr(outputs, "start_plotting", lambda: pytest.fail("the plotting process was started"))
    result = invoke("run", path)
    assert result.exit_code == 2 and ("no such scenario file" in result.output or "is a folder" in result.output)

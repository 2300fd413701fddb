"""Hostile and careless input (issue 12): every message literal, every refusal a clear exit 2,
nothing written outside the chosen folder, nothing expanded without bound."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_messages_are_literal_text_not_markup(tmp_path):
    # A gloo timeout message carries "[/...]"; a pip hint carries "ray[default]".
    missing = tmp_path / "[/bold] pip install 'ray[default]'.yaml"
    result = invoke("validate", missing)
    assert result.exit_code == 2
    assert "[/bold] pip install 'ray[default]'.yaml: no such scenario file" in result.stderr


TINY = (ROOT / "scenarios" / "tiny.yaml").read_text()


def scenario_file(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return path


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("text, expected", [
    (BOMB + TINY, "alias bomb"),                       # 10^9 values once expanded
    ("loop: &l [*l]\n" + TINY, "self-referential"),
    (TINY + "name: twice\nname: again\n", "duplicate key 'name'"),
    (b"model:\n  layers: \xff\xfe\n", "not UTF-8"),
    (TINY.replace("tp: 1", "tp: true"), "parallel.tp"),                 # not silently 1
    (TINY.replace("layers: 4", "layers: 4.5"), "model.layers"),          # not silently 4
    (TINY.replace("nodes: 1,", "nodes: 1, hbm_gib: .nan,"), "cluster.hbm_gib"),
])
def test_hostile_yaml_is_refused_with_exit_2(tmp_path, text, expected):
    result = invoke("validate", scenario_file(tmp_path, text))
    assert result.exit_code == 2, result.output
    assert expected in result.stderr


def test_override_alias_bomb_and_non_finite_values_are_refused(tmp_path):
    path = scenario_file(tmp_path, TINY)
    result = invoke("validate", path, "--set", "model.layers=&a [*a]")
    assert result.exit_code == 2 and "self-referential" in result.stderr
    result = invoke("validate", path, "--set", "cluster.inter_node.nic_gbps=.inf")
    assert result.exit_code == 2 and "cluster.inter_node.nic_gbps" in result.stderr


def test_a_dict_that_contains_itself_is_bad_input():
    import sim3d
    from sim3d.scenario.load import ScenarioError
    raw = {"model": {}}
    raw["model"]["self"] = raw
    with pytest.raises(ScenarioError, match="contains itself"):
        sim3d.simulate(raw)


@pytest.mark.parametrize("override", ["cluster.inter_node.nic_gbps=1e-300", "cluster.bf16_tflops=1e-300",
                                      "cluster.hbm_tbps=1e-300", "cluster.intra_node.latency_us=1e300"])
def test_divisors_outside_any_physical_range_are_refused(tmp_path, override):
    result = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--json", "--no-plots", "--out", tmp_path,
                    "--set", override)
    assert result.exit_code == 2, result.stdout[:300]
    assert override.partition("=")[0] in result.stderr and not (tmp_path / "summary.json").exists()


def test_exponent_numbers_read_as_numbers_as_in_yaml_1_2(tmp_path):
    result = invoke("run", ROOT / "scenarios" / "mesh-32.yaml", "--json", "--no-plots", "--out", tmp_path,
                    "--set", "cluster.inter_node.nic_gbps=4e2")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["step_time_s"] > 0


# ---- output folders and files (classes 3, 7, 9) ----------------------------------------------

@pytest.mark.parametrize("name", ["../../../escaped", "/tmp/sim3d-absolute-escape", "a/../../b", ".hidden"])  # "": refused (test_scenario)
def test_scenario_name_never_leaves_reports(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    path = scenario_file(tmp_path, TINY.replace("name: tiny", f"name: {name!r}"))
    result = invoke("run", path, "--no-plots")
    assert result.exit_code == 0, result.stderr
    written = [p for p in tmp_path.rglob("summary.json")]
    assert len(written) == 1
    folder = written[0].parent
    assert folder.parent == tmp_path / "reports" and folder.name and not folder.name.startswith(".")
    assert not Path("/tmp/sim3d-absolute-escape").exists()


def test_out_that_is_a_file_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for args in (["run", ROOT / "scenarios" / "tiny.yaml", "--out", blocker],
                 ["run", ROOT / "scenarios" / "tiny.yaml", "--out", blocker / "sub"],
                 ["execute", ROOT / "scenarios" / "tiny.yaml", "--out", blocker],
                 ["schedule", "1f1b", "--pp", 2, "-m", 4, "--csv", blocker / "s.csv"],
                 ["calibrate", "--quick", "--out", blocker / "p.csv"]):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert str(blocker) in result.stderr


@pytest.mark.parametrize("args", [["schedule", "1f1b", "--pp", 2, "-m", 4, "--gantt", "x.txt"],
                                  ["calibrate", "--quick", "--out", "profile.txt"]])
def test_output_formats_are_checked_before_work(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    result = invoke(*args)
    assert result.exit_code == 2
    assert "expected a file ending in" in result.stderr
    assert not list(tmp_path.iterdir())


def test_compare_refuses_malformed_and_unrelated_traces(tmp_path):
    garbage = scenario_file(tmp_path, b"\xff\xfe\x00\x01", "garbage.csv")
    columns = scenario_file(tmp_path, "a,b\n1,2\n", "columns.csv")
    for sets, folder in ((["parallel.pp=2"], "a"), (["parallel.pp=4", "model.layers=8"], "b")):
        args = ["run", ROOT / "scenarios" / "tiny.yaml", "--no-plots", "--json", "--out", tmp_path / folder]
        assert invoke(*args, *[x for s in sets for x in ("--set", s)],
                      "--set", f"cluster.gpus_per_node={sets[0][-1]}").exit_code == 0
    for a, b in ((garbage, tmp_path / "a"), (columns, tmp_path / "a")):
        result = invoke("compare", a, b)
        assert result.exit_code == 2 and "not a trace CSV" in result.stderr
    result = invoke("compare", tmp_path / "a", tmp_path / "b")
    assert result.exit_code == 2 and "not of the same layout" in result.stderr
    assert invoke("compare", tmp_path / "a", tmp_path / "a").exit_code == 0


def test_profile_with_non_finite_seconds_is_refused(tmp_path):
    import pandas as pd
    table = pd.read_csv(ROOT / "calibrate" / "profiles" / "cpu-amd-epyc.csv", dtype=str, keep_default_na=False)
    table.loc[0, "seconds"] = "inf"
    bad = tmp_path / "inf.csv"
    table.to_csv(bad, index=False)
    result = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--no-plots", "--out", tmp_path / "o",
                    "--set", f"costs.profile={bad}")
    assert result.exit_code == 2 and "finite" in result.stderr


def test_a_profile_of_another_device_is_named_not_silently_applied(tmp_path):
    """A CPU profile or another GPU's on an A100 scenario: the run warns with both devices; a
    profile whose dtypes price nothing says so; `validate` reads the profile as `run` does."""
    profiles, gpt3 = ROOT / "calibrate" / "profiles", ROOT / "scenarios" / "gpt3.yaml"
    cases = [(profiles / "cpu-amd-epyc.csv", [], "measured on a CPU (AMD EPYC), so its times are not cluster.gpu "
                                                "a100-80gb's"),
             (profiles / "h100-sxm5-80gb.csv", ["--set", "training.precision=bf16"], "measured on NVIDIA H100 80GB "
                                                 "HBM3 (preset h100-sxm), so its times are not cluster.gpu a100-80gb's"),
             (profiles / "h100-sxm5-80gb.csv", ["--set", "training.precision=fp16"], "priced none of this scenario")]
    for profile, sets, words in cases:
        result = invoke("run", gpt3, "--json", "--no-plots", "--trace", "none", "--out", tmp_path / "o", *sets,
                        "--set", f"costs.profile={profile}")
        assert result.exit_code == 0 and any(words in w for w in json.loads(result.stdout)["warnings"]), words
    checked = invoke("validate", gpt3, "--json", "--set", f"costs.profile={profiles / 'cpu-amd-epyc.csv'}")
    assert any("measured on a CPU" in w for w in json.loads(checked.stdout)["warnings"])
    bad = invoke("validate", gpt3, "--set", "costs.profile=/etc/passwd")
    assert bad.exit_code == 2 and "not a readable profile CSV" in bad.stderr


# ---- executor refusals (class 5, 7) ---------------------------------------------------------

@pytest.mark.parametrize("args, expected", [
    ([ROOT / "scenarios" / "gpt3.yaml"], "local processes; the limit is"),
    ([ROOT / "scenarios" / "tiny.yaml", "--backend", "nccl"], "needs a GPU per rank"),
    ([ROOT / "scenarios" / "tiny.yaml", "--set", "training.precision=fp8", "--set", "cluster.gpu=h100-sxm"],
     "torchao.float8"),
])
def test_execute_refusals_are_bad_input(tmp_path, args, expected):
    result = invoke("execute", *args, "--out", tmp_path)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr


def test_execute_refuses_more_memory_than_the_machine_has(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM3D_MAX_LOCAL_PROCESSES", "100000")
    result = invoke("execute", ROOT / "scenarios" / "gpt3.yaml", "--out", tmp_path)
    assert result.exit_code == 2 and "GiB available" in result.stderr


# ---- work limits (class 5) --------------------------------------------------------------------

@pytest.mark.parametrize("args, expected", [
    (["validate", ROOT / "scenarios" / "gpt3.yaml", "--set", "model.layers=100000"], "SIM3D_MAX_LAYERS"),
    (["validate", ROOT / "scenarios" / "gpt3.yaml", "--set", "training.global_batch=8000000"], "SIM3D_MAX_ACTIONS"),
    (["validate", ROOT / "scenarios" / "gpt3.yaml", "--set", "cluster.nodes=1000000",
      "--set", "parallel.dp=null"], "SIM3D_MAX_GPUS"),
    (["schedule", "1f1b", "--pp", 1000, "-m", 100000], "700,003,000 schedule actions"),
])
def test_unreasonable_work_is_refused_at_once_with_the_estimate(args, expected):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and "raise it on purpose" in result.stderr


def test_full_fidelity_counts_the_ranks_it_replays_and_the_limit_can_be_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM3D_MAX_ACTIONS", "500")
    args = ["run", ROOT / "scenarios" / "mesh-32.yaml", "--json", "--no-plots", "--out", tmp_path]
    assert invoke(*args).exit_code == 0  # folded: one pipeline
    assert invoke(*args, "--full-fidelity").exit_code == 0  # no fault: every pipeline is a twin of one
    args += ["--set", "faults=[{straggler: {rank: 1, slowdown: 1.5}}]"]  # its pipeline replayed rank by rank
    result = invoke(*args, "--full-fidelity")
    assert result.exit_code == 2 and "full fidelity" in result.stderr
    monkeypatch.setenv("SIM3D_MAX_ACTIONS", "1e6")
    assert invoke(*args, "--full-fidelity").exit_code == 0


def test_run_strict_exits_2_when_the_layout_does_not_fit(tmp_path):
    args = ["run", ROOT / "scenarios" / "tiny.yaml", "--no-plots", "--out", tmp_path, "--set", "cluster.hbm_gib=0.5"]
    assert invoke(*args).exit_code == 0  # a result, with the verdict in it
    result = invoke(*args, "--strict")
    assert result.exit_code == 2 and "does not fit" in result.stderr
    assert (tmp_path / "summary.json").exists()


def test_plan_refuses_more_gpus_than_the_limit():
    result = invoke("plan", ROOT / "scenarios" / "gpt3.yaml", "--gpus", 10**12)
    assert result.exit_code == 2 and "SIM3D_MAX_GPUS" in result.stderr


# ---- second hostile pass (a helper's 190 inputs) ----------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("\x00name: x\n" + TINY, "malformed YAML"),                 # the reader's control-character error
    (TINY + "? [a, b]\n: 1\n", "a key must be a name"),           # a complex key, unhashable
    (TINY.replace("seq_len: 32}", "seq_len: 32, swiglu: banana}"), "swiglu must be true or false"),
])
def test_second_pass_yaml_and_flags(tmp_path, text, expected):
    result = invoke("validate", scenario_file(tmp_path, text))
    assert result.exit_code == 2, result.output
    assert expected in result.stderr


def test_a_ray_backend_without_ray_is_refused(tmp_path, monkeypatch):
    """`.[dev]` installs Ray; a machine without it is refused before any work."""
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "ray" else real(name, *rest))
    result = invoke("sweep", ROOT / "scenarios" / "tiny.yaml", "--grid", "training.micro_batch=1,2", "--backend", "ray",
                    "--out", tmp_path / "out")
    assert result.exit_code == 2 and "Ray is not installed" in result.stderr, result.output


@pytest.mark.parametrize("args, expected", [
    (["execute", ROOT / "scenarios" / "tiny.yaml", "--set", "parallel=5"], "parallel"),
    (["execute", ROOT / "scenarios" / "tiny.yaml", "--steps", 1, "--set", "model.seq_len=16384"],
     "GiB of activations"),
    (["execute", ROOT / "scenarios" / "tiny.yaml", "--steps", 10**9], "SIM3D_MAX_EXECUTOR_STEPS"),
    (["sweep", ROOT / "scenarios" / "tiny.yaml", "--grid", "training.micro_batch=1,2",
      "--grid", "training.micro_batch_size=4"], "training.micro_batch given twice"),
    (["sweep", ROOT / "scenarios" / "tiny.yaml", "--grid", "cluster.inter_node.nic_gbps=" + ",".join(map(str, range(1, 200))),
      "--grid", "training.micro_batch=" + ",".join(map(str, range(1, 200)))], "SIM3D_MAX_SWEEP_POINTS"),
    (["calibrate", "--device", "cuda", "--quick"], "no CUDA GPU"),
    (["plan", ROOT / "scenarios" / "tiny.yaml", "--gpus", 7], "no valid layout of this model on 7 GPUs"),
    (["plan", ROOT / "scenarios" / "tiny.yaml", "--gpus", 8, "--fix", "parallel.tp=3"],
     "--fix parallel.tp=3 does not divide 8 GPUs"),
    (["run", ROOT / "scenarios" / "tiny.yaml", "--out", ""], "name a folder"),
    (["validate", ROOT / "scenarios"], "is a folder"),
    (["validate", ROOT / "scenarios" / "tiny.yaml", "--set", "cluster.gpu=H100-SXM"], "did you mean h100-sxm"),
])
def test_second_pass_commands_refuse_with_exit_2(tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    if args[0] in ("execute", "sweep"):
        args = [*args, "--out", tmp_path / "out"]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    if args[0] == "run":
        assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("column, value", [("start_s", "inf"), ("end_s", "-5"), ("rank", "-1"),
                                           ("rank", "99999999999999999999999")])
def test_compare_refuses_impossible_trace_values(tmp_path, column, value):
    import pandas as pd
    assert invoke("run", ROOT / "scenarios" / "tiny.yaml", "--no-plots", "--out", tmp_path / "a").exit_code == 0
    table = pd.read_csv(tmp_path / "a" / "trace.csv", dtype=str, keep_default_na=False)
    table.loc[0, column] = value
    table.to_csv(tmp_path / "bad.csv", index=False)
    result = invoke("compare", tmp_path / "a", tmp_path / "bad.csv")
    assert result.exit_code == 2 and "bad.csv" in result.stderr


def test_profile_seconds_beyond_an_hour_are_refused(tmp_path):
    import pandas as pd
    table = pd.read_csv(ROOT / "calibrate" / "profiles" / "cpu-amd-epyc.csv", dtype=str, keep_default_na=False)
    table["seconds"] = "1e305"
    table.to_csv(tmp_path / "huge.csv", index=False)
    result = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--json", "--out", tmp_path / "o",
                    "--set", f"costs.profile={tmp_path / 'huge.csv'}")
    assert result.exit_code == 2 and "below 3600" in result.stderr


def test_version_and_small_memory_notes_keep_their_digits(tmp_path):
    from sim3d import __version__
    assert invoke("--version").stdout.strip() == f"sim3d {__version__}"
    result = invoke("run", ROOT / "scenarios" / "tiny.yaml", "--json", "--no-plots", "--out", tmp_path,
                    "--set", "cluster.hbm_gib=0.001")
    note = json.loads(result.stdout)["memory_note"]
    assert "> 0.001 GiB" in note and " 0 GiB" not in note


def test_an_override_that_changes_nothing_says_so(tmp_path):
    args = ["run", ROOT / "scenarios" / "tiny.yaml", "--json", "--no-plots", "--out", tmp_path]
    plain = json.loads(invoke(*args).stdout)
    fp32 = json.loads(invoke(*args, "--set", "cluster.fp32_tflops=0.001").stdout)
    tf32 = json.loads(invoke(*args, "--set", "cluster.tf32_tflops=0.001").stdout)
    assert fp32["step_time_s"] == plain["step_time_s"] < tf32["step_time_s"]
    assert any("cluster.fp32_tflops changes nothing" in w for w in fp32["warnings"])


def test_a_large_document_without_aliases_is_not_called_an_alias_bomb():
    """16,384 fault entries were refused as 'an alias bomb?' though the file had no alias."""
    from sim3d.scenario.safe_yaml import UnboundedYaml, read_yaml_text
    many = "faults:\n" + "".join(f"  - {{straggler: {{rank: {i}, slowdown: 1.1}}}}\n" for i in range(16384))
    with pytest.raises(UnboundedYaml) as refused:
        read_yaml_text(many)
    assert "alias" not in str(refused.value) and "holds more than" in str(refused.value)
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(6))
    with pytest.raises(UnboundedYaml, match="alias bomb"):
        read_yaml_text(bomb)

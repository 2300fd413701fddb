"""Hostile and careless input (issue 12): every message literal, every refusal a clear exit 2,
nothing written outside the chosen folder, nothing expanded without bound."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim3d.cli import app

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
    from sim3d.scenario import ScenarioError
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

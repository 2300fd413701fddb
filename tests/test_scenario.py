"""Scenario loading: defaults, derived values, aliases, overrides, and readable errors."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.scenario.load import ScenarioError, load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
GPT3 = yaml.safe_load((ROOT / "scenarios" / "gpt3.yaml").read_text())


def test_gpt3_derived_layout():
    s = load_scenario(ROOT / "scenarios" / "gpt3.yaml")
    assert (s.tp, s.pp, s.dp, s.num_gpus, s.num_microbatches) == (8, 16, 8, 1024, 192)
    assert set(s.stage_layers) == {6}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_shipped_scenario_validates(path):
    load_scenario(path)


def test_dp_is_derived_from_the_cluster():
    raw = copy.deepcopy(GPT3)
    del raw["parallel"]["dp"]
    assert scenario_from_dict(raw).dp == 8


def test_megatron_aliases_and_overrides():
    raw = copy.deepcopy(GPT3)
    raw["model"] = {"num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96, "padded_vocab_size": 51200,
                    "seq_length": 2048}
    raw["parallel"] = {"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 16}
    raw["training"] = {"micro_batch_size": 1, "global_batch_size": 1536}
    s = scenario_from_dict(raw, ["parallel.tp=4", "parallel.pp=32", "training.recompute=selective"])
    assert (s.tp, s.pp, s.dp, s.training.recompute) == (4, 32, 8, "selective")


def test_uneven_layers_are_spread_over_middle_stages():
    raw = copy.deepcopy(GPT3)
    raw["model"]["layers"] = 98
    s = scenario_from_dict(raw)
    assert sum(s.stage_layers) == 98 and s.stage_layers[0] == 6 and s.stage_layers[-1] == 6
    assert any("do not split evenly" in w for w in s.warnings())


def test_tp_beyond_a_node_is_allowed_with_a_warning():
    s = scenario_from_dict(GPT3, ["parallel.tp=16", "parallel.pp=8"])
    assert any("exceeds the 8 GPUs of an NVLink domain" in w for w in s.warnings())


def _mutated(path: str, value):
    raw = copy.deepcopy(GPT3)
    node = raw
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return raw


DELETE = object()
BAD = [  # (field path, value, text the message must contain)
    ("model.hidden", 12289, "model.hidden: 12289 is not divisible by model.heads=96"),
    ("model.heads", 95, "model.hidden"),
    ("parallel.tp", 7, "parallel.tp: model.heads=96 is not divisible by tp=7"),
    ("model.kv_heads", 4, "parallel.tp: model.kv_heads=4 is not divisible by tp=8"),
    ("model.layers", 8, "parallel.pp: pp=16 * vpp=1 = 16 stages exceeds 8 layers"),
    ("training.global_batch", 1004, "training.global_batch: 1004 is not divisible by micro_batch*dp"),
    ("parallel.dp", 4, "tp*pp*dp*cp = 8*16*4*1 = 512"),
    ("parallel.tp", -2, "parallel.tp"),
    ("parallel.tp", 0, "parallel.tp"),
    ("cluster.gpu", "h100", "did you mean h100-sxm?"),
    ("model.hiden", 12288, "model.hiden: unknown key (did you mean hidden?)"),
    ("training.recompute", "partial", "training.recompute"),
    ("schedule", "1f1b-interleaved", "schedule: unknown schedule"),
    ("parallel.vpp", 2, "parallel.vpp: schedule 1f1b runs one chunk per rank"),
    ("parallel.ep", 2, "parallel.ep: ep=2 needs an MoE model"),
    ("model.moe", {"experts": 6, "top_k": 2}, "parallel.ep"),
    ("training.precision", "fp8", "training.precision: fp8 needs fp8 tensor cores"),
    ("model.seq_len", "long", "model.seq_len"),
    ("training.global_batch", DELETE, "training.global_batch: required but missing"),
    ("parallel.order", "tp-dp-pp", "parallel.order"),
    ("faults", [{"straggler": {"rank": 5000, "slowdown": 2}}], "faults.0.straggler.rank: 5000"),
    ("parallel.cp", 3, "parallel"),
    ("schedule", "interleaved-1f1b", "parallel.vpp: interleaved-1f1b interleaves vpp > 1 chunks per rank, got vpp=1"),
    ("model.moe", {"experts": 8, "top_k": 2, "expert_ffn_hidden": 12},
     "parallel.etp: the experts' ffn hidden size 12 is not divisible by etp=8"),
    ("model.moe", {"experts": 8, "top_k": 2, "shared_expert_ffn": 12},
     "parallel.tp: model.moe.shared_expert_ffn=12 is not divisible by tp=8"),
]


@pytest.mark.parametrize("path,value,message", BAD, ids=[b[0] + "=" + str(b[1])[:12] for b in BAD])
def test_bad_scenarios_name_the_field(path, value, message):
    raw = _mutated(path, value)
    if path == "model.moe":
        raw["parallel"]["ep"] = 4
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(raw)
    assert message in str(err.value)


def test_interleaved_needs_microbatches_divisible_by_pp():
    raw = _mutated("schedule", "interleaved-1f1b")
    raw["parallel"]["vpp"] = 2
    raw["training"]["global_batch"] = 8 * 20  # 20 micro-batches, pp 16
    with pytest.raises(ScenarioError, match="interleaved-1f1b needs num_microbatches % pp == 0, got 20"):
        scenario_from_dict(raw)


def test_sequence_parallelism_needs_whole_sequence_slices():
    """Megatron splits each micro-batch's sequence (each context-parallel chunk's) over the
    tensor-parallel ranks: seq 2052 over cp 2 leaves 1026 tokens a chunk, not a multiple of tp 8."""
    raw = _mutated("parallel.sequence_parallel", True)
    raw["model"]["seq_len"] = 2052
    raw["parallel"]["cp"], raw["parallel"]["dp"], raw["cluster"]["nodes"] = 2, 4, 128
    with pytest.raises(ScenarioError, match=r"model.seq_len=2052 is not divisible by cp\*tp = 2\*8"):
        scenario_from_dict(raw)
    raw["model"]["seq_len"] = 2048
    scenario_from_dict(raw)


def test_malformed_yaml_names_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel:\n  layers: [1, 2\n  hidden: 3\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: line \d+, column \d+: malformed YAML"):
        load_scenario(bad)


def test_missing_file():
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario("does/not/exist.yaml")


def test_bad_override_syntax():
    with pytest.raises(ScenarioError, match="expected KEY=VALUE"):
        scenario_from_dict(GPT3, ["parallel.tp"])


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "sim3d.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.parametrize("path,value,message", BAD[:16], ids=[b[0] for b in BAD[:16]])
def test_cli_exits_2_without_traceback(tmp_path, path, value, message):
    raw = _mutated(path, value)
    if path == "model.moe":
        raw["parallel"]["ep"] = 4
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(raw))
    proc = _cli("validate", str(f))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert message.split(":")[0] in proc.stderr


def test_cli_missing_file_and_bad_yaml(tmp_path):
    proc = _cli("run", "nope.yaml")
    assert proc.returncode == 2 and "no such scenario file" in proc.stderr and "Traceback" not in proc.stderr
    bad = tmp_path / "b.yaml"
    bad.write_text("model: {layers: 2\n")
    proc = _cli("validate", str(bad))
    assert proc.returncode == 2 and "line" in proc.stderr and "Traceback" not in proc.stderr


def test_import_sim3d_does_not_import_torch():
    code = "import sys, sim3d, sim3d.cli.app, sim3d.engine, sim3d.analysis.summary; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr


@pytest.mark.parametrize("written", ["010", "0x8", "1:30"])
def test_integers_in_yaml_11_only_forms_are_refused(tmp_path, written):
    """YAML 1.1 reads tp: 010 as 8 (octal), 0x8 as 8, 1:30 as 90 (base 60): refused, not guessed."""
    path = tmp_path / "s.yaml"
    path.write_text(f"name: t\nparallel: {{tp: {written}}}\n")
    with pytest.raises(ScenarioError, match=f"'{written}' is a number only in YAML 1.1"):
        load_scenario(path)


@pytest.mark.parametrize("name", ["evil\x1b[31mred", "two\nlines", "bell\x07"])
def test_a_name_with_a_control_character_is_refused(name, tmp_path):
    """The name titles every table and figure: an escape sequence there would reach the terminal."""
    path = tmp_path / "s.yaml"
    text = (ROOT / "scenarios" / "tiny.yaml").read_text().replace("name: tiny", f"name: {name!r}".replace("'", '"'))
    path.write_text(text)
    done = CliRunner().invoke(app, ["validate", str(path)])
    assert done.exit_code == 2 and "control character" in done.output


@pytest.mark.parametrize("name", ["..", "/", ".", " ", ""])
def test_a_name_that_names_no_folder_is_refused(name):
    """They all mapped, silently, to reports/scenario/."""
    from sim3d.scenario import ScenarioError, scenario_from_dict
    raw = {"name": name, "model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 64},
           "training": {"micro_batch": 1, "global_batch": 1}, "cluster": {"gpu": "a100-80gb", "nodes": 1,
                                                                         "gpus_per_node": 1}}
    with pytest.raises(ScenarioError, match="no letter or digit"):
        scenario_from_dict(raw)
    assert scenario_from_dict({**raw, "name": "run-2"}).name == "run-2"

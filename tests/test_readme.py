"""The README shows what its commands print today, and the committed reports are what those
commands write: every block is rerun (docs/generate.py) in a copy of the repository."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_generate", ROOT / "docs" / "generate.py")
generate = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = generate  # dataclasses look their module up there
spec.loader.exec_module(generate)


@pytest.fixture(scope="module")
def rerun(tmp_path_factory):
    copy = tmp_path_factory.mktemp("readme") / "repo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__",
                                                              ".hypothesis", ".pytest_cache"))
    text = (ROOT / "README.md").read_text()
    _, changed = generate.regenerate(text, copy, log=lambda _: None)
    return copy, changed


def test_every_readme_block_is_what_its_command_prints(rerun):
    _, changed = rerun
    assert changed == [], f"stale README blocks (python docs/generate.py rewrites them): {changed}"


@pytest.mark.parametrize("name", generate.COMMITTED)
def test_committed_reports_are_what_the_readme_commands_write(rerun, name):
    copy, _ = rerun
    fresh, committed = copy / name, ROOT / name
    assert committed.is_file(), f"{name} is not committed (python docs/generate.py writes it)"
    if name.endswith("summary.json"):
        a, b = json.loads(fresh.read_text()), json.loads(committed.read_text())
        for key in generate.WALL_KEYS:
            a.pop(key), b.pop(key)
        assert a == b
    elif name in generate.UNORDERED:
        a, b = fresh.read_text().splitlines(), committed.read_text().splitlines()
        assert a[0] == b[0] and sorted(a[1:]) == sorted(b[1:]), f"{name} differs from a fresh run"
    else:
        assert fresh.read_bytes() == committed.read_bytes(), f"{name} differs from a fresh run"


def test_the_readme_is_a_manual_of_readable_length():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 500
    assert generate.blocks(text), "no generated blocks found"


def test_masking_allows_the_clock_and_nothing_else():
    assert generate.masked("24,080 actions in 0.40 s") == generate.masked("24,080 actions in 0.07 s")
    assert generate.masked("estimating 1,016/s") == generate.masked("estimating 2,401/s")
    assert generate.masked("step 27.789 s") != generate.masked("step 27.790 s")


EXECUTOR_OUTPUT = """tiny: schedule 1f1b on 4 process(es), median step 125.3 ms
losses: 5.583130, 5.566050, 5.554345
check PASSED (tolerance 6.2e-02 for bf16): loss rel 1.10e-05, param abs 3.90e-03 rel 3.78e-03
"""


def test_executor_losses_agree_within_twice_the_checks_tolerance_and_no_further():
    other_cpu = EXECUTOR_OUTPUT.replace("5.583130", "5.583127").replace("125.3 ms", "131.0 ms")
    assert generate.agree(other_cpu, EXECUTOR_OUTPUT)
    within = EXECUTOR_OUTPUT.replace("5.583130", f"{5.583130 * (1 + 0.12):.6f}")  # < 2 x 6.2e-2
    assert generate.agree(within, EXECUTOR_OUTPUT)
    beyond = EXECUTOR_OUTPUT.replace("5.583130", f"{5.583130 * (1 + 0.13):.6f}")
    assert not generate.agree(beyond, EXECUTOR_OUTPUT)
    assert not generate.agree(EXECUTOR_OUTPUT.replace("losses: 5.583130, ", "losses: "), EXECUTOR_OUTPUT)
    assert not generate.agree(EXECUTOR_OUTPUT.replace("PASSED", "FAILED"), EXECUTOR_OUTPUT)


def test_round_off_is_allowed_only_on_the_executors_loss_line():
    assert not generate.agree("step 27.788 s\ncheck PASSED (tolerance 6.2e-02 for bf16): x\n",
                              "step 27.789 s\ncheck PASSED (tolerance 6.2e-02 for bf16): x\n")
    without_check = "losses: 5.583130\n"
    assert not generate.agree("losses: 5.583127\n", without_check)


def test_the_executor_block_agrees_on_another_cpu(tmp_path):
    """Another machine, emulated: ATen's portable kernels instead of this CPU's vector ones
    and one thread, which sum in another order (the losses move in their sixth digit)."""
    block = next(b for b in generate.blocks((ROOT / "README.md").read_text())
                 if b.kind == "console" and b.source.startswith("sim3d execute") and "--check" in b.source)
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    env = {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"}
    output = generate.run(block, tmp_path, extra_env=env)
    assert "check PASSED" in output
    assert generate.agree(output, block.output), output

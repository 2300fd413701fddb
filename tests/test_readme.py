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

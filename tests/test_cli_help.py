"""Help a user can read: the metavars typer prints. typer 0.27 and later print `<bool>` beside
every flag, `<list[str]>` for a repeatable option and `{SCENARIO}` for an argument, which is why
pyproject.toml caps typer below 0.27; this test fails when a typer that does so is installed."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app

COMMANDS = [[], ["run"], ["validate"], ["schedule"], ["plan"], ["sweep"], ["goodput"], ["study"], ["kernel"],
            ["execute"], ["compare"], ["calibrate"], ["import"], ["import", "megatron"], ["import", "nemo"], ["import", "torchtitan"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "sim3d")
def test_help_shows_plain_metavars(command):
    done = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "160", "NO_COLOR": "1"})
    assert done.exit_code == 0, done.output
    text = done.output
    assert "Usage:" in text
    assert not re.search(r"<(bool|list\[|int range|str|path|float)", text), text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage


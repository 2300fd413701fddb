"""Hostile and careless input (issue 12): every message literal, every refusal a clear exit 2,
nothing written outside the chosen folder, nothing expanded without bound."""

from pathlib import Path

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

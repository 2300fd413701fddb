"""Comma-separated option values: an empty item is refused with its place, never dropped
(`nic_gbps=100,,400` silently swept two points instead of the three meant)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.errors import ScenarioError
from sim3d.scenario.comma_items import comma_items

TINY = str(Path(__file__).resolve().parents[1] / "scenarios" / "tiny.yaml")
runner = CliRunner()


@pytest.mark.parametrize("text, place", [("100,,400", "item 2 of 3"), (",1", "item 1 of 2"), ("1,2,", "item 3 of 3"),
                                         ("1, ,2", "item 2 of 3"), ("1,,,2", "item 2, 3 of 4")])
def test_an_empty_item_is_named_by_its_place(text, place):
    with pytest.raises(ScenarioError, match=place):
        comma_items(text, "--grid")


def test_items_are_stripped_and_a_single_value_is_one_item():
    assert comma_items(" 1 , 2 ", "--grid") == ["1", "2"]
    assert comma_items("8", "--grid") == ["8"]


@pytest.mark.parametrize("args", [
    ["sweep", TINY, "--grid", "cluster.inter_node.nic_gbps=100,,400"],
    ["sweep", TINY, "--grid", "schedule=1f1b,zbv", "--grid", "parallel.vpp=1,2", "--zip", "schedule,,parallel.vpp"],
    ["plan", TINY, "--space", "tp=1,2,"],
    ["schedule", "--compare", "1f1b,,zbv", "--pp", "4", "-m", "8"],
])
def test_every_comma_option_refuses_an_empty_item_before_any_work(args, tmp_path):
    if args[0] == "sweep":
        args = [*args, "--out", str(tmp_path / "sweep")]
    ran = runner.invoke(app, args)
    assert ran.exit_code == 2, ran.output
    assert "is empty (two commas in a row, or one at an end)" in ran.stderr
    assert not (tmp_path / "sweep").exists()

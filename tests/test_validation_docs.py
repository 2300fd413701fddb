"""The per-row tables of docs/validation.md are what `python -m sim3d.validation FILE
--markdown` prints today (each table is the file named last before it); they had gone stale
once, showing an older model's numbers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim3d.validation.published import markdown, validate_rows

ROOT = Path(__file__).resolve().parents[1]
HEADER = "| row | metric | published | sim3d | error |"


def tables() -> list[tuple[str, str]]:
    """(validation file, the table's text) for every per-row table of docs/validation.md."""
    lines = (ROOT / "docs" / "validation.md").read_text().split("\n")
    found, named = [], None
    for i, line in enumerate(lines):
        for name in re.findall(r"validation/(\w+\.csv)", line):
            named = name
        if line == HEADER:
            end = next((j for j in range(i, len(lines)) if not lines[j].startswith("|")), len(lines))
            found.append((named, "\n".join(lines[i:end])))
    return found


def test_the_doc_has_its_three_tables():
    assert [name for name, _ in tables()] == ["published_dev.csv", "published_extra.csv", "published_fsdp_dev.csv"]


@pytest.mark.parametrize("name, table", tables(), ids=lambda v: v if str(v).endswith(".csv") else "table")
def test_each_table_is_what_the_command_prints(name, table):
    assert table == markdown(validate_rows(ROOT / "validation" / name)), (
        f"docs/validation.md's table of {name} is stale: paste `python -m sim3d.validation validation/{name} --markdown`")

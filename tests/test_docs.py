"""The README and the contributor docs name only files that exist: a move or a rename that
forgets them fails here. docs/contracts.md names every key, column and kind the code has."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
PATH = re.compile(r"(?<![\w/.-])(?:sim3d|calibrate|benchmarks|scenarios|validation)/[\w./-]*\w")


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md", "docs/contracts.md", "validation/README.md"])
def test_every_path_a_doc_names_exists(doc):
    text = (ROOT / doc).read_text()
    named = {m.group(0) for m in PATH.finditer(text) if "." in m.group(0).rsplit("/", 1)[-1] or m.group(0).endswith("/")}
    missing = sorted(p for p in named if not (ROOT / p).exists() and not (ROOT / doc).parent.joinpath(p).exists())
    assert named and not missing, f"{doc} names files that do not exist: {missing}"


def test_the_readme_links_the_contributor_docs():
    readme = (ROOT / "README.md").read_text()
    assert "docs/architecture.md" in readme and "docs/contracts.md" in readme
    assert "(contracts.md)" in (ROOT / "docs" / "architecture.md").read_text()


def _contract(section: str) -> str:
    """The text of one `## section` of docs/contracts.md."""
    text = (ROOT / "docs" / "contracts.md").read_text()
    sections = {part.split("\n", 1)[0]: part for part in text.split("\n## ")[1:]}
    assert section in sections, f"docs/contracts.md has no section {section!r}: {list(sections)}"
    return sections[section]


def _unnamed(words, text: str) -> list[str]:
    """The words `text` does not show as code (each word of a `...` span counts)."""
    shown = {word for span in re.findall(r"`([^`]+)`", text) for word in re.findall(r"\w[\w.-]*\w|\w", span)}
    return sorted({str(w) for w in words} - shown)


def _scenario_words(model: type[BaseModel], seen: set) -> set[str]:
    """Every key of the scenario format below `model`, and every value a Literal key allows."""
    if model in seen:
        return set()
    seen.add(model)
    words = set()
    for name, field in model.model_fields.items():
        words.add(name)
        pending = [field.annotation]
        while pending:
            kind = pending.pop()
            if typing.get_origin(kind) is typing.Literal:
                words.update(typing.get_args(kind))
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                words |= _scenario_words(kind, seen)
            else:
                pending += typing.get_args(kind)
    return words


def test_the_contract_names_every_scenario_key_and_choice():
    from sim3d.cluster.gpus import PRESETS as GPUS
    from sim3d.scenario.schema import Scenario
    from sim3d.scenario.variability import PRESETS as VARIABILITY
    from sim3d.schedule.specs import SCHEDULES
    words = _scenario_words(Scenario, set()) | set(SCHEDULES) | set(GPUS) | set(VARIABILITY)
    assert not _unnamed(words, _contract("Scenario file")), "scenario keys or values docs/contracts.md lacks"


def test_the_contract_names_every_summary_key_and_breakdown_part():
    from sim3d.analysis.summary import SUMMARY_KEYS
    from sim3d.engine.replay import BREAKDOWN_PARTS
    assert not _unnamed([*SUMMARY_KEYS, *BREAKDOWN_PARTS], _contract("Summary keys"))


def test_the_contract_names_every_trace_column_kind_and_stream():
    from sim3d.schedule.ir import Kind
    from sim3d.trace import STREAM_OF_KIND, TRACE_COLUMNS
    text = _contract("Trace columns")
    beyond_the_ir = set(STREAM_OF_KIND) - {k.value for k in Kind}  # the IR's own: its section
    assert not _unnamed([*TRACE_COLUMNS, *beyond_the_ir, *STREAM_OF_KIND.values()], text)
    table = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| `")]
    assert ", ".join(table).replace("`", "") == ", ".join(TRACE_COLUMNS), "the columns in their order"


def test_the_contract_names_every_action_kind_and_schedule_csv_column():
    from sim3d.schedule.ir import ALIASES, Kind, Schedule
    text = _contract("Schedule IR")
    assert not _unnamed([*(k.value for k in Kind), *ALIASES], text)
    assert f"`{','.join(Schedule.CSV_COLUMNS)}`" in text


def test_the_contract_names_every_exit_code():
    from sim3d.cli.support import EXIT_BAD_INPUT, EXIT_BUG, EXIT_ENVIRONMENT
    codes = re.findall(r"^\| (\d+) \|", _contract("Command line and exit codes"), flags=re.M)
    assert {0, EXIT_BUG, EXIT_BAD_INPUT, EXIT_ENVIRONMENT} <= set(map(int, codes))

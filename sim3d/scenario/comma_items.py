"""Comma-separated option values (`--grid KEY=1,2`, `--zip a,b`, `--space tp=1,2`,
`schedule --compare a,b`): an empty item is refused, never dropped, because `100,,400` is
more often a value left out than a stray comma."""

from __future__ import annotations

from ..errors import ScenarioError


def comma_items(text: str, option: str, given: str | None = None) -> list[str]:
    """The stripped items of `text`; ScenarioError naming `option` and what was `given` (the
    whole argument, by default `text`) if one is empty."""
    items = [item.strip() for item in text.split(",")]
    empty = [str(i + 1) for i, item in enumerate(items) if not item]
    if empty and len(items) > 1:
        raise ScenarioError(f"{option} {given or text!r}: item {', '.join(empty)} of {len(items)} is empty (two commas in a "
                            "row, or one at an end); give the value or remove the comma")
    return [item for item in items if item]

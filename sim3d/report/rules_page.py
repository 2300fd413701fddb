"""The rules-of-thumb report: one figure per rule (rules_figures.py), `index.md` summarising
every verdict with its number, conditions and figure, and `rules.json` with every case, all
written through safe_files (a temporary file renamed over its target)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..util.safe_files import write_bytes, write_with

PAGE = "index.md"
DATA = "rules.json"
DPI = 200  # a PNG at a paper's column width still prints sharp


def output_names(rule_keys) -> list[str]:
    """Every file the report can write for rules with these keys: what the command checks
    before it starts, and what a later run may remove when it no longer writes it (a PDF)."""
    return [PAGE, DATA] + [f"{key}.{ext}" for key in rule_keys for ext in ("png", "pdf")]


def write_rules_report(checks, folder: Path, size: str = "page", pdf: bool = False, quick: bool = False,
                       command: str = "sim3d study rules-of-thumb") -> list[Path]:
    """The figures, the page and the data of `checks` into `folder` (which exists and whose
    lock the caller holds). Returns the paths written."""
    import matplotlib

    from .rules_figures import rule_figure

    written = []
    for check in checks:
        fig = rule_figure(check, size)
        for ext in ("png", "pdf") if pdf else ("png",):
            with matplotlib.rc_context({"pdf.fonttype": 42}):  # text stays text, as journals ask
                written.append(write_with(folder / f"{check.key}.{ext}",
                                          lambda temp, fig=fig, ext=ext: fig.savefig(temp, dpi=DPI, format=ext)))
    written.append(write_bytes(folder / PAGE, page(checks, quick, command).encode()))
    data = {"quick": quick, "command": command, "rules": [c.as_json() for c in checks]}
    written.append(write_bytes(folder / DATA, (json.dumps(data, indent=1, default=_plain) + "\n").encode()))
    return written


def _plain(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


def page(checks, quick: bool, command: str) -> str:
    from .. import __version__
    lines = ["# Rules of thumb, checked", "",
             f"Written by `{command}` (sim3d {__version__}); every number below is rerun by that command. "
             "Each rule is tested on the cases it speaks about, simulated by sim3d (folded replay, analytical "
             "network), and set beside closed forms and the published runs in `validation/`. Nothing is fitted: "
             "every case is a shipped scenario or a published run with a few keys changed, named in its table.", ""]
    if quick:
        lines += ["**Quick run** (`--quick`): fewer sizes and models per rule, for tests; the full run is the "
                  "command without `--quick`.", ""]
    lines += ["| # | rule | number | verdict |", "|---:|---|---|---|"]
    for c in checks:
        lines.append(f"| {c.number} | [{_cell(c.title)}](#{_anchor(c)}) | {_cell(c.number_text)} | **{c.verdict}** |")
    lines += ["", "Verdicts: **holds** (the cases agree with the rule), **holds only when** (it does under the "
              "conditions given, not in general), **wrong** (it misses by the amount given).", ""]
    for c in checks:
        lines += [f"## {c.number}. {c.title}", "", f"**Rule.** {c.rule}", "",
                  f"**Verdict: {c.verdict}.** {c.conclusion}", "", f"**Conditions.** {c.conditions}", "",
                  f"**Number.** {c.number_text}.", "", f"![Rule {c.number}]({c.key}.png)", ""]
        lines += _table(c) + [""]
        lines += ["**Evidence.**", ""] + [f"- {e}" for e in c.evidence] + [""]
        if c.notes:
            lines += ["**Notes.**", ""] + [f"- {n}" for n in c.notes] + [""]
    return "\n".join(lines)


def _anchor(c) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    text = f"{c.number}. {c.title}".lower()
    return "".join(ch for ch in text if ch.isalnum() or ch in " -_").replace(" ", "-")


def _table(c) -> list[str]:
    header = "| " + " | ".join(_cell(col.label) for col in c.columns) + " |"
    rule = "|" + "|".join("---:" if _numeric(c, col.key) else "---" for col in c.columns) + "|"
    rows = ["| " + " | ".join(_value(case.get(col.key), col.fmt) for col in c.columns) + " |" for case in c.cases]
    return [header, rule] + rows


def _numeric(c, key: str) -> bool:
    return all(isinstance(case.get(key), (int, float)) and not isinstance(case.get(key), bool)
               for case in c.cases if case.get(key) is not None)


def _value(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    try:
        return _cell(fmt.format(value))
    except (ValueError, TypeError):
        return _cell(str(value))


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")

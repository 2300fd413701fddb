"""What every rule check shares: the record it returns and one helper that simulates a case
and keeps only the figures a rule reads (the bubble's closed forms are sim3d/schedule/bubble.py's).

A check never fits anything: each case is a shipped scenario, a published run read by the
validation's own row reader, or one of them with a few keys changed, and each number it
reports is sim3d's prediction, a closed form or a published value, named as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
VALIDATION = Path(__file__).resolve().parents[3] / "validation"
GIB = 2.0**30

HOLDS, HOLDS_WHEN, WRONG = "holds", "holds only when", "wrong"


@dataclass(frozen=True)
class Column:
    key: str     # the case dict's key
    label: str   # the page's column header
    fmt: str = "{}"  # how the page prints a value ("{:.1%}", "{:.2f}", ...)


@dataclass(frozen=True)
class RuleCheck:
    """One rule of thumb, checked: the cases that test it and what they say."""
    number: int
    key: str                        # the figure's file stem ("01-microbatches")
    title: str                      # the rule in a few words
    rule: str                       # the rule as tutorials teach it
    columns: tuple[Column, ...]     # the case table's columns
    cases: tuple[dict, ...]         # one dict per simulated or closed-form case
    number_text: str                # the headline number(s), in words
    value: float                    # the headline number itself (a fraction, seconds or GiB, as number_text says)
    verdict: str                    # HOLDS | HOLDS_WHEN | WRONG
    conclusion: str                 # the verdict with its numbers: by how much and when
    conditions: str                 # when it holds, when it breaks
    evidence: tuple[str, ...]       # the closed forms and published runs compared with, cited
    notes: tuple[str, ...] = field(default=())  # what the check leaves out; where sim3d itself is doubtful
    # the shares of the step the rule claims, by name (rule 3: tp, pp, dp): its figure draws them
    bands: dict[str, tuple[float, float]] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"number": self.number, "key": self.key, "title": self.title, "rule": self.rule,
                "number_text": self.number_text, "value": self.value, "verdict": self.verdict,
                "conclusion": self.conclusion, "conditions": self.conditions, "evidence": list(self.evidence),
                "notes": list(self.notes), "bands": {name: list(band) for name, band in self.bands.items()},
                "columns": [c.key for c in self.columns], "cases": list(self.cases)}


# ---- one simulated case -------------------------------------------------------------------

# one study's simulations, by scenario and overrides: rules that share a case (the flagship at
# several M for rules 1 and 2, the shipped scenarios for rules 3 and 10) simulate it once
_SEEN: dict[str, dict] = {}


def forget_cases() -> None:
    _SEEN.clear()


def simulate_case(scenario, label: str, **overrides) -> dict:
    """Simulate `scenario` (a path, dict or Scenario) with `overrides` and keep what the rules
    read: step, throughput, MFU, bubble, the breakdown as shares of the step, memory."""
    key = repr((str(scenario) if isinstance(scenario, Path) else scenario, sorted(overrides.items())))
    if key not in _SEEN:
        _SEEN[key] = _simulate(scenario, **overrides)
    return {**_SEEN[key], "case": label}


def _simulate(scenario, **overrides) -> dict:
    from ...api import simulate
    r = simulate(scenario, **overrides)
    s, summary, parts = r.scenario, r.summary, r.breakdown
    step = r.step_time
    share = {name: seconds / step for name, seconds in parts.items()}
    busy = list(r.sim.compute_busy.values())
    return {
        "gpus": s.num_gpus, "tp": s.tp, "pp": s.pp, "dp": s.dp, "cp": s.cp, "vpp": s.vpp,
        "microbatches": s.num_microbatches, "step_s": step,
        "tokens_per_s_per_gpu": summary["tokens_per_s"] / s.num_gpus,
        "mfu": summary["mfu"], "bubble": summary["bubble_fraction"],
        # exposed communication and waiting on the critical rank, as shares of its step
        "tp_share": share["tp"] + share["tp_sync"],
        "pp_share": share["pipeline_wait"] + share["pipeline_p2p"] + share["embedding_sync"],
        "dp_share": share["dp"], "cp_share": share["cp"], "ep_share": share["ep"],
        "peak_gib": r.memory.peak_gib, "fits": bool(r.memory.fits),
        # the busiest rank's compute over the least busy one's, less 1: how uneven the stages' work is
        "imbalance": max(busy) / min(busy) - 1 if min(busy) > 0 else 0.0,
    }


def published_row(csv_name: str, row_id: str) -> dict:
    """One row of validation/<csv_name>: its value, layout and source."""
    from ...validation.published import read_rows
    if csv_name not in _ROWS:
        _ROWS[csv_name] = read_rows(VALIDATION / csv_name)
    rows = _ROWS[csv_name]
    match = rows[rows.id == row_id]
    if match.empty:
        raise KeyError(f"{csv_name} has no row {row_id}")
    return match.iloc[0].to_dict()


def published_run(csv_name: str, row_id: str) -> tuple[dict, dict]:
    """A published run as the validation command reads it: (the scenario dict sim3d simulates
    for it, with the validation's documented defaults in its empty cells; the row)."""
    from ...validation.published_row import read_row
    row = published_row(csv_name, row_id)
    return read_row(row)[0], row


_ROWS: dict = {}


def pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"

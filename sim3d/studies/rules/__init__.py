"""Rules of thumb, checked (issue 38): the 3D-parallelism guidelines tutorials teach, each
tested by simulating the cases it speaks about and set beside the closed forms and published
runs the repository holds, with a verdict that says when it holds and by how much it misses.

One function per rule returns a `RuleCheck` (its cases as rows, the headline number, the
verdict and its conditions, the evidence); `run_rules` runs them all in the issue's order.
No plotting here: sim3d/report/rules_page.py draws each rule and writes the page.
"""

from __future__ import annotations

from typing import Callable

from .base import HOLDS, HOLDS_WHEN, WRONG, Column, RuleCheck, forget_cases
from .memory import gpt3_memory_rule, selective_recompute_rule
from .network import dp_ethernet_rule, parallelism_cost_rule, tp8_rule, tp_domain_rule
from .pipeline import even_split_rule, interleaving_rule, microbatches_rule
from .scaling import scaling_rule

# the order, by the key each check names its figure with (known before anything runs,
# so that a command can check its output files first)
RULES: dict[str, Callable[[bool], RuleCheck]] = {
    "01-microbatches": microbatches_rule, "02-interleaving": interleaving_rule,
    "03-parallelism-costs": parallelism_cost_rule, "04-tp-domain": tp_domain_rule, "05-dp-ethernet": dp_ethernet_rule,
    "06-tp8": tp8_rule, "07-even-split": even_split_rule, "08-selective-recompute": selective_recompute_rule,
    "09-gpt3-memory": gpt3_memory_rule, "10-scaling": scaling_rule}

__all__ = ["HOLDS", "HOLDS_WHEN", "WRONG", "Column", "RULES", "RuleCheck", "run_rules"]


def run_rules(quick: bool = False, progress: Callable[[RuleCheck], None] | None = None) -> list[RuleCheck]:
    """Every rule, checked; `quick` runs each on fewer sizes and models (its verdict may then
    rest on fewer cases). `progress(check)` is called as each rule is done."""
    forget_cases()
    checks = []
    try:
        for key, rule in RULES.items():
            checks.append(rule(quick))
            if checks[-1].key != key:
                raise AssertionError(f"{rule.__name__} names its check {checks[-1].key}, registered as {key}")
            if progress:
                progress(checks[-1])
    finally:
        forget_cases()  # a long session keeps no results it did not ask for
    return checks

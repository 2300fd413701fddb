"""The errors every layer may raise to say "this input is wrong" (or, for NonFiniteResult,
"sim3d failed"): at the root, so the lowest layers (cluster, scenario) raise them without
importing anything above themselves."""

from __future__ import annotations


class ScenarioError(ValueError):
    """Bad user input; `str()` is the message to show (one problem per line)."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class NonFiniteResult(ArithmeticError):
    """A prediction came out inf or nan. Every input is bounded (scenario/bounds.py) far below
    where the cost model's arithmetic overflows, so this is sim3d's own failure, never an
    answer and never bad input: the CLI reports it as an internal error."""

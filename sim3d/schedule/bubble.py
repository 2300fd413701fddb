"""The pipeline bubble's closed forms (reference/schedules.md section 7; Narayanan et al.
2021, section 2.2): uniform stages, free communication. The reference evaluator at unit costs
(evaluate.py) gives them back exactly; the rules-of-thumb study and its figures set them
beside simulated steps."""

from __future__ import annotations


def bubble_1f1b(p: int, m: int) -> float:
    """Idle share of a rank's step under GPipe / 1F1B with uniform stages and free
    communication: the step is (m + p - 1) slots, of which a rank computes m."""
    return (p - 1) / (m + p - 1)


def bubble_interleaved(p: int, m: int, v: int) -> float:
    """The same with v model chunks per rank (Megatron's interleaved 1F1B): the fill and
    drain shrink to (p - 1) / v of a rank's whole forward and backward."""
    return (p - 1) / (v * m + p - 1)


def microbatches_for_bubble(p: int, target: float, v: int = 1) -> int:
    """The least m with bubble_interleaved(p, m, v) <= target, i.e. v m >= (p - 1)(1 - target) / target."""
    m = max(1, int((p - 1) * (1 - target) / (target * v)) - 1)
    while bubble_interleaved(p, m, v) > target + 1e-12:  # the float of 135 * 0.1 is not 13.5 exactly
        m += 1
    return m

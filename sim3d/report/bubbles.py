"""Busy and idle time of each rank's compute stream, on trace columns (numpy only, so that
the plotting process computes a Gantt chart's bubble column without importing pandas)."""

from __future__ import annotations

import numpy as np


def busy_seconds(columns: dict, stream: str = "compute") -> dict[int, float]:
    """Length of the union of `stream` intervals per rank (overlaps counted once), for every
    rank in the columns (0.0 where the rank has no such interval)."""
    busy = {int(r): 0.0 for r in np.unique(columns["rank"])}
    pick = columns["stream"] == stream
    ranks, starts, ends = columns["rank"][pick], columns["start_s"][pick], columns["end_s"][pick]
    order = np.lexsort((starts, ranks))
    ranks, starts, ends = ranks[order], starts[order], ends[order]
    bounds = np.flatnonzero(np.diff(ranks)) + 1
    for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(ranks)]])):
        if lo == hi:
            continue
        s, e = starts[lo:hi], ends[lo:hi]
        # sorted by start, what is covered beyond this start is [start, the latest earlier
        # end], so each interval adds max(0, end - max(start, that end))
        covered = np.concatenate([[-np.inf], np.maximum.accumulate(e)[:-1]])
        busy[int(ranks[lo])] = float(np.clip(e - np.maximum(s, covered), 0.0, None).sum())
    return busy


def bubble_fractions(columns: dict) -> dict[int, float]:
    """Idle fraction of each rank's compute stream over the step span: the global [first
    start, last end] of the whole trace (all ranks, all streams), so that every rank is
    measured against the same step. A rank with no compute reports 1.0."""
    busy = busy_seconds(columns)
    if len(columns["rank"]) == 0:
        return {}
    span = float(columns["end_s"].max() - columns["start_s"].min())
    if span <= 0.0:
        return {rank: 0.0 for rank in busy}
    return {rank: max(0.0, 1.0 - b / span) for rank, b in busy.items()}

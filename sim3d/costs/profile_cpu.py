"""A CPU profile priced for the ranks that share the CPU.

`sim3d execute` runs tp*pp*dp*cp processes on one machine, one thread each; where they
outnumber its cores, or its cores are a VM's share of the host's, they slow each other down.
A CPU profile's `concurrency` rows (calibrate/concurrency.py) time the executor's own block in
n processes at once, in step as a parallel group runs; a rank's compute (kernels and whole
blocks) then costs their ratio to n = 1 at the number of ranks the scenario runs. Beyond the
largest n measured the CPU is saturated, and the slowdown grows in proportion to the ranks.
Collectives are not scaled: their rows were measured between processes already.

This prices every rank as if all computed at once, which the ranks of a tensor-, context- or
data-parallel group do; pipeline stages overlap less (a stage waits for its neighbour during
the bubble), so there it is an upper bound.
"""

from __future__ import annotations

import numpy as np


def slowdown(table, ranks: int) -> float | None:
    """How much longer a rank computes when `ranks` run at once, from the profile's
    concurrency rows (forward and backward together); None where it has none."""
    rows = table[table["kind"] == "concurrency"]
    if rows.empty:
        return None
    per = rows.groupby("group_size")["seconds"].sum()  # fwd + bwd per process count
    counts, times = per.index.to_numpy(float), per.to_numpy(float)
    if 1 not in per.index:
        return None
    ratio = times / per[1]
    if ranks >= counts[-1]:  # saturated: the same throughput shared by more ranks
        return float(ratio[-1] * ranks / counts[-1])
    return float(np.interp(ranks, counts, ratio))

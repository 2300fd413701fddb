"""How much of the card's memory the published runs that ran leave free, as sim3d predicts
them: the basis of `sim3d plan --headroom`'s default.

    python benchmarks/memory_headroom.py

Prints the distribution of (1 - predicted peak / card memory) over every row of the
validation CSVs whose run ran and whose GPU sim3d knows.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from sim3d.cluster.gpus import gpu_preset, preset_named_in
from sim3d.validation.published import read_rows, validate_rows

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    free = {}
    for path in sorted((ROOT / "validation").glob("published_*.csv")):
        gpu_of = dict(zip(read_rows(path)["id"].astype(str), read_rows(path)["gpu"]))
        for row in validate_rows(path):
            preset = preset_named_in(str(gpu_of.get(row.id, "")))
            if row.ran and row.peak_gib is not None and preset is not None:
                free[row.id] = 1 - row.peak_gib / gpu_preset(preset).hbm_gib
    shares = sorted(free.values())
    at = lambda q: shares[min(len(shares) - 1, int(q * len(shares)))]  # noqa: E731
    print(f"{len(shares)} runs that ran: free memory min {shares[0]:.1%}, 5th percentile {at(0.05):.1%}, "
          f"10th {at(0.10):.1%}, median {statistics.median(shares):.1%}")


if __name__ == "__main__":
    main()

"""Seconds matplotlib takes to draw 100 short labels on an Agg canvas (best of 5): the text
that dominates the plots `sim3d run` writes. Run it under each matplotlib to compare; the
version is printed beside the figure (pyproject.toml holds matplotlib below 3.11 for this).

    python benchmarks/plot_text.py
"""

from __future__ import annotations

import time

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def draw_seconds(labels: int = 100, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        fig = Figure(figsize=(8, 6), dpi=150)
        FigureCanvasAgg(fig)
        for i in range(labels):
            fig.text(0.01 * (i % 10), 0.01 * i, f"rank {i} stage pp={i % 8} tp=3 micro-batch 17", fontsize=8)
        start = time.perf_counter()
        fig.canvas.draw()
        best = min(best, time.perf_counter() - start)
    return best


if __name__ == "__main__":
    print(f"matplotlib {matplotlib.__version__}: 100 labels drawn in {draw_seconds():.3f} s (best of 5)")

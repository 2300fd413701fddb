"""Everything `sim3d run` writes into its output folder."""

from __future__ import annotations

import re
from pathlib import Path

from ..placement import Placement
from .summary import write_summary


def folder_name(name: str) -> str:
    """`name` as one safe path component: letters, digits and . _ + - kept, runs of anything
    else (slashes, spaces, NUL) become '-', no leading dot; empty -> 'scenario'."""
    safe = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-").lstrip(".")
    return safe[:120] or "scenario"


def rank_labels(s, ranks) -> dict[int, str]:
    placement = Placement.of(s)
    labels = {}
    for rank in ranks:
        c = placement.coords(rank)
        labels[rank] = f"pp{c['pp']} tp{c['tp']} dp{c['dp']}"  # gantt and chrome trace prefix 'rank N'
    return labels


def write_run_outputs(sim, summary: dict, folder: Path, plots: bool = True) -> list[Path]:
    from ..model.memory import memory_report
    from .trace import write_chrome_trace, write_trace_csv

    s = sim.scenario
    trace = sim.result.trace()
    labels = rank_labels(s, sorted(set(sim.result.ranks)))
    written = [folder / "summary.json", folder / "trace.csv", folder / "trace.json", folder / "schedule.csv"]
    write_summary(summary, written[0])
    write_trace_csv(trace, written[1])
    write_chrome_trace(trace, written[2], rank_labels=labels)
    written[3].write_text(sim.schedule.to_csv())
    if plots:
        from .gantt import plot_gantt
        from .memory_plot import plot_memory
        gantt = [folder / "gantt.png", folder / "gantt.pdf"]
        title = (f"{s.name}: {s.schedule}, tp{s.tp} pp{s.pp} dp{s.dp}, {s.num_microbatches} micro-batches, "
                 f"step {summary['step_time_s']:.2f} s")
        plot_gantt(trace, gantt, title=title, rank_labels=labels)
        memory = folder / "memory.png"
        plot_memory(memory_report(s, check_schedule=False), memory, title=f"{s.name}: memory per pipeline stage")
        written += gantt + [memory]
    return written

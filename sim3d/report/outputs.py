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


TRACE_FORMATS = {"json": "trace.json", "json.gz": "trace.json.gz", "none": None}


def write_run_outputs(result, folder: Path, plots: bool = True, trace_format: str = "json",
                      pdf: bool = False, gantt_size: str = "screen",
                      gantt_window: tuple[float, float] | None = None,
                      gantt_ranks: list[int] | None = None) -> list[Path]:
    """summary.json, links.csv, trace.csv (and trace.parquet when pyarrow is installed),
    schedule.csv, the Perfetto trace (`trace_format`:
    json, json.gz or none) and, with `plots`, the Gantt chart (PNG; also PDF with `pdf`), the
    memory plot and the link traffic plot of a `sim3d.Result`; `gantt_size`, `gantt_window`
    and `gantt_ranks` as `plot_gantt`'s size, window and ranks."""
    from ..trace import parquet_available, write_trace_csv, write_trace_parquet
    from .trace import write_chrome_trace

    if trace_format not in TRACE_FORMATS:
        raise ValueError(f"--trace {trace_format!r}: expected one of {', '.join(TRACE_FORMATS)}")
    s, summary, trace = result.scenario, result.summary, result.trace
    labels = rank_labels(s, sorted(set(result.sim.ranks)))
    written = [folder / "summary.json", folder / "links.csv", folder / "trace.csv", folder / "schedule.csv"]
    # the file also names the busiest link directions (all of them are in links.csv)
    busiest = result.links.head(8)
    write_summary({**summary, "busiest_links": [
        {"src": r.src, "dst": r.dst, "kind": r.kind, "bytes": float(r.bytes), "busy_fraction": float(r.busy_fraction)}
        for r in busiest.itertuples()]}, written[0])
    result.links.to_csv(written[1], index=False, float_format="%.6g")
    write_trace_csv(trace, written[2])
    written[3].write_text(result.schedule.to_csv())
    if parquet_available():  # the same table, typed and compressed, for pandas / Arrow users
        written.append(write_trace_parquet(trace, folder / "trace.parquet"))
    if TRACE_FORMATS[trace_format]:
        written.append(write_chrome_trace(trace, folder / TRACE_FORMATS[trace_format], rank_labels=labels,
                                          link_timelines=result.link_timelines()))
    if plots:
        from .gantt import plot_gantt
        from .links_plot import plot_links
        from .memory_plot import plot_memory
        gantt = [folder / "gantt.png"] + ([folder / "gantt.pdf"] if pdf else [])
        title = (f"{s.name}: {s.schedule}, tp{s.tp} pp{s.pp} dp{s.dp}, {s.num_microbatches} micro-batches, "
                 f"step {summary['step_time_s']:.2f} s")
        if gantt_ranks and result.sim.represented:  # a folded TP peer is drawn as its replayed twin
            gantt_ranks = list(dict.fromkeys(result.sim.represented.get(r, r) for r in gantt_ranks))
        plot_gantt(trace, gantt, title=title, rank_labels=labels, size=gantt_size, window=gantt_window,
                   ranks=gantt_ranks)
        memory = folder / "memory.png"
        plot_memory(result.memory, memory, title=f"{s.name}: memory per pipeline stage")
        links = folder / "links.png"
        plot_links(result.links, links, title=f"{s.name}: link traffic over one step, {s.cluster.inter_node.fabric} "
                   f"(oversubscription {s.cluster.inter_node.oversubscription:g})")
        written += gantt + [memory, links]
    return written

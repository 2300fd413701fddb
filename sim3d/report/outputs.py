"""Everything `sim3d run` writes into its output folder."""

from __future__ import annotations

import re
from pathlib import Path

from ..trace import gc_paused
from ..cluster.placement import Placement
from ..trace import trace_columns
from .beside import Beside
from .memory_plot import plain_rows
from .safe_files import refuse_unsafe, replacing, write_bytes, write_with


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


# no pandas: the plots read numpy columns, and the plotting process is on the critical path
PLOT_MODULES = ("sim3d.report.gantt", "sim3d.report.memory_plot", "sim3d.report.links_plot")
ROWS_SENT_AS_ROWS = 100_000


def run_output_names() -> frozenset[str]:
    """Every name `write_run_outputs` can write, whatever its options: the only files a later
    run may remove as stale (safe_files.record_outputs)."""
    every = planned_outputs(Path("."), plots=True, trace_format="json", pdf=True)
    return frozenset([p.name for p in every] + [name for name in TRACE_FORMATS.values() if name]
                     + ["trace.parquet"])


def planned_outputs(folder: Path, plots: bool = True, trace_format: str = "json", pdf: bool = False) -> list[Path]:
    """Every file `write_run_outputs` will write with these options, to be checked before
    any work (a link or a FIFO among them is refused then, not after the simulation)."""
    from ..trace import parquet_available
    names = ["summary.json", "links.csv", "trace.csv", "schedule.csv"]
    names += ["trace.parquet"] if parquet_available() else []
    names += [TRACE_FORMATS[trace_format]] if TRACE_FORMATS.get(trace_format) else []
    names += (["gantt.png"] + (["gantt.pdf"] if pdf else []) + ["memory.png", "links.png"]) if plots else []
    return [Path(folder) / name for name in names]


def start_plotting() -> Beside:
    """The process that will draw the plots, started now so that matplotlib's import (a
    fifth of a second) overlaps the simulation; pass it to `write_run_outputs`."""
    return Beside(preload=PLOT_MODULES)


@gc_paused()  # tables, strings and event dicts by the hundred thousand, no cycles to collect
def write_run_outputs(result, folder: Path, plots: bool = True, trace_format: str = "json",
                      pdf: bool = False, gantt_size: str = "screen",
                      gantt_window: tuple[float, float] | None = None,
                      gantt_ranks: list[int] | None = None, plotter: Beside | None = None) -> list[Path]:
    """summary.json, links.csv, trace.csv (and trace.parquet when pyarrow is installed),
    schedule.csv, the Perfetto trace (`trace_format`:
    json, json.gz or none) and, with `plots`, the Gantt chart (PNG; also PDF with `pdf`), the
    memory plot and the link traffic plot of a `sim3d.Result`; `gantt_size`, `gantt_window`
    and `gantt_ranks` as `plot_gantt`'s size, window and ranks. The plots are drawn by
    `plotter` (`start_plotting()`, started here when not given), each handed over as soon as
    its data is ready, while this process builds and writes the rest. Each file is written
    beside its target and renamed over it (safe_files): never through a link, never torn."""
    if trace_format not in TRACE_FORMATS:
        raise ValueError(f"--trace {trace_format!r}: expected one of {', '.join(TRACE_FORMATS)}")
    refuse_unsafe(planned_outputs(folder, plots, trace_format, pdf))
    s, summary = result.scenario, result.summary
    plotted = []
    if plots:
        plotter = plotter or start_plotting()
        plotted = [folder / "gantt.png"] + ([folder / "gantt.pdf"] if pdf else []) + [folder / "memory.png",
                                                                                        folder / "links.png"]
    elif plotter is not None:
        plotter.close()
    written = [folder / "summary.json", folder / "links.csv", folder / "trace.csv", folder / "schedule.csv"]
    try:
        # a rank folded into its twin ran exactly as the twin did (same work, same times): asked
        # for by name, it is drawn under its own name with its twin's rows
        twins = {r: result.sim.represented[r] for r in (gantt_ranks or ()) if r in result.sim.represented}
        labels = rank_labels(s, sorted(set(result.sim.ranks) | set(twins)))
        if plots:
            bars, hbm_gib = plain_rows(result.memory)
            plotter.submit(draw_memory, plotted[-2], bars, hbm_gib, f"{s.name}: memory per pipeline stage")
            # a folded trace goes as its rows, so that the plots need not wait for this process
            # to build the table; a large one as the table's columns (rows pickle slowly)
            rows = result.sim.rows
            if twins:
                rows = list(rows) + [row._replace(rank=r) for r, twin in twins.items() for row in rows if row[0] == twin]
            plotter.submit(draw_gantt, plotted[:-2], rows if len(rows) <= ROWS_SENT_AS_ROWS else
                           trace_columns(rows if twins else result.trace), labels,
                           f"{s.name}: {s.schedule}, tp{s.tp} pp{s.pp} dp{s.dp}, {s.num_microbatches} micro-batches, "
                           f"step {summary['step_time_s']:.2f} s",
                           dict(size=gantt_size, window=gantt_window, ranks=gantt_ranks))
        from ..trace import parquet_available, write_trace_csv, write_trace_parquet
        from ..analysis.summary import write_summary
        from .trace import write_chrome_trace
        trace = result.trace
        links = result.links
        if plots:
            plotter.submit(draw_links, plotted[-1], {name: links[name].to_numpy() for name in links.columns},
                           f"{s.name}: link traffic over one step, {s.cluster.inter_node.fabric} "
                           f"(oversubscription {s.cluster.inter_node.oversubscription:g})")
        # the file also names the busiest link directions (all of them are in links.csv)
        busiest = [{"src": r.src, "dst": r.dst, "kind": r.kind, "bytes": float(r.bytes),
                    "busy_fraction": float(r.busy_fraction)} for r in links.head(8).itertuples()]
        write_with(written[0], lambda path: write_summary({**summary, "busiest_links": busiest}, path))
        write_with(written[1], lambda path: links.to_csv(path, index=False, float_format="%.6g"))
        write_with(written[2], lambda path: write_trace_csv(trace, path))
        write_bytes(written[3], result.schedule.to_csv().encode())
        if parquet_available():  # the same table, typed and compressed, for pandas / Arrow users
            written.append(write_with(folder / "trace.parquet", lambda path: write_trace_parquet(trace, path)))
        if TRACE_FORMATS[trace_format]:
            written.append(write_with(folder / TRACE_FORMATS[trace_format], lambda path: write_chrome_trace(
                trace, path, rank_labels=labels, link_timelines=result.link_timelines())))
    except BaseException:
        if plots:
            plotter.close()
        raise
    if plots:
        plotter.wait()
    return written + plotted


# The plots, as run in the plotting process: plain data in, files out (matplotlib is imported
# there, never here).
def draw_memory(path: Path, bars, hbm_gib: float, title: str) -> None:
    from .memory_plot import plot_memory
    write_with(path, lambda temp: plot_memory(bars, temp, title=title, hbm_gib=hbm_gib))


def draw_gantt(paths: list[Path], trace, labels, title: str, options: dict) -> None:
    """The Gantt chart (PNG, and PDF when asked) of the engine's rows or the trace's columns."""
    from .gantt import plot_gantt
    with replacing(*paths) as temps:
        plot_gantt(trace, temps, title=title, rank_labels=labels, **options)


def draw_links(path: Path, links, title: str) -> None:
    from .links_plot import plot_links
    write_with(path, lambda temp: plot_links(links, temp, title=title))

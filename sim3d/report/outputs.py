"""Everything `sim3d run` writes into its output folder."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Callable

from ..cluster.placement import Placement
from ..trace import trace_columns
from ..util.gc_control import gc_paused
from ..util.safe_files import refuse_unsafe, replacing, write_bytes, write_with
from .beside import Beside
from .plot_process import start_plotting
from .memory_plot import plain_rows


def folder_name(name: str) -> str:
    """`name` as one safe path component: letters and digits (of any script), . _ + - kept, runs
    of anything else (slashes, spaces, NUL) become '-', no leading dot; empty -> 'scenario'."""
    safe = re.sub(r"[^\w.+-]+", "-", name).strip("-").lstrip(".")
    return safe[:120] or "scenario"


def rank_labels(s, ranks) -> dict[int, str]:
    placement = Placement.of(s)
    labels = {}
    for rank in ranks:
        c = placement.coords(rank)
        labels[rank] = f"pp{c['pp']} tp{c['tp']} dp{c['dp']}"  # gantt and chrome trace prefix 'rank N'
    return labels


TRACE_FORMATS = {"json": "trace.json", "json.gz": "trace.json.gz", "none": None}




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


def draw_memory_early(plotter: Beside, scenario, report) -> None:
    """Hand `plotter` the memory plot before the step is simulated: it needs the scenario's
    memory report (`memory_report(s, check_schedule=False)`, as `simulate` makes it) alone, and
    the plotting process waits for work then. It is drawn into memory; `write_run_outputs(...,
    memory_drawn=True)` writes it once the run has got that far, so a run that fails leaves
    no plot of its own behind."""
    bars, hbm_gib = plain_rows(report)
    plotter.submit(draw_memory_unwritten, bars, hbm_gib, memory_title(scenario))


def memory_title(s) -> str:
    return f"{s.name}: memory per pipeline stage"


@gc_paused()  # tables, strings and event dicts by the hundred thousand, no cycles to collect
def write_run_outputs(result, folder: Path, plots: bool = True, trace_format: str = "json",
                      pdf: bool = False, gantt_size: str = "screen", gantt_title: str | None = None,
                      gantt_window: tuple[float, float] | None = None,
                      gantt_ranks: list[int] | None = None, plotter: Beside | None = None,
                      memory_drawn: bool = False, then: Callable[[], None] | None = None) -> list[Path]:
    """summary.json, links.csv, trace.csv (and trace.parquet when pyarrow is installed),
    schedule.csv, the Perfetto trace (`trace_format`:
    json, json.gz or none) and, with `plots`, the Gantt chart (PNG; also PDF with `pdf`), the
    memory plot and the link traffic plot of a `sim3d.Result`; `gantt_size`, `gantt_window`
    and `gantt_ranks` as `plot_gantt`'s size, window and ranks; `gantt_title` replaces the
    chart's title (the scenario's name, layout and step). The plots are drawn by
    `plotter` (`start_plotting()`, started here when not given), each handed over as soon as
    its data is ready, while this process builds and writes the rest; `memory_drawn`: the
    memory plot was handed to it already (`draw_memory_early`); `then` is called once the
    Gantt chart has its data, before any file is written (the CLI prints its summary there,
    while the chart is drawn). Each file is written beside its target and renamed over it
    (safe_files): never through a link, never torn. No pandas here: the tables are numpy
    columns (`trace_columns`, `Result.link_table`)."""
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
        twins = {r: result.sim.represented[r] for r in (gantt_ranks or ()) if r in result.sim.represented}
        labels = rank_labels(s, sorted(set(result.sim.ranks) | set(twins)))
        if plots:
            if memory_drawn:
                plotter.submit(write_drawn, plotted[-2], "memory")
            else:
                bars, hbm_gib = plain_rows(result.memory)
                plotter.submit(draw_memory, plotted[-2], bars, hbm_gib, memory_title(s))
        trace = trace_columns(result.sim.rows)
        if plots:
            plotter.submit(draw_gantt, plotted[:-2], _with_twins(trace, twins), labels,
                           f"{s.name}: {s.schedule}, tp{s.tp} pp{s.pp} dp{s.dp}, {s.num_microbatches} micro-batches, "
                           f"step {summary['step_time_s']:.2f} s" if gantt_title is None else gantt_title,
                           dict(size=gantt_size, window=gantt_window, ranks=gantt_ranks,
                                always=[f.straggler.rank for f in s.faults if f.straggler]))
        if then is not None:  # the Gantt chart, the longest plot, is being drawn: the links wait for it
            then()
        from ..trace import arrow_table, parquet_available, write_trace_csv, write_trace_parquet
        from ..analysis.summary import write_summary
        from .trace import write_chrome_trace
        links = result.link_table
        if plots:
            plotter.submit(draw_links, plotted[-1], links,
                           f"{s.name}: link traffic over one step, {s.cluster.inter_node.fabric} "
                           f"(oversubscription {s.cluster.inter_node.oversubscription:g})")
        # the file also names the busiest link directions (all of them are in links.csv)
        busiest = [{"src": src, "dst": dst, "kind": kind, "bytes": float(nbytes), "busy_fraction": float(busy)}
                   for src, dst, kind, nbytes, busy in zip(*(links[c][:8].tolist() for c in (
                       "src", "dst", "kind", "bytes", "busy_fraction")))]
        write_with(written[0], lambda path: write_summary({**summary, "busiest_links": busiest}, path))
        write_bytes(written[1], links_csv(links))
        table = arrow_table(trace) if parquet_available() else None  # for the CSV and the Parquet file
        write_with(written[2], lambda path: write_trace_csv(trace, path, table))
        write_bytes(written[3], result.schedule.to_csv().encode())
        if parquet_available():  # the same table, typed and compressed, for pandas / Arrow users
            written.append(write_with(folder / "trace.parquet", lambda path: write_trace_parquet(trace, path, table)))
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


def _with_twins(trace: dict, twins: dict[int, int]) -> dict:
    """The trace's columns plus, for each rank folded into a twin and asked for by name, the
    twin's rows under the rank's own name: it ran exactly as the twin did (same work, same
    times)."""
    if not twins:
        return trace
    import numpy as np
    picks = [np.flatnonzero(trace["rank"] == twin) for twin in twins.values()]
    out = {name: np.concatenate([column] + [column[pick] for pick in picks]) for name, column in trace.items()}
    out["rank"][len(trace["rank"]):] = np.repeat(list(twins), [len(pick) for pick in picks])
    return out


def links_csv(links: dict) -> bytes:
    """links.csv of `Result.link_table`, as pandas wrote the DataFrame (QUOTE_MINIMAL labels,
    floats in %.6g), without pandas. Labels that need no quotes (the graph's names never do)
    are formatted a row at a time, twice as fast as csv.writer's cell at a time."""
    floats = [links[name].dtype.kind == "f" for name in links]
    columns = [column.tolist() for column in links.values()]
    labels = {value for column, is_float in zip(columns, floats) if not is_float for value in column} | set(links)
    if all(isinstance(label, str) and not set(label) & set(',"\r\n') for label in labels):
        row = ",".join("%.6g" if is_float else "%s" for is_float in floats)
        return "\n".join([",".join(links), *(row % values for values in zip(*columns)), ""]).encode()
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(links)
    writer.writerows([[("%.6g" % v) if is_float else v for v, is_float in zip(row, floats)] for row in zip(*columns)])
    return text.getvalue().encode()


# The plots, as run in the plotting process: plain data in, files out (matplotlib is imported
# there, never here).
_DRAWN: dict[str, bytes] = {}  # plots drawn before their files may be written (draw_memory_early)


def draw_memory(path: Path, bars, hbm_gib: float, title: str) -> None:
    from .memory_plot import plot_memory
    write_with(path, lambda temp: plot_memory(bars, temp, title=title, hbm_gib=hbm_gib))


def draw_memory_unwritten(bars, hbm_gib: float, title: str) -> None:
    from .figure import png_bytes
    from .memory_plot import DPI, memory_figure
    _DRAWN["memory"] = png_bytes(memory_figure(bars, title, hbm_gib), DPI)


def write_drawn(path: Path, key: str) -> None:
    write_bytes(path, _DRAWN.pop(key))


def draw_gantt(paths: list[Path], trace, labels, title: str, options: dict) -> None:
    """The Gantt chart (PNG, and PDF when asked) of the engine's rows or the trace's columns."""
    from .gantt import plot_gantt
    with replacing(*paths) as temps:
        plot_gantt(trace, temps, title=title, rank_labels=labels, **options)


def draw_links(path: Path, links, title: str) -> None:
    from .links_plot import plot_links
    write_with(path, lambda temp: plot_links(links, temp, title=title))

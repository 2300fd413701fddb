"""`sim3d validate` and `sim3d schedule`: a scenario's layout, a schedule's actions, no simulation."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from ..scenario.comma_items import comma_items
from .figure_options import check_size, pdf_option, size_option, title_option, with_pdf
from .support import (JSON_HELP, SET_HELP, BadInput, distinct_sets, _load, _print_json, _writable_file, out, print_whole,
                      say)

STDOUT_NAMES = ("-", "/dev/stdout")  # `--csv -`: the table on standard output instead of a file


def validate(scenario: Path = typer.Argument(..., help="Scenario YAML file."),
             set_: list[str] = typer.Option([], "--set", callback=distinct_sets, help=SET_HELP, metavar="KEY=VALUE"),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Check a scenario; print the derived layout and whether it fits in memory."""
    from ..costs.profile import profile_warnings
    from ..model.memory import memory_report
    from ..report.layout import layout_rows, layout_table
    from ..report.memory_plot import memory_table
    from ..schedule import prove
    from ..step import step_schedule

    s = _load(scenario, set_)
    warnings = s.warnings() + profile_warnings(s)  # a bad profile fails here as it would in `run`
    proof = prove(step_schedule(s))
    report = memory_report(s)
    if as_json:
        _print_json({"name": s.name, "layout": dict(layout_rows(s)), "num_gpus": s.num_gpus, "tp": s.tp, "pp": s.pp,
                     "dp": s.dp, "cp": s.cp, "ep": s.ep, "etp": s.etp, "vpp": s.vpp, "schedule": s.schedule,
                     "num_microbatches": s.num_microbatches, "num_actions": proof.num_actions,
                     "peak_inflight": list(proof.peak_inflight), "fits_in_memory": report.fits,
                     "peak_memory_gib": report.peak_gib, "memory_note": report.reason,
                     "memory_gib": [{"pp_rank": r.rank, **r.gib()} for r in report.rows],
                     "warnings": warnings})
        return
    out.print(layout_table(s))
    out.print(f"schedule {s.schedule}: {proof.num_actions:,} actions over {s.pp} pipeline ranks, proved "
              f"deadlock-free; peak in-flight micro-batches per rank {list(proof.peak_inflight)}",
              highlight=False, soft_wrap=True)
    out.print(memory_table(report.rows, s.gpu.hbm_gib))
    verdict = ("fits", "green") if report.fits else ("does not fit", "red")
    out.print(Text.assemble("memory: ", verdict, f" in {s.gpu.hbm_gib:g} GiB ({s.cluster.gpu}); {report.reason}"),
              highlight=False)
    for w in warnings:
        say("warning:", w, "yellow")


def schedule(name: Optional[str] = typer.Argument(None, help="gpipe | 1f1b | interleaved-1f1b | zb-h1 | zb-h2 | zbv | "
                                                 "dualpipev (or --compare several)."),
             pp: int = typer.Option(..., "--pp", min=1, help="Pipeline ranks."),
             microbatches: int = typer.Option(..., "--microbatches", "-m", min=1, help="Micro-batches per step."),
             vpp: Optional[int] = typer.Option(None, "--vpp", min=1, help="Chunks per rank (interleaved / V)."),
             lowered: bool = typer.Option(False, "--lowered", help="Show send/receive actions too."),
             csv_path: Optional[Path] = typer.Option(None, "--csv", help="Write the lowered schedule as CSV."),
             gantt: Optional[Path] = typer.Option(None, "--gantt", help="Draw a unit-cost Gantt (png/pdf/svg)."),
             compare: Optional[str] = typer.Option(None, "--compare", help="A,B,...: several schedules in one "
                                                   "time unit, with their bubbles and peak in-flight activations."),
             figure: Optional[Path] = typer.Option(None, "--out", help="With --compare: write the comparison "
                                                  "figure (png/pdf/svg)."),
             size: str = size_option("screen", "the --gantt or --out figure", "--gantt-size"),
             pdf: bool = pdf_option("the --gantt or --out figure as a PDF beside it"),
             title: Optional[str] = title_option("the --gantt or --out figure", "the schedules, pp and m"),
             force: bool = typer.Option(False, "--force", help="Replace a --csv, --gantt or --out file that "
                                        "sim3d did not write."),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Print a schedule's per-rank action table and its unit-cost bubble (F=1, B=2), or compare several."""
    from ..scenario.limits import check_schedule_size
    from ..schedule import build, lower
    from ..schedule import prove
    from ..schedule.evaluate import evaluate, uniform_costs

    if compare is None and figure is not None:
        raise BadInput("--out is the --compare figure; one schedule's Gantt chart is --gantt")
    check_size(size)
    if not (gantt if compare is None else figure) and (size != "screen" or pdf or title is not None):
        raise BadInput("--size, --pdf and --title shape a figure: draw one with --gantt FILE (or --compare with "
                       "--out FILE)")
    if compare is not None:
        if name is not None:
            raise BadInput(f"--compare names the schedules; drop NAME ({name}) or add it to the list")
        if lowered or csv_path or gantt:
            raise BadInput("--lowered, --csv and --gantt show one schedule; --compare draws its figure with --out")
        _compare(compare, pp, microbatches, vpp, figure, as_json, size, pdf, title, force)
        return
    if name is None:
        raise BadInput("name a schedule (e.g. 1f1b), or compare several with --compare 1f1b,zb-h1")
    if vpp is None:
        from ..schedule.specs import SCHEDULES
        vpp = SCHEDULES[name].default_vpp if name in SCHEDULES else 1
    check_schedule_size(pp, microbatches, vpp)
    from ..util.ownership import refuse_foreign
    from ..util.safe_files import refuse_unsafe
    if csv_path and str(csv_path) not in STDOUT_NAMES:
        _writable_file(csv_path, "--csv", (".csv",))
        refuse_unsafe([csv_path])  # before the work: a link or a FIFO there is refused, not written through
        refuse_foreign([csv_path], force)
    if gantt:
        _writable_file(gantt, "--gantt", (".png", ".pdf", ".svg"))
        refuse_unsafe(with_pdf(gantt, pdf))
        refuse_foreign(with_pdf(gantt, pdf), force)
    compute_only = build(name, pp, microbatches, vpp)
    full = lower(compute_only)
    report = prove(full)
    # the unit of --compare: a micro-batch's forward over all of a rank's layers is 1, so a
    # chunk of 1/vpp of them costs 1/vpp and schedules of any vpp share one clock
    timeline = evaluate(compute_only, uniform_costs(1.0 / vpp, 2.0 / vpp))
    if as_json:
        shown = full if lowered else compute_only
        _print_json({"name": name, "pp": pp, "microbatches": microbatches, "vpp": vpp,
                     "ranks": [[str(a) for a in actions] for actions in shown.ranks],
                     "peak_inflight": list(report.peak_inflight), "step_units": timeline.step_time,
                     "bubble_fraction": timeline.bubble_fraction, "costs": {"F": 1.0 / vpp, "B": 2.0 / vpp}})
    else:
        out.print((full if lowered else compute_only).to_text(), highlight=False)
        out.print(f"peak in-flight micro-batch activations per rank: {list(report.peak_inflight)}", highlight=False)
        per_chunk = f" per rank's layers; a chunk 1/{vpp} of that" if vpp > 1 else ""
        out.print(f"step: {timeline.step_time:g} units (F=1, B=2{per_chunk}); bubble: {timeline.bubble_fraction:.1%} "
                  f"(idle share of the least busy rank)", highlight=False)
    if csv_path:
        if str(csv_path) in STDOUT_NAMES:
            print(full.to_csv(), end="")
        else:  # whole or not at all, and never through a link or into a FIFO
            from ..util.safe_files import write_bytes
            write_bytes(csv_path, full.to_csv().encode())
    if gantt:
        from ..report.gantt import plot_gantt, timeline_to_trace
        from ..util.safe_files import replacing
        default = f"{name}: pp={pp}, m={microbatches}" + (f", vpp={vpp}" if vpp > 1 else "") + " (F=1, B=2)"
        written = with_pdf(gantt, pdf)
        with replacing(*written) as temps:
            plot_gantt(timeline_to_trace(compute_only, timeline), temps, title=default if title is None else title,
                       time_unit="units of one forward of a rank's layers", size=size)
        if not as_json:
            out.print(f"wrote {' and '.join(map(str, written))}")


def _compare(names: str, pp: int, microbatches: int, vpp: int | None, figure: Path | None, as_json: bool,
             size: str, pdf: bool, title: str | None, force: bool = False) -> None:
    """`schedule --compare`: every layout is checked against the registry before anything is
    built or drawn, so a bad one costs nothing and leaves no file."""
    from ..scenario.limits import check_schedule_size
    from ..schedule.specs import schedule_spec

    picked = comma_items(names, "--compare")
    if not picked:
        raise BadInput("--compare: name schedules, e.g. --compare 1f1b,interleaved-1f1b,zb-h1,zbv")
    if len(set(picked)) != len(picked):
        raise BadInput(f"--compare {names}: a schedule is named twice")
    layouts = []
    for n in picked:
        spec = schedule_spec(n)  # an unknown name is refused with the known ones
        v = vpp or spec.default_vpp  # each its own default unless --vpp says
        problems = spec.layout_problems(pp, v, microbatches)
        if problems:
            raise BadInput(f"--compare {n} (pp={pp}, m={microbatches}, vpp={v}): {'; '.join(problems)}")
        check_schedule_size(pp, microbatches, v)
        layouts.append((n, v))
    if figure:
        _writable_file(figure, "--out", (".png", ".pdf", ".svg"))
        from ..util.ownership import refuse_foreign
        from ..util.safe_files import refuse_unsafe
        refuse_unsafe(with_pdf(figure, pdf))
        refuse_foreign(with_pdf(figure, pdf), force)
    from ..report.schedule_compare import UNIT, compare_schedules

    compared = compare_schedules(layouts, pp, microbatches)
    written = with_pdf(figure, pdf) if figure else []
    if figure:
        from ..report.figure import save
        from ..report.schedule_compare import compare_figure
        default = f"pp={pp}, m={microbatches}: {', '.join(picked)} in one time unit"
        from ..util.safe_files import replacing
        with replacing(*written) as temps:
            save(compare_figure(compared, default if title is None else title, size), temps, dpi=200)
    if as_json:
        _print_json({"pp": pp, "microbatches": microbatches, "unit": UNIT,
                     "schedules": [c.as_json() for c in compared], "figure": str(figure) if figure else None})
        return
    from rich.table import Table
    table = Table(title=f"pp={pp}, m={microbatches}; time in units of {UNIT}", title_justify="left")
    for column in ("schedule", "vpp", "step units", "bubble", "peak in-flight"):
        table.add_column(column, justify="left" if column == "schedule" else "right")
    for c in compared:
        table.add_row(c.name, str(c.vpp), f"{c.timeline.step_time:g}", f"{c.timeline.bubble_fraction:.1%}",
                      f"{max(c.peak_activations):g}")
    print_whole(out, table)
    out.print("bubble: idle share of the least busy rank; peak in-flight: activations held at once on the busiest "
              "rank, in micro-batches of a rank's layers", highlight=False)
    if figure:
        out.print(f"wrote {' and '.join(map(str, written))}")

"""`sim3d run`: simulate one step, print the summary, write the outputs."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Optional

import typer

from .figure_options import check_size, force_option, pdf_option, size_option, title_option
from .progress import progress_bars
from .support import (SET_HELP, BadInput, distinct_sets, _default_folder, _gantt_options, _load, _writable_folder, err,
                      megatron_line, out, say)

# True in the `sim3d` command's own process only (app.main): what the imports built then lasts as
# long as the process, so the collector may freeze it.
PROCESS_ENDS_WITH_COMMAND = False
# The plotting process the command's entry point started before the CLI's imports (entry.py).
STARTED_PLOTTER = None


def run(scenario: Path = typer.Argument(..., help="Scenario YAML file."),
        set_: list[str] = typer.Option([], "--set", callback=distinct_sets, help=SET_HELP),
        out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder (default reports/<name>/)."),
        as_json: bool = typer.Option(False, "--json", help="Print only the summary JSON."),
        full_fidelity: bool = typer.Option(False, "--full-fidelity", help="Simulate every GPU, not one pipeline."),
        explain: bool = typer.Option(False, "--explain", help="Name the source of every cost."),
        plots: bool = typer.Option(True, "--plots/--no-plots", help="Write the Gantt, memory and link-traffic plots."),
        strict: bool = typer.Option(False, "--strict", help="Exit 2 when the layout does not fit in memory "
                                    "(the outputs are still written)."),
        megatron_args: bool = typer.Option(False, "--megatron-args", help="Also print the layout as Megatron args."),
        torchtitan_toml: bool = typer.Option(False, "--torchtitan-toml", help="Also print the layout as the "
                                             "sections of a torchtitan train config."),
        trace: str = typer.Option("json", "--trace", help="Perfetto trace: json, json.gz or none."),
        pdf: bool = pdf_option("the Gantt chart as gantt.pdf"),
        size: str = size_option("screen", "the Gantt charts", "--gantt-size"),
        title: Optional[str] = title_option("the Gantt chart", "the scenario's name, layout and step time"),
        gantt_window: Optional[str] = typer.Option(None, "--gantt-window", help="START,END: seconds of the step "
                                                   "to draw (zoom in)."),
        gantt_ranks: Optional[str] = typer.Option(None, "--gantt-ranks", help="R1,R2,...: the global ranks to draw "
                                                  "(default: all, or one per pipeline stage)."),
        samples: Optional[int] = typer.Option(None, "--samples", help="Also replay N draws of the scenario's variability: the "
                                    "step's distribution with confidence intervals, samples.csv and its plot."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the --samples draws (default 0; the same "
                                           "seed, the same samples)."),
        workers: Optional[int] = typer.Option(None, "--workers", help="Processes (or Ray tasks) replaying --samples "
                                              "(default 1)."),
        backend: Optional[str] = typer.Option(None, "--backend", help="Where --samples run: local (default) or ray."),
        worst_gantt: bool = typer.Option(False, "--worst-gantt", help="With --samples: also the Gantt chart of the "
                                         "slowest sample (gantt_worst.png)."),
        force: bool = force_option("an output (summary.json, links.csv, a figure...)")):
    """Simulate one training step and write summary, trace and plots."""
    from ..report.outputs import TRACE_FORMATS
    if trace not in TRACE_FORMATS:
        raise BadInput(f"--trace {trace!r}: expected one of {', '.join(TRACE_FORMATS)}")
    gantt = {**_gantt_options(check_size(size), gantt_window, gantt_ranks), "gantt_title": title}
    sampling = None
    if samples is not None:
        from .sampling import SamplingOptions
        sampling = SamplingOptions(samples, seed or 0, 1 if workers is None else workers, backend or "local",
                                   worst_gantt)
        sampling.check()
    else:
        given = [flag for flag, value in (("--seed", seed), ("--workers", workers), ("--backend", backend),
                                          ("--worst-gantt", worst_gantt or None)) if value is not None]
        if given:
            raise BadInput(f"{', '.join(given)} only mean something with --samples N: give --samples too")
    if torchtitan_toml:  # refused before the run when torchtitan cannot express the layout
        from ..scenario.torchtitan import to_torchtitan_toml
        try:
            toml = to_torchtitan_toml(_load(scenario, set_))
        except ValueError as e:
            raise BadInput(f"--torchtitan-toml: {e}") from None
    summary = _run(scenario, set_, out_dir, as_json, full_fidelity, explain, plots, megatron_args, trace, pdf, gantt,
                   sampling, force)
    if torchtitan_toml and not as_json:
        out.print("torchtitan train config (layout sections):\n" + toml, highlight=False, markup=False)
    if strict and not summary["fits_in_memory"]:
        raise BadInput(f"--strict: the layout does not fit in memory: {summary['memory_note']}")


def _run(scenario: Path, set_: list[str], out_dir: Optional[Path], as_json: bool, full_fidelity: bool, explain: bool,
         plots: bool, megatron_args: bool, trace: str, pdf: bool, gantt: dict, sampling=None, force: bool = False) -> dict:
    from ..report.outputs import draw_memory_early, planned_outputs, start_plotting
    from ..util.ownership import refuse_foreign
    from ..util.safe_files import MANIFEST_NAME, folder_lock, record_outputs, refuse_unsafe
    if not scenario.is_file():  # the commonest bad input, said before anything is started
        _load(scenario, set_)
    # forked before the simulator's imports: the plots need none of them (matplotlib and numpy,
    # imported there while this process imports the simulator, loads and simulates)
    plotter = _plotter(plots, start_plotting)
    lock = None
    if PROCESS_ENDS_WITH_COMMAND:
        # One step's objects: the collector would scan the simulator's imports and the replay's
        # events again and again (0.1 s of CPU on the flagship, benchmarks/run_wall.py) to find
        # the replay's few cycles (~60k objects, a few MB), which the process's end frees.
        gc.disable()
    try:
        from ..api import simulate
        from ..analysis.summary import breakdown_table, summary_table
        s = _load(scenario, set_)
        folder = _writable_folder(out_dir or _default_folder(s.name))
        lock = folder_lock(folder, "run")  # released in `finally`, after an error too
        outputs = [*planned_outputs(folder, plots, trace, pdf),
                   *(sampling.planned_outputs(folder, plots) if sampling else ())]
        refuse_unsafe([*outputs, folder / MANIFEST_NAME])
        refuse_foreign(outputs, force, inputs=(scenario, s.costs.profile), writer="sim3d run")
        if sampling:  # refused before the run, as every bad input is
            from ..studies.monte_carlo import check_sampled
            check_sampled(s, sampling.samples)
        elif s.variability is not None and not s.variability.off and not as_json:
            say("note:", "the scenario's variability section is drawn only with --samples N", "yellow")
        if plots:  # drawn while this process simulates (`simulate` makes the same report again: 0.01 s)
            from ..model.memory import memory_report
            draw_memory_early(plotter, s, memory_report(s, check_schedule=False))
        if PROCESS_ENDS_WITH_COMMAND:  # what the imports built lasts as long as the process:
            gc.freeze()  # the collector need not scan it again when it runs (for --samples, below)
        every_gpu = s.full_fidelity(full_fidelity)
        if every_gpu and not as_json:
            with progress_bars("simulate", err) as bar:
                task = bar.add_task(f"simulating all {s.num_gpus} GPUs", total=1.0)
                result = simulate(s, full_fidelity=True, progress=lambda done: bar.update(task, completed=done))
        else:
            result = simulate(s, full_fidelity=every_gpu)
        summary = result.summary
        sampled = None
        if sampling:
            from .sampling import SampledRun
            gc.enable()  # the draws are many replays (and their worker processes inherit this)
            sampled = SampledRun.of(s, result.step_time, sampling, quiet=as_json)
            summary["step_distribution"] = sampled.stats
        window = gantt["gantt_window"]
        if window and plots and window[0] >= result.step_time:
            raise BadInput(f"--gantt-window {window[0]:g},{window[1]:g}: starts after the step ends "
                           f"({result.step_time:.6g} s)")
        # a rank another stands for (full fidelity folds twins) is drawn as that rank
        missing = sorted(set(gantt["gantt_ranks"] or ()) - set(result.sim.ranks) - set(result.sim.represented))
        if missing and plots:
            simulated = sorted(result.sim.ranks)
            raise BadInput(f"--gantt-ranks: rank(s) {missing[:8]} were not simulated; this run replayed "
                           f"{len(simulated)} rank(s) ({', '.join(map(str, simulated[:8]))}"
                           f"{', ...' if len(simulated) > 8 else ''})" +
                           ("" if result.full_fidelity else "; --full-fidelity replays every GPU"))
        flags = megatron_line(s) if megatron_args else None
        from ..scenario.megatron_export import export_notes
        flags_note = "; ".join(export_notes(s)) if flags else None  # what Megatron would run otherwise

        def report() -> None:
            if as_json:
                extra = {"megatron_args": flags, **({"megatron_args_note": flags_note} if flags_note else {})}
                print(json.dumps({**summary, **extra} if flags else summary, indent=2, allow_nan=False))
                return
            out.print(summary_table(summary))
            out.print(breakdown_table(summary))
            if sampled:
                sampled.print(variability_off=s.variability is None or s.variability.off)
            _print_memory(result.memory, s.gpu.hbm_gib)
            for w in summary["warnings"]:
                say("warning:", w, "yellow")
            if not summary["fits_in_memory"]:
                say("memory:", summary["memory_note"], "yellow")
            if explain:
                _print_explain(result)
            if flags:
                out.print("Megatron-LM arguments: " + flags, highlight=False, soft_wrap=True)
                if flags_note:
                    say("note:", flags_note, "yellow")
        # printed once the plots have their data: the plotting process draws while this one prints
        written = _write_outputs(result, folder, plots, quiet=as_json, trace=trace, pdf=pdf, plotter=plotter,
                                 memory_drawn=plots, then=report, **gantt)
        if sampled:
            written += sampled.write(folder, s.name, plots, sampling.worst_gantt, gantt["gantt_size"])
        from ..report.outputs import run_output_names
        from .sampling import SAMPLE_OUTPUTS
        removed = record_outputs(folder, written, {"written_by": "sim3d run", "scenario": str(scenario),
                                                   "sets": list(set_)}, run_output_names() | set(SAMPLE_OUTPUTS))
        if not as_json:
            out.print(f"wrote {', '.join(p.name for p in written)} to {folder}/")
        if removed:  # an earlier run's files would otherwise pass for this run's
            say("removed", f"{', '.join(removed)} from {folder}/: an earlier run wrote them, this one did not",
                "yellow")
        return summary
    finally:
        if lock is not None:
            lock.release()
        if plotter is not None:
            plotter.close()


def _plotter(plots: bool, start_plotting):
    """The plotting process for this run: the one the entry point started, else a new one;
    None (and the started one stopped) without plots."""
    global STARTED_PLOTTER
    started, STARTED_PLOTTER = STARTED_PLOTTER, None
    if not plots:
        if started is not None:
            started.close()
        return None
    return started or start_plotting()


def _print_memory(report, hbm_gib: float) -> None:
    from ..report.memory_plot import memory_table
    out.print(memory_table(report.rows, hbm_gib))


def _print_explain(result) -> None:
    from rich.table import Table
    table = Table(title="where each cost comes from", title_justify="left")
    table.add_column("cost")
    table.add_column("source")
    for what, source in result.explain():
        table.add_row(what, source)
    out.print(table)


def _write_outputs(result, folder: Path, plots: bool, quiet: bool, trace: str, pdf: bool, plotter=None,
                   memory_drawn: bool = False, then=None, **gantt) -> list[Path]:
    """write_run_outputs, calling `then` (the summary's printing) once the plots are handed
    over; the spinner shows after it, so that it never shares the terminal with the tables."""
    from ..report.outputs import write_run_outputs
    if quiet:
        return write_run_outputs(result, folder, plots, trace, pdf, plotter=plotter, memory_drawn=memory_drawn,
                                 then=then, **gantt)
    status = err.status(f"writing trace and plots to {folder}/ ...")

    def report_then_spin() -> None:
        if then is not None:
            then()
        status.start()
    try:
        return write_run_outputs(result, folder, plots, trace, pdf, plotter=plotter, memory_drawn=memory_drawn,
                                 then=report_then_spin, **gantt)
    finally:
        status.stop()

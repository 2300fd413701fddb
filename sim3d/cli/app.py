"""The `sim3d` command: parse, call the library, print. Exit codes: 0 ok, 2 bad input, 3 the
environment failed (a full disk), 1 bug (support.py)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from .imports import import_app
from .support import (JSON_HELP, SET_HELP, BadInput, _default_folder, _gantt_options, _load, _print_json,
                          _writable_file, _writable_folder, err, guarded, out, print_whole, say)

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Simulate 3D-parallel LLM training steps (see README.md).")


@app.command()
@guarded
def run(scenario: Path = typer.Argument(..., help="Scenario YAML file."),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
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
        pdf: bool = typer.Option(False, "--pdf", help="Also write the Gantt chart as PDF (for papers)."),
        gantt_size: str = typer.Option("screen", "--gantt-size", help="screen, page or column (a paper's text or "
                                       "column width)."),
        gantt_window: Optional[str] = typer.Option(None, "--gantt-window", help="START,END: seconds of the step "
                                                   "to draw (zoom in)."),
        gantt_ranks: Optional[str] = typer.Option(None, "--gantt-ranks", help="R1,R2,...: the global ranks to draw "
                                                  "(default: all, or one per pipeline stage).")):
    """Simulate one training step and write summary, trace and plots."""
    from ..report.outputs import TRACE_FORMATS
    if trace not in TRACE_FORMATS:
        raise BadInput(f"--trace {trace!r}: expected one of {', '.join(TRACE_FORMATS)}")
    gantt = _gantt_options(gantt_size, gantt_window, gantt_ranks)
    if torchtitan_toml:  # refused before the run when torchtitan cannot express the layout
        from ..scenario.torchtitan import to_torchtitan_toml
        try:
            toml = to_torchtitan_toml(_load(scenario, set_))
        except ValueError as e:
            raise BadInput(f"--torchtitan-toml: {e}") from None
    summary = _run(scenario, set_, out_dir, as_json, full_fidelity, explain, plots, megatron_args, trace, pdf, gantt)
    if torchtitan_toml and not as_json:
        out.print("torchtitan train config (layout sections):\n" + toml, highlight=False, markup=False)
    if strict and not summary["fits_in_memory"]:
        raise BadInput(f"--strict: the layout does not fit in memory: {summary['memory_note']}")


def _run(scenario: Path, set_: list[str], out_dir: Optional[Path], as_json: bool, full_fidelity: bool, explain: bool,
         plots: bool, megatron_args: bool, trace: str, pdf: bool, gantt: dict) -> dict:
    from ..report.outputs import planned_outputs, start_plotting
    from ..report.safe_files import MANIFEST_NAME, folder_lock, record_outputs, refuse_unsafe
    if not scenario.is_file():  # the commonest bad input, said before anything is started
        _load(scenario, set_)
    # forked before the simulator's imports: the plots need none of them (matplotlib and numpy,
    # imported there while this process imports the simulator, loads and simulates)
    plotter = start_plotting() if plots else None
    lock = None
    try:
        from ..api import simulate
        from ..analysis.summary import breakdown_table, summary_table
        s = _load(scenario, set_)
        folder = _writable_folder(out_dir or _default_folder(s.name))
        lock = folder_lock(folder, "run")  # released in `finally`, after an error too
        refuse_unsafe([*planned_outputs(folder, plots, trace, pdf), folder / MANIFEST_NAME])
        if _PROCESS_ENDS_WITH_COMMAND:  # what the imports built lasts as long as the process:
            gc.freeze()  # the collector need not scan it again (three full scans, 0.1 s)
        every_gpu = full_fidelity or any(f.straggler for f in s.faults)
        if every_gpu and not as_json:
            with _progress("simulate") as bar:
                task = bar.add_task(f"simulating all {s.num_gpus} GPUs", total=1.0)
                result = simulate(s, full_fidelity=True, progress=lambda done: bar.update(task, completed=done))
        else:
            result = simulate(s, full_fidelity=every_gpu)
        summary = result.summary
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
        flags = _megatron_line(s) if megatron_args else None
        if as_json:
            print(json.dumps({**summary, "megatron_args": flags} if flags else summary, indent=2, allow_nan=False))
        else:
            out.print(summary_table(summary))
            out.print(breakdown_table(summary))
            _print_memory(result.memory, s.gpu.hbm_gib)
            for w in summary["warnings"]:
                say("warning:", w, "yellow")
            if not summary["fits_in_memory"]:
                say("memory:", summary["memory_note"], "yellow")
            if explain:
                _print_explain(result)
            if flags:
                out.print("Megatron-LM arguments: " + flags, highlight=False, soft_wrap=True)
        written = _write_outputs(result, folder, plots, quiet=as_json, trace=trace, pdf=pdf, plotter=plotter,
                                 **gantt)
        from ..report.outputs import run_output_names
        removed = record_outputs(folder, written, {"written_by": "sim3d run", "scenario": str(scenario),
                                                   "sets": list(set_)}, run_output_names())
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


def _megatron_line(scenario) -> str:
    import shlex

    from ..scenario.importers import to_megatron_args
    return shlex.join(to_megatron_args(scenario))


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
                   **gantt) -> list[Path]:
    from ..report.outputs import write_run_outputs
    if quiet:
        return write_run_outputs(result, folder, plots, trace, pdf, plotter=plotter, **gantt)
    with err.status(f"writing trace and plots to {folder}/ ..."):
        return write_run_outputs(result, folder, plots, trace, pdf, plotter=plotter, **gantt)


@app.command()
@guarded
def validate(scenario: Path = typer.Argument(..., help="Scenario YAML file."),
             set_: list[str] = typer.Option([], "--set", help=SET_HELP),
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


@app.command()
@guarded
def schedule(name: str = typer.Argument(..., help="gpipe | 1f1b | interleaved-1f1b | zb-h1 | zbv | dualpipev"),
             pp: int = typer.Option(..., "--pp", min=1, help="Pipeline ranks."),
             microbatches: int = typer.Option(..., "--microbatches", "-m", min=1),
             vpp: Optional[int] = typer.Option(None, "--vpp", min=1, help="Chunks per rank (interleaved / V)."),
             lowered: bool = typer.Option(False, "--lowered", help="Show send/receive actions too."),
             csv_path: Optional[Path] = typer.Option(None, "--csv", help="Write the lowered schedule as CSV."),
             gantt: Optional[Path] = typer.Option(None, "--gantt", help="Draw a unit-cost Gantt (png/pdf/svg)."),
             gantt_size: str = typer.Option("screen", "--gantt-size", help="screen, page or column."),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Print a schedule's per-rank action table and its unit-cost bubble (F=1, B=2)."""
    from ..scenario.limits import check_schedule_size
    from ..schedule import build, lower
    from ..schedule import prove
    from ..schedule.evaluate import evaluate, uniform_costs

    if vpp is None:
        from ..schedule.specs import SCHEDULES
        vpp = SCHEDULES[name].default_vpp if name in SCHEDULES else 1
    check_schedule_size(pp, microbatches, vpp)
    if csv_path:
        _writable_file(csv_path, "--csv", (".csv",))
    if gantt:
        _writable_file(gantt, "--gantt", (".png", ".pdf", ".svg"))
        _gantt_options(gantt_size, None, None)
    compute_only = build(name, pp, microbatches, vpp)
    full = lower(compute_only)
    report = prove(full)
    timeline = evaluate(compute_only, uniform_costs(1.0, 2.0))
    if as_json:
        shown = full if lowered else compute_only
        _print_json({"name": name, "pp": pp, "microbatches": microbatches, "vpp": vpp,
                     "ranks": [[str(a) for a in actions] for actions in shown.ranks],
                     "peak_inflight": list(report.peak_inflight), "step_units": timeline.step_time,
                     "bubble_fraction": timeline.bubble_fraction, "costs": {"F": 1.0, "B": 2.0}})
    else:
        out.print((full if lowered else compute_only).to_text(), highlight=False)
        out.print(f"peak in-flight micro-batch activations per rank: {list(report.peak_inflight)}", highlight=False)
        out.print(f"step: {timeline.step_time:g} units (F=1, B=2); bubble: {timeline.bubble_fraction:.1%} "
                  f"of the step on the worst rank", highlight=False)
    if csv_path:
        from ..report.safe_files import naming
        with naming(csv_path):  # a user's path, written in place: it may be /dev/stdout
            csv_path.write_text(full.to_csv())
    if gantt:
        from ..report.gantt import plot_gantt, timeline_to_trace
        plot_gantt(timeline_to_trace(compute_only, timeline), [gantt],
                   title=f"{name}: pp={pp}, m={microbatches}" + (f", vpp={vpp}" if vpp > 1 else "") + " (F=1, B=2)",
                   time_unit="units of one forward", size=gantt_size)
        if not as_json:
            out.print(f"wrote {gantt}")


def _progress(description: str):
    from .progress import progress_bars
    return progress_bars(description, err)


# Of the 104 published runs in validation/ that ran, sim3d predicts 95% with more than 5% of the
# card's memory free (5th percentile 6.4%, median 31%; python benchmarks/memory_headroom.py): a
# pick that needs more than 95% of the card is beyond what people run.
HEADROOM_PERCENT = 5.0


@app.command()
@guarded
def plan(scenario: Path = typer.Argument(..., help="Scenario YAML file (its model, batch and cluster kind are kept)."),
         gpus: Optional[int] = typer.Option(None, "--gpus", min=1, help="GPUs to lay the run out on (default: "
                                            "the scenario's)."),
         headroom: float = typer.Option(HEADROOM_PERCENT, "--headroom", min=0.0, max=99.0, help="Percent of each "
                                        "card's memory every layout must leave free (the default is what 95% of "
                                        "the published runs sim3d holds keep; 0 allows a full card)."),
         baseline: bool = typer.Option(False, "--baseline", help="Also simulate the scenario's own layout and show "
                                       "each pick's speed-up over it."),
         top: int = typer.Option(10, "--top", min=1, help="Rows of the ranked table."),
         finalists: int = typer.Option(100, "--finalists", min=1, help="Best estimates simulated on the event "
                                       "engine and ranked by the simulated step."),
         fix: list[str] = typer.Option([], "--fix", help="KEY=V: hold a dimension, e.g. parallel.tp=8 (repeatable)."),
         space: list[str] = typer.Option([], "--space", help="KEY=V1,V2: the values of a dimension, e.g. "
                                         "parallel.cp=1,2,4,8,16 (repeatable)."),
         workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Worker processes (default: cores)."),
         out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder for candidates.csv and finalists.csv "
                                                "(default reports/<name>-plan-<gpus>/)."),
         megatron_args: bool = typer.Option(False, "--megatron-args", help="Also print each ranked layout as "
                                            "Megatron-LM arguments."),
         plots: bool = typer.Option(True, "--plots/--no-plots", help="Write plan.png."),
         as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Search the layout space: estimate every layout that fits, simulate the best, rank them."""
    from ..scenario.limits import GPUS, LOCAL_PROCESSES
    if gpus is not None:
        GPUS.check(gpus, "--gpus")
    if workers is not None:
        LOCAL_PROCESSES.check(workers, "--workers")
    from ..report.safe_files import folder_lock, record_outputs, refuse_unsafe
    from ..studies.plan import (baseline_of, check_space, estimate_misses, json_row, plan as search, plan_table,
                                planned_outputs, write_outputs)
    from ..studies.space import parse_choices

    choices = parse_choices(fix, space)
    from ..scenario.load import load_scenario
    base = load_scenario(scenario)  # a bad base scenario or GPU count fails before any work starts
    gpus = gpus or base.num_gpus
    check_space(scenario, gpus, choices, headroom / 100)
    folder = _writable_folder(out_dir or _default_folder(base.name, f"-plan-{gpus}"))
    refuse_unsafe(planned_outputs(folder, plots))  # before the search; the writes check again
    with folder_lock(folder, "plan"), _progress("plan") as progress:
        tasks: dict[str, int] = {}

        def advance(phase: str, n: int, total: int) -> None:
            if phase not in tasks:
                label = "estimating layouts" if phase == "price" else "simulating finalists"
                tasks[phase] = progress.add_task(label, total=total, rate="")
            progress.update(tasks[phase], advance=n)
            task = progress.tasks[tasks[phase]]
            if task.elapsed:
                progress.update(tasks[phase], rate=f"{task.completed / task.elapsed:,.0f}/s")

        result = search(scenario, gpus, choices, finalists, workers, advance, headroom / 100)
        written = write_outputs(result, folder, plots)
        # an earlier search's plan.png beside this one's tables would pass for this search's
        removed = record_outputs(folder, written, {"written_by": "sim3d plan", "scenario": str(scenario)},
                                 ("candidates.csv", "finalists.csv", "plan.png"))
    if removed:
        say("removed", f"{', '.join(removed)} from {folder}/: an earlier search wrote them, this one did not", "yellow")
    if not result.fitting:
        raise BadInput(result.why_none())
    ranked = result.finalists.head(top)
    flags = [_plan_megatron_line(scenario, row["overrides"]) for _, row in ranked.iterrows()]
    yours = baseline_of(scenario) if baseline else None
    if as_json:
        _print_json({"gpus": gpus, "headroom": headroom / 100, "baseline": yours,
                     "considered": len(result.candidates), "fitting": result.fitting, "excluded": result.dropped,
                     "simulated": len(result.finalists), "estimate_error": result.estimate_error(),
                     "estimate_misses": estimate_misses(result),
                     "ranked": [{**json_row(row), "megatron_args": f} for (_, row), f in zip(ranked.iterrows(), flags)],
                     "files": [str(p) for p in written]})
        return
    if yours:
        out.print(f"your layout, {yours['layout']}: step {yours['step_time_s']:.2f} s, MFU {yours['mfu']:.1%}, "
                  f"{yours['peak_memory_gib']:.1f} GiB" + ("" if yours["fits_in_memory"] else " (does not fit)"),
                  highlight=False)
    print_whole(out, plan_table(result, top, yours and yours["step_time_s"]))
    err = result.estimate_error()
    if err["median"] is not None:
        out.print(f"estimate vs simulation over {len(result.finalists)} finalists: median |error| {err['median']:.1%}, "
                  f"worst {err['worst']:+.1%} ({err['worst_layout']})", highlight=False)
    misses = estimate_misses(result)
    if misses:
        out.print(f"{len(misses)} finalist(s) the estimate got wrong by more than 10% (the simulated step ranks them):",
                  highlight=False)
        for line in misses[:top]:
            out.print("  " + line, highlight=False)
        if len(misses) > top:
            out.print(f"  ... and {len(misses) - top} more in finalists.csv (column est_off_by)", highlight=False)
    if megatron_args:
        for rank, line in enumerate(flags, 1):
            out.print(f"#{rank}: {line}", highlight=False, soft_wrap=True)
    out.print(f"wrote {', '.join(p.name for p in written)} to {folder}/")


def _plan_megatron_line(scenario: Path, overrides: str) -> str:
    from ..scenario.importers import SCHEDULE_ELSEWHERE
    from ..scenario.load import load_scenario
    s = load_scenario(scenario, overrides.split())
    line = _megatron_line(s)
    note = SCHEDULE_ELSEWHERE.get(s.schedule)
    return f"{line}  # {note}" if note else line


@app.command()
@guarded
def sweep(scenario: Path = typer.Argument(..., help="Scenario YAML file."),
          grid: list[str] = typer.Option(..., "--grid", help="KEY=V1,V2,... (repeatable; the cartesian product is run)."),
          out_dir: Path = typer.Option(..., "--out", help="Folder for results.csv and sweep.png."),
          workers: Optional[int] = typer.Option(None, "--workers", min=1),
          backend: str = typer.Option("local", "--backend", help="local (process pool) or ray."),
          resume: bool = typer.Option(False, "--resume", help="Skip grid points already in OUT/results.csv."),
          as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """What-if grid over scenario values; results table and plots."""
    from ..report.safe_files import refuse_unsafe
    from ..studies.runner import check_backend
    from ..studies.sweep import parse_grid, planned_outputs, points, run_sweep

    from ..scenario.load import load_scenario
    load_scenario(scenario)  # a bad base scenario fails before any work starts
    _writable_folder(out_dir)
    refuse_unsafe(planned_outputs(out_dir))  # checked again under the folder's lock, which run_sweep takes
    try:
        check_backend(backend)
    except ValueError as e:
        raise BadInput(str(e)) from None
    parsed = parse_grid(grid)
    from ..scenario.limits import LOCAL_PROCESSES, SWEEP_POINTS
    SWEEP_POINTS.check(len(points(parsed)), " x ".join(f"{len(v)} {k}" for k, v in parsed.items()))
    if workers is not None and backend == "local":  # as plan bounds its own: each is a process here
        LOCAL_PROCESSES.check(workers, "--workers")
    with _progress("sweep") as progress:
        task = progress.add_task(f"{len(points(parsed))} grid points", total=None)
        results = run_sweep(scenario, parsed, out_dir, workers, backend, resume,
                            progress=lambda done, total: progress.update(task, completed=done, total=total))
    import pandas as pd
    table = pd.read_csv(results, dtype={"label": str, "error": str}, keep_default_na=False)
    shown = table.sort_values(list(parsed))[[*parsed, "step_time_s", "mfu", "bubble_fraction", "peak_memory_gib", "error"]]
    if as_json:
        _print_json(json.loads(table.sort_values(list(parsed)).to_json(orient="records")))
    else:
        out.print(shown.to_string(index=False), highlight=False)
    failed = table[table["error"] != ""]
    if len(failed) == len(table):
        raise BadInput(f"every one of the {len(table)} grid points failed (rows in {results}); the first: "
                       f"{failed['label'].iloc[0]}: {failed['error'].iloc[0]}")
    if len(failed):
        say("warning:", f"{len(failed)} of {len(table)} grid points failed; their reasons are in the error column",
            "yellow")
    if not as_json:
        out.print(f"wrote {results} and {out_dir / 'sweep.png'}")


@app.command()
@guarded
def execute(scenario: Path = typer.Argument(..., help="Scenario YAML file (a small model)."),
            set_: list[str] = typer.Option([], "--set", help=SET_HELP),
            steps: int = typer.Option(3, "--steps", min=1),
            backend: str = typer.Option("gloo", "--backend", help="gloo (CPU) or nccl (GPUs)."),
            check: bool = typer.Option(False, "--check", help="Compare with a single-process reference."),
            out_dir: Optional[Path] = typer.Option(None, "--out", help="Where trace.csv goes (default reports/<name>-exec/)."),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Run the scenario's layout for real on a small GPT with the same schedule objects."""
    from ..executor import ExecutorError, ExecutorRefusal, RankKilled, execute as run_executor
    from ..report.safe_files import folder_lock, record_outputs, refuse_unsafe

    if backend not in ("gloo", "nccl"):
        raise BadInput(f"--backend: expected gloo or nccl, got {backend!r}")
    from ..scenario.limits import EXECUTOR_STEPS
    EXECUTOR_STEPS.check(steps, "--steps")
    # The executor runs on this machine: the cluster becomes one node of tp*pp*dp*cp devices.
    s = _load(scenario, [*set_, *_local_cluster(scenario, set_)])
    folder = _writable_folder(out_dir or _default_folder(s.name, "-exec"))
    refuse_unsafe([folder / "trace.csv"])  # the executor writes it in place, after the run
    try:
        with folder_lock(folder, "execute"):
            result = run_executor(s, steps=steps, backend=backend, check=check, out_dir=folder)
            # a run's outputs beside this measured trace.csv would pass for its own
            from ..report.outputs import run_output_names
            removed = record_outputs(folder, [result.trace_path] if result.trace_path else [],
                                     {"written_by": "sim3d execute", "scenario": str(scenario)}, run_output_names())
        if removed:
            say("removed", f"{', '.join(removed)} from {folder}/: an earlier run wrote them, this one did not",
                "yellow")
    except ExecutorRefusal as e:
        raise BadInput(str(e)) from None
    except ExecutorError as e:
        say("execution failed:", e)
        raise typer.Exit(3 if isinstance(e, RankKilled) else 1)  # 3: the environment failed, not sim3d
    if as_json:
        _print_json({"name": result.name, "schedule": result.schedule, "world_size": result.world_size,
                     "losses": result.losses, "step_times_s": result.step_times_s,
                     "median_step_s": result.median_step_s, "check": result.check,
                     "trace": str(result.trace_path) if result.trace_path else None})
    else:
        out.print(result.summary(), highlight=False)
    if check and not result.passed:
        raise typer.Exit(1)


def _local_cluster(path: Path, sets: list[str]) -> list[str]:
    from ..executor.sizing import launcher_cluster
    return launcher_cluster(str(path), sets, {})  # a local run: one node, a process per rank


@app.command()
@guarded
def compare(sim_trace: Path = typer.Argument(..., help="trace.csv / .parquet of a simulated run (or a folder)."),
            real_trace: Path = typer.Argument(..., help="trace.csv / .parquet of an executed run (or a folder)."),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Align two traces action by action; print per-kind and step-time error."""
    from ..report.compare import compare_traces
    from ..trace import read_trace

    def load(path: Path):
        path = path / "trace.csv" if path.is_dir() else path
        if not path.is_file():
            raise BadInput(f"{path}: no such trace file")
        try:
            return read_trace(path)
        except ValueError as e:  # also undecodable bytes (UnicodeDecodeError is a ValueError)
            raise BadInput(f"{path}: not a trace CSV with the columns of DESIGN.md section 4 ({e})") from None

    from ..report.compare import UnrelatedTraces
    try:
        result = compare_traces(load(sim_trace), load(real_trace))
    except UnrelatedTraces as e:
        raise BadInput(f"{sim_trace} vs {real_trace}: {e}") from None
    if as_json:
        _print_json(result.to_dict())
    else:
        out.print(result.render())


@app.command()
@guarded
def calibrate(device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
              quick: bool = typer.Option(False, "--quick", help="Small grids (minutes on a CPU)."),
              scenario: Optional[Path] = typer.Option(None, "--scenario", help="Also measure this scenario's GEMMs."),
              out_path: Optional[Path] = typer.Option(None, "--out", help="Profile CSV path."),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Measure kernels and collectives; write a profile CSV plus provenance JSON."""
    if device not in ("cpu", "cuda"):
        raise BadInput(f"--device: expected cpu or cuda, got {device!r}")
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise BadInput("--device cuda: torch sees no CUDA GPU here (torch.cuda.is_available() is False)")
    if scenario is not None:
        from ..scenario.load import load_scenario
        load_scenario(scenario)  # fail early on a bad scenario
    if out_path is not None:
        _writable_file(out_path, "--out", (".csv",))  # before the measuring, not after
    from sim3d_calibrate import run_calibration
    with err.status("calibrating ...") as status:
        path = run_calibration(device=device, quick=quick, scenario_path=str(scenario) if scenario else None,
                               out=str(out_path) if out_path else None, progress=lambda msg: status.update(msg))
    provenance = json.loads(Path(path).with_suffix(".json").read_text())
    if as_json:
        _print_json({"profile": str(path), "provenance": str(Path(path).with_suffix(".json")),
                     "unstable": provenance.get("unstable") or []})
    else:
        out.print(f"wrote {path} and {Path(path).with_suffix('.json')}")
    for reason in provenance.get("unstable") or []:
        say("warning:", f"unstable measurement: {reason}; flagged in the provenance, and every prediction "
            "using this profile will say so (measure again on a quiet machine)", "yellow")


def _version(value: bool) -> None:
    if value:
        from .. import __version__
        print(f"sim3d {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")) -> None:
    """Simulate 3D-parallel LLM training steps (see README.md)."""


app.add_typer(import_app, name="import")


_PROCESS_ENDS_WITH_COMMAND = False  # True in the `sim3d` command's own process only (see main)


def main() -> None:  # pragma: no cover - console entry point
    """The `sim3d` command, whose process (unlike a test runner's) ends with it: `_run` may gc.freeze."""
    global _PROCESS_ENDS_WITH_COMMAND
    _PROCESS_ENDS_WITH_COMMAND = True
    app()


if __name__ == "__main__":  # pragma: no cover
    main()

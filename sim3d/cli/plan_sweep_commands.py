"""`sim3d plan` and `sim3d sweep`: many simulations, ranked or tabulated."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Optional

import typer

from .figure_options import check_size, force_option, pdf_option, size_option, title_option
from .progress import progress_bars
from .support import (JSON_HELP, SET_HELP, BadInput, distinct_sets, _default_folder, _print_json, _writable_folder, err,
                      megatron_line, out, print_whole, say)


# Of the 104 published runs in validation/ that ran, sim3d predicts 95% with more than 5% of the
# card's memory free (5th percentile 6.4%, median 31%; python benchmarks/memory_headroom.py): a
# pick that needs more than 95% of the card is beyond what people run.
HEADROOM_PERCENT = 5.0


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
         fix: list[str] = typer.Option([], "--fix", metavar="KEY=VALUE",
                                       help="Hold a dimension, e.g. parallel.tp=8 (repeatable)."),
         space: list[str] = typer.Option([], "--space", metavar="KEY=V1,V2",
                                         help="The values of a dimension, e.g. parallel.cp=1,2,4,8,16 (repeatable)."),
         workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Worker processes (default: cores)."),
         exhaustive: bool = typer.Option(False, "--exhaustive", help="Estimate every layout, also those whose "
                                         "floor shows they cannot be among the finalists (candidates.csv complete; "
                                         "slower)."),
         out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder for candidates.csv and finalists.csv "
                                                "(default reports/<name>-plan-<gpus>/)."),
         megatron_args: bool = typer.Option(False, "--megatron-args", help="Also print each ranked layout as "
                                            "Megatron-LM arguments."),
         plots: bool = typer.Option(True, "--plots/--no-plots", help="Write plan.png."),
         set_: list[str] = typer.Option([], "--set", callback=distinct_sets, help=SET_HELP),
         as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
         force: bool = force_option("candidates.csv, finalists.csv or plan.png")):
    """Search the layout space: estimate the layouts that fit (all that could be among the best), simulate the best,
    rank them."""
    from ..scenario.limits import GPUS, LOCAL_PROCESSES
    if gpus is not None:
        GPUS.check(gpus, "--gpus")
    if workers is not None:
        LOCAL_PROCESSES.check(workers, "--workers")
    from ..report.plan_plot import PLOT_NAME, plot_plan
    from ..util.ownership import refuse_foreign
    from ..util.safe_files import folder_lock, record_outputs, refuse_unsafe, write_with
    from ..studies.plan import (ABBREVIATIONS, TABLES, baseline_of, check_space, distinct_picks, estimate_misses,
                                json_row, plan as search, plan_table, planned_tables, write_tables)
    from ..studies.space import parse_choices

    choices = parse_choices(fix, space)
    from ..scenario.load import load_scenario
    sets = tuple(set_)
    base = load_scenario(scenario, list(sets))  # a bad base scenario or GPU count fails before any work starts
    gpus = gpus or base.num_gpus
    check_space(scenario, gpus, choices, headroom / 100, sets)
    folder = _writable_folder(out_dir or _default_folder(base.name, f"-plan-{gpus}"))
    # before the search; the writes check again
    refuse_unsafe(planned_tables(folder) + ([folder / PLOT_NAME] if plots else []))
    refuse_foreign(planned_tables(folder) + ([folder / PLOT_NAME] if plots else []), force,
                   inputs=(scenario, base.costs.profile))
    with folder_lock(folder, "plan"), progress_bars("plan", err) as progress:
        tasks: dict[str, int] = {}

        def advance(phase: str, n: int, total: int) -> None:
            if phase not in tasks:
                label = {"pilot": "timing a sample", "bound": "bounding layouts", "price": "estimating layouts",
                         "simulate": "simulating finalists"}[phase]
                tasks[phase] = progress.add_task(label, total=total, rate="")
            progress.update(tasks[phase], advance=n)
            task = progress.tasks[tasks[phase]]
            if task.elapsed:
                progress.update(tasks[phase], rate=f"{task.completed / task.elapsed:,.0f}/s")

        result = search(scenario, gpus, choices, finalists, workers, advance, headroom / 100, sets, exhaustive)
        written = write_tables(result, folder)
        if plots and result.fitting:
            hbm = result.space.base.gpu.hbm_gib
            written.append(write_with(folder / PLOT_NAME,
                                      lambda path: plot_plan(result.candidates, result.finalists, hbm, path)))
        # an earlier search's plan.png beside this one's tables would pass for this search's
        removed = record_outputs(folder, written, {"written_by": "sim3d plan", "scenario": str(scenario)},
                                 (*TABLES, PLOT_NAME))
    if removed:
        say("removed", f"{', '.join(removed)} from {folder}/: an earlier search wrote them, this one did not", "yellow")
    if not result.fitting:
        raise BadInput(result.why_none())
    picks = distinct_picks(result.finalists, top)  # the table's rows: similar layouts folded into the best
    flags = [_plan_megatron_line(scenario, row["overrides"]) for row, _ in picks]
    yours = baseline_of(scenario, sets) if baseline else None
    if as_json:
        _print_json({"gpus": gpus, "headroom": headroom / 100, "baseline": yours,
                     "considered": len(result.candidates), "priced": result.priced, "fitting": result.fitting, "excluded": result.dropped,
                     "simulated": len(result.finalists), "estimate_error": result.estimate_error(),
                     "estimate_misses": estimate_misses(result),
                     "ranked": [{**json_row(row), "similar": similar, "megatron_args": f}
                                for (row, similar), f in zip(picks, flags)],
                     "files": [str(p) for p in written]})
        return
    if yours:
        out.print(f"your layout, {yours['layout']}: step {yours['step_time_s']:.2f} s, MFU {yours['mfu']:.1%}, "
                  f"{yours['peak_memory_gib']:.1f} GiB" + ("" if yours["fits_in_memory"] else " (does not fit)"),
                  highlight=False)
    print_whole(out, plan_table(result, top, yours and yours["step_time_s"]))
    out.print(textwrap.fill(ABBREVIATIONS, width=min(out.width, 100)), highlight=False)
    failed = result.finalists[result.finalists["error"].fillna("").astype(bool)]
    if len(failed):  # a finalist that failed is missing from the ranking: never silently
        say("warning:", f"{len(failed)} of {len(result.finalists)} finalists failed to simulate and are not "
            f"ranked (column error of finalists.csv); the first: {failed['error'].iloc[0]}", "yellow")
    misses = result.estimate_error()
    if misses["median"] is not None:
        out.print(f"estimate vs simulation over {len(result.finalists)} finalists: median |error| {misses['median']:.1%}, "
                  f"worst {misses['worst']:+.1%} ({misses['worst_layout']})", highlight=False)
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
    from ..scenario.megatron_export import export_notes
    from ..scenario.load import load_scenario
    s = load_scenario(scenario, overrides.split())
    try:
        line = megatron_line(s)
    except BadInput as e:  # a pick Megatron-LM cannot run (recompute: op): said in the line's place
        return f"# {e}"
    notes = export_notes(s)
    return f"{line}  # {'; '.join(notes)}" if notes else line


def sweep(scenario: Path = typer.Argument(..., help="Scenario YAML file."),
          grid: list[str] = typer.Option(..., "--grid", metavar="KEY=V1,V2,...",
                                         help="A key and its values (repeatable; the cartesian product is run)."),
          zip_: list[str] = typer.Option([], "--zip", metavar="KEY,KEY",
                                         help="Grid keys whose values go together, the i-th with the i-th, e.g. "
                                         "schedule,parallel.vpp (repeatable)."),
          out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder for results.csv and sweep.png (and "
                                                 "sweep.pdf) (default reports/<name>-sweep/)."),
          workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Worker processes for the local "
                                                "backend (default: cores)."),
          set_: list[str] = typer.Option([], "--set", callback=distinct_sets,
                                          help=SET_HELP + " Applied before each grid point's values."),
          backend: str = typer.Option("local", "--backend", help="local (process pool) or ray."),
          resume: bool = typer.Option(False, "--resume", help="Skip grid points already in OUT/results.csv."),
          size: str = size_option("screen", "sweep.png"),
          pdf: bool = pdf_option("the figure as sweep.pdf"),
          title: Optional[str] = title_option("sweep.png", "the scenario file and the grid keys in words"),
          xlabel: Optional[str] = typer.Option(None, "--xlabel", help="Label of the x axis (default: the first "
                                               "grid key's name in words, e.g. NIC bandwidth (Gb/s))."),
          as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
          force: bool = force_option("sweep.png or sweep.pdf")):
    """What-if grid over scenario values; results table and plots."""
    from ..report.sweep_plot import PDF_NAME, PLOT_NAME, key_name, plot_sweep
    from ..util.ownership import refuse_foreign
    from ..util.safe_files import refuse_unsafe
    from ..studies.runner import check_backend
    from ..studies.sweep import check_grid_size, parse_grid, parse_zip, planned_outputs, point_count, run_sweep

    from ..scenario.load import load_scenario
    sets = tuple(set_)
    base = load_scenario(scenario, list(sets))  # a bad base scenario fails before any work starts
    check_size(size)
    zips = parse_zip(zip_)
    parsed = parse_grid(grid, zips)
    check_grid_size(parsed, zips)  # counted, not listed, before the folder: 10^8 points are refused at once
    out_dir = out_dir or _default_folder(base.name, "-sweep")  # as run, plan and goodput choose theirs
    _writable_folder(out_dir)
    figures = [out_dir / PLOT_NAME] + ([out_dir / PDF_NAME] if pdf else [])
    # checked again under the folder's lock, which run_sweep takes
    refuse_unsafe([*planned_outputs(out_dir), *figures])
    # results.csv and sweep.json: the results log judges them (--resume); none may be an input
    refuse_foreign([*planned_outputs(out_dir), *figures], True, inputs=(scenario, base.costs.profile))
    refuse_foreign(figures, force)
    try:
        check_backend(backend)
    except ValueError as e:
        raise BadInput(str(e)) from None
    from ..scenario.limits import LOCAL_PROCESSES
    if workers is not None and backend == "local":  # as plan bounds its own: each is a process here
        LOCAL_PROCESSES.check(workers, "--workers")
    if title is None:
        title = f"{scenario.name}: sweep over {', '.join(map(key_name, parsed))}"
    simulated = [0]  # points this command simulated; the rest were in the folder (--resume)

    def advance(done: int, total: int) -> None:
        simulated[0] = done
        progress.update(task, completed=done, total=total)
    with progress_bars("sweep", err) as progress:
        task = progress.add_task(f"{point_count(parsed, zips)} grid points", total=None)
        results = run_sweep(scenario, parsed, out_dir, workers, backend, resume, progress=advance,
                            zips=zips, plot=lambda table: plot_sweep(table, list(parsed), figures, title, zips, size,
                                                                     xlabel), sets=sets)
    import pandas as pd
    table = pd.read_csv(results, dtype={"label": str, "error": str}, keep_default_na=False)
    shown = table.sort_values(list(parsed))[[*parsed, "step_time_s", "mfu", "bubble_fraction", "peak_memory_gib", "error"]]
    if as_json:
        _print_json(json.loads(table.sort_values(list(parsed)).to_json(orient="records")))
    else:
        out.print(shown.to_string(index=False), highlight=False)
    if resume and simulated[0] < point_count(parsed, zips):
        say("note:", f"{point_count(parsed, zips) - simulated[0]} of the {point_count(parsed, zips)} grid points were "
            f"read from {results} (--resume), {simulated[0]} simulated now; without --resume, into a new --out, "
            "all are simulated", "yellow")
    failed = table[table["error"] != ""]
    if len(failed) == len(table):
        raise BadInput(f"every one of the {len(table)} grid points failed (rows in {results}); the first: "
                       f"{failed['label'].iloc[0]}: {failed['error'].iloc[0]}")
    if len(failed):
        say("warning:", f"{len(failed)} of {len(table)} grid points failed; their reasons are in the error column",
            "yellow")
    if not as_json:
        out.print(f"wrote {', '.join(map(str, [results, *figures[:-1]]))} and {figures[-1]}")

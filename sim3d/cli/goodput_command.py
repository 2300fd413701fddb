"""`sim3d goodput`: the share of a long run's wall time that trains under failures, and the
checkpoint interval that maximises it, at the scenario's size and from 1k to 128k GPUs."""

from __future__ import annotations

import math

from pathlib import Path
from typing import Optional

import typer

from .figure_options import check_size, force_option, pdf_option, size_option, title_option
from .support import (JSON_HELP, SET_HELP, BadInput, distinct_sets, _default_folder, _load, _print_json, _writable_folder,
                      out, say)

TABLE_NAME = "goodput.csv"
FIGURE_NAMES = ("goodput.png", "goodput.pdf")


def goodput(scenario: Path = typer.Argument(..., help="Scenario YAML file (its model sets the checkpoint size)."),
            set_: list[str] = typer.Option([], "--set", callback=distinct_sets, help=SET_HELP, metavar="KEY=VALUE"),
            gpus: Optional[int] = typer.Option(None, "--gpus", min=1, help="GPUs of the job (default: the "
                                               "scenario's)."),
            write_gb_s: float = typer.Option(2000.0, "--write-gb-s", min=1e-3, help="Storage write bandwidth for "
                                             "the whole job, GB/s (default: Llama 3's Tectonic, 2 TB/s sustained)."),
            read_gb_s: Optional[float] = typer.Option(None, "--read-gb-s", min=1e-3, help="Read bandwidth when "
                                                      "restoring, GB/s (default: the write bandwidth)."),
            restart_minutes: Optional[float] = typer.Option(None, "--restart-minutes", min=0.0, max=7 * 1440.0,
                                                            help="Restart "
                                                            "time before the checkpoint is read (default: 10, "
                                                            "assumed)."),
            checkpoint_seconds: Optional[float] = typer.Option(None, "--checkpoint-seconds", min=0.0, max=7 * 86400.0,
                                                               help="Time the job stops to checkpoint (default: "
                                                               "the checkpoint's size at the write bandwidth)."),
            out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder for goodput.csv and goodput.png "
                                                   "(default reports/<name>-goodput/)."),
            plots: bool = typer.Option(True, "--plots/--no-plots", help="Write goodput.png."),
            size: str = size_option("screen", "goodput.png"),
            pdf: bool = pdf_option("the figure as goodput.pdf"),
            title: Optional[str] = title_option("goodput.png", "the scenario's name"),
            samples: Optional[int] = typer.Option(None, "--samples", min=1, help="Draw N steps from the scenario's "
                                                  "variability section and count checkpoint intervals and the run in "
                                                  "their mean step (default: the deterministic step)."),
            seed: int = typer.Option(0, "--seed", min=0, help="Seed of the --samples draws."),
            run_days: Optional[float] = typer.Option(None, "--run-days", min=1e-3, max=3650.0,
                                                     help="A run this long in wall-clock days: the steps, tokens and "
                                                     "interruptions it holds, at the effective training time."),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
            force: bool = force_option("goodput.csv or a figure")):
    """Effective training time under failures and the optimal checkpoint interval (Young/Daly)."""
    from rich.table import Table

    from ..util.ownership import refuse_foreign
    from ..util.safe_files import folder_lock, record_outputs, refuse_unsafe, write_with
    from ..studies.goodput import (ASSUMED_RESTART_S, LLAMA3_EFFECTIVE, LLAMA3_GPUS, goodput as model, gpu_counts,
                                   llama3_failures)

    check_size(size)
    if not plots and (size != "screen" or pdf or title is not None):
        raise BadInput("--size, --pdf and --title shape goodput.png, which --no-plots leaves out")
    s = _load(scenario, set_)
    gpus = gpus or s.num_gpus
    from ..scenario.limits import GPUS
    GPUS.check(gpus, "--gpus")
    if gpus % s.cluster.gpus_per_node:
        raise BadInput(f"--gpus {gpus}: not a whole number of {s.cluster.gpus_per_node}-GPU servers")
    folder = _writable_folder(out_dir or _default_folder(s.name, "-goodput"))
    figures = [folder / name for name in (FIGURE_NAMES if pdf else FIGURE_NAMES[:1])] if plots else []
    refuse_unsafe([folder / TABLE_NAME, *figures])
    refuse_foreign([folder / TABLE_NAME, *figures], force, inputs=(scenario,))
    failures = llama3_failures()
    restart_s = ASSUMED_RESTART_S if restart_minutes is None else 60.0 * restart_minutes
    options = dict(failures=failures, write_bytes_per_s=write_gb_s * 1e9,
                   read_bytes_per_s=read_gb_s * 1e9 if read_gb_s else None, restart_s=restart_s,
                   checkpoint_s=checkpoint_seconds)
    try:
        chosen = model(s, gpus, **options)
    except ValueError as e:
        raise BadInput(f"goodput: {e}") from None
    # the job's own size is a row too, whatever the powers of two around it
    rows = [model(s, n, **options).row() for n in sorted({*gpu_counts(s.cluster.gpus_per_node), gpus})]
    step_s, step_source = None, None
    if samples is not None and gpus != s.num_gpus:
        raise BadInput(f"--samples draws the scenario's own layout ({s.num_gpus:,} GPUs), not --gpus {gpus:,}")
    if run_days is not None and not math.isfinite(run_days):  # typer's range lets nan through
        raise BadInput(f"--run-days {run_days}: expected a finite number of days")
    if run_days is not None and gpus != s.num_gpus:
        raise BadInput(f"--run-days counts the scenario's own layout's steps ({s.num_gpus:,} GPUs), not --gpus {gpus:,}")
    if gpus == s.num_gpus:  # the interval in steps needs this layout's step
        from ..api import simulate
        step_s, step_source = simulate(s).step_time, "the deterministic step"
        if samples is not None:
            from .sampling import SampledRun, SamplingOptions
            options_ = SamplingOptions(samples, seed, 1, "local")
            options_.check()
            from ..studies.monte_carlo import check_sampled
            check_sampled(s, samples)
            sampled = SampledRun.of(s, step_s, options_, quiet=as_json)
            step_s, step_source = sampled.stats["mean_s"], f"the mean of {samples:,} sampled steps (seed {seed})"
    run = run_of(chosen, step_s, s, run_days) if run_days is not None else None
    assumptions = [f"failures: {failures.source}"]
    if restart_minutes is None:
        assumptions.append(f"restart: {ASSUMED_RESTART_S / 60:g} min before the checkpoint is read back, assumed "
                           "(not published for Llama 3; --restart-minutes)")
    with folder_lock(folder, "goodput"):
        import pandas as pd
        written = [write_with(folder / TABLE_NAME, lambda temp: pd.DataFrame(rows).to_csv(temp, index=False))]
        if plots:
            from ..report.goodput_plot import plot_goodput
            written += plot_goodput(rows, chosen.row(), (LLAMA3_GPUS, LLAMA3_EFFECTIVE),
                                    f"{s.name}: goodput under failures" if title is None else title, figures, size)
        # an earlier run's figure (a PDF this run was not asked for) would otherwise pass for this run's
        record_outputs(folder, written, {"written_by": "sim3d goodput", "scenario": str(scenario)},
                       [TABLE_NAME, *FIGURE_NAMES])
    if as_json:
        _print_json({**chosen.row(), "step_time_s": step_s, "step_source": step_source, "run": run,
                     "interval_steps": chosen.interval_s / step_s if step_s else None,
                     "assumptions": assumptions, "by_gpus": rows, "files": [str(p) for p in written]})
        return
    table = Table(title=f"{s.name} on {gpus:,} GPUs", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("interruptions per day", f"{chosen.interruptions_per_day:.1f} (one every "
                  f"{chosen.mtbf_s / 3600:.2f} h)")
    table.add_row("checkpoint", f"{chosen.checkpoint_bytes / 1e12:.2f} TB, written in {chosen.checkpoint_s:.1f} s")
    table.add_row("restart", f"{chosen.restart_s / 60:.1f} min with the read-back")
    every = f" = every {chosen.interval_s / step_s:,.0f} steps of {step_s:.2f} s" if step_s else ""
    if step_s:
        table.add_row("step", f"{step_s:.3f} s ({step_source})")
    table.add_row("optimal checkpoint interval", f"{chosen.interval_s / 60:.1f} min (Daly){every}")
    table.add_row("", f"{chosen.young_s / 60:.1f} min (Young)")
    table.add_row("effective training time", f"{chosen.effective:.1%}")
    table.add_row("lost per day", f"{chosen.hours_lost_per_day:.2f} h")
    if run is not None:
        table.add_row(f"a {run_days:g}-day run", f"{run['training_days']:.2f} days training, "
                      f"{_expected(run['interruptions'])} interruptions expected")
        table.add_row("", f"{run['steps']:,.0f} steps, {run['tokens'] / 1e9:,.1f} B tokens")
    out.print(table)
    by_gpus = Table(title="against GPU count", title_justify="left")
    for column in ("GPUs", "interruptions / day", "interval (min)", "effective"):
        by_gpus.add_column(column, justify="right")
    for row in rows:
        by_gpus.add_row(f"{row['gpus']:,}", f"{row['interruptions_per_day']:.1f}", f"{row['interval_min']:.1f}",
                        f"{row['effective_fraction']:.1%}")
    out.print(by_gpus)
    for note in assumptions:
        say("assumed:", note, "yellow")
    out.print(f"wrote {', '.join(p.name for p in written)} to {folder}/", highlight=False)


def run_of(chosen, step_s: float, scenario, days: float) -> dict:
    """What a run of `days` wall-clock days holds at `chosen`'s effective training time: its
    training days, steps of `step_s`, tokens (the global batch's per step) and the interruptions
    expected in it."""
    wall_s = days * 86400.0
    training_s = wall_s * chosen.effective
    steps = training_s / step_s
    return {"days": days, "training_days": training_s / 86400.0, "steps": steps,
            "tokens": steps * scenario.training.global_batch * scenario.model.seq_len,
            "interruptions": wall_s / chosen.mtbf_s}


def _expected(count: float) -> str:
    """An expected count as a reader takes it: 234, 3.5, 0.0018 (never 0 for 0.5)."""
    return f"{count:,.0f}" if count >= 10 else f"{count:.2g}"

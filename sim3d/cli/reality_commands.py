"""`sim3d execute`, `compare` and `calibrate`: the simulator against real runs and kernels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .figure_options import force_option
from .progress import status_messages
from .support import (JSON_HELP, SET_HELP, BadInput, distinct_sets, _default_folder, _load, _print_json, _writable_file,
                      _writable_folder, err, out, say)


def execute(scenario: Path = typer.Argument(..., help="Scenario YAML file (a small model)."),
            set_: list[str] = typer.Option([], "--set", callback=distinct_sets, help=SET_HELP, metavar="KEY=VALUE"),
            steps: int = typer.Option(3, "--steps", min=1, help="Training steps to run and time (the first is not timed)."),
            backend: str = typer.Option("gloo", "--backend", help="gloo (CPU) or nccl (GPUs)."),
            check: bool = typer.Option(False, "--check", help="Compare with a single-process reference."),
            out_dir: Optional[Path] = typer.Option(None, "--out", help="Where trace.csv goes (default reports/<name>-exec/)."),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
            routing: str = typer.Option("topk", "--routing", help="MoE: topk (the router's scores) or balanced "
                                        "(each expert the same load, as benchmarks force)."),
            force: bool = force_option("trace.csv or scenario.yaml")):
    """Run the scenario's layout for real on a small GPT with the same schedule objects."""
    from ..executor import ExecutorError, ExecutorRefusal, RankKilled, execute as run_executor
    from ..util.ownership import refuse_foreign
    from ..util.safe_files import folder_lock, record_outputs, refuse_unsafe

    if backend not in ("gloo", "nccl"):
        raise BadInput(f"--backend: expected gloo or nccl, got {backend!r}")
    from ..scenario.limits import EXECUTOR_STEPS
    EXECUTOR_STEPS.check(steps, "--steps")
    # The executor runs on this machine: the cluster becomes one node of tp*pp*dp*cp devices.
    sets = [*set_, *_local_cluster(scenario, set_)]
    s = _load(scenario, sets)
    folder = _writable_folder(out_dir or _default_folder(s.name, "-exec"))
    from ..executor.launch import SCENARIO_NAME
    refuse_unsafe([folder / "trace.csv", folder / SCENARIO_NAME])  # the executor writes them in place, after the run
    refuse_foreign([folder / "trace.csv", folder / SCENARIO_NAME], force, inputs=(scenario, s.costs.profile),
                   writer="sim3d execute")
    try:
        with folder_lock(folder, "execute"):
            with status_messages(f"executing {s.name} on {s.world_size} process(es) ...", err,
                                 every_message=True) as status:
                result = run_executor(s, steps=steps, backend=backend, check=check, out_dir=folder,
                                      progress=status.update, routing=routing)
            # a run's outputs beside this measured trace.csv would pass for its own
            from ..report.outputs import run_output_names
            written = [p for p in (result.trace_path, result.scenario_path) if p]
            removed = record_outputs(folder, written, {"written_by": "sim3d execute", "scenario": str(scenario),
                                                       "sets": sets, "ran": result.numerics,
                                                       "step_times_s": result.step_times_s,
                                                       "median_step_s": result.median_step_s},
                                     run_output_names() | {SCENARIO_NAME})
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
                     **result.numerics,  # precision, dtypes, attention kernel, device
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


def compare(sim_trace: Path = typer.Argument(..., help="trace.csv / .parquet of a simulated run (or a folder)."),
            real_trace: Path = typer.Argument(..., help="trace.csv / .parquet of an executed run (or a folder), or "
                                              "a PyTorch profiler trace (.json / .json.gz) of the real job, or a "
                                              "folder of them."),
            more_traces: list[Path] = typer.Argument(None, help="The profiler traces of the job's other ranks.",
                                                     show_default=False),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Align two traces action by action; print per-kind and step-time error. Against a profiler
    trace: the simulated step beside the traced one, part by part."""
    from .trace_commands import compare_with_traced, is_profiler_trace
    traced_folder = real_trace.is_dir() and not (real_trace / "trace.csv").exists() \
        and any(is_profiler_trace(p) for p in real_trace.iterdir())
    if is_profiler_trace(real_trace) or traced_folder:
        compare_with_traced(sim_trace, [real_trace, *(more_traces or [])], as_json)
        return
    if more_traces:
        raise BadInput(f"{', '.join(map(str, more_traces))}: more than two traces compare only as profiler traces "
                       "(.json / .json.gz) of one job's ranks")
    from ..report.compare import UnusableTrace, compare_traces
    from ..trace import read_trace

    def load(path: Path):
        path = path / "trace.csv" if path.is_dir() else path
        if not path.is_file():
            raise BadInput(f"{path}: no such trace file")
        try:
            return read_trace(path)
        except ValueError as e:  # also undecodable bytes (UnicodeDecodeError is a ValueError)
            raise BadInput(f"{path}: not a trace CSV with the columns of docs/contracts.md#trace-columns "
                           f"({e})") from None

    from ..report.compare import UnrelatedTraces, executed_median, run_differences
    sim, real = load(sim_trace), load(real_trace)
    differences = run_differences(sim_trace, real_trace)  # None where a folder does not say what ran
    differ = f"the two runs differ in {differences.describe()}; {differences.remedy()}" \
        if differences and differences.keys else None
    try:
        result = compare_traces(sim, real, executed_median(real_trace))
    except UnrelatedTraces as e:
        raise BadInput(f"{sim_trace} vs {real_trace}: {e}" + (f"; {differ}" if differ else "")) from None
    except UnusableTrace as e:
        raise BadInput(f"{sim_trace} vs {real_trace}: {e}") from None
    for why in (differ, differences and differences.unpriced()):
        if why:
            say("warning:", why, "yellow")
    if as_json:
        _print_json({**result.to_dict(), "differences": differences.to_dict() if differences else None})
    else:
        out.print(result.render())


def calibrate(device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
              quick: bool = typer.Option(False, "--quick", help="Small grids (minutes on a CPU)."),
              scenario: Optional[Path] = typer.Option(None, "--scenario", help="Also measure this scenario's GEMMs and "
                                            "its executor's whole blocks, in its precision (on a CPU also how "
                                            "much its ranks slow each other)."),
              out_path: Optional[Path] = typer.Option(None, "--out", help="Profile CSV path."),
              fit: bool = typer.Option(False, "--fit", help="Then derive the analytical model's constants from the "
                                       "profile, with their cross-validated error (<profile>.fit.json)."),
              profile: Optional[Path] = typer.Option(None, "--profile", help="With --fit: fit this existing "
                                                     "profile and measure nothing."),
              from_trace: list[Path] = typer.Option([], "--from-trace", help="A PyTorch profiler trace (.json or "
                                                    ".json.gz) of the user's own job, one per rank (repeatable), or a "
                                                    "folder of them: "
                                                    "the profile is read from it, nothing is measured."),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """Measure kernels and collectives; write a profile CSV plus provenance JSON. With
    --from-trace: the profile of the user's own stack, read from their profiler traces."""
    if from_trace:
        if fit or profile is not None:
            raise BadInput("--from-trace reads a profile from traces; fit it afterwards with --fit --profile")
        from .trace_commands import calibrate_from_trace
        calibrate_from_trace(from_trace, out_path, scenario, as_json)
        return
    if profile is not None:
        if not fit:
            raise BadInput("--profile is for --fit (fit an existing profile)")
        if not profile.is_file():
            raise BadInput(f"--profile {profile}: " + ("not a regular file (a profile is a CSV file)" if profile.exists()
                                                       else "no such profile"))
        _fit_profile(profile, as_json, {})
        return
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
    with status_messages("calibrating ...", err) as status:
        path = run_calibration(device=device, quick=quick, scenario_path=str(scenario) if scenario else None,
                               out=str(out_path) if out_path else None, progress=lambda msg: status.update(msg))
    provenance = json.loads(Path(path).with_suffix(".json").read_text())
    written = {"profile": str(path), "provenance": str(Path(path).with_suffix(".json")),
               "unstable": provenance.get("unstable") or []}
    if not as_json:
        out.print(f"wrote {path} and {Path(path).with_suffix('.json')}")
    if fit:
        _fit_profile(Path(path), as_json, written)
    elif as_json:
        _print_json(written)
    for reason in provenance.get("unstable") or []:
        say("warning:", f"unstable measurement: {reason}; flagged in the provenance, and every prediction "
            "using this profile will say so (measure again on a quiet machine)", "yellow")


def _fit_profile(path: Path, as_json: bool, measured: dict) -> None:
    """The analytical model's constants fitted to `path`, each with its error on the rows it was
    fitted on and on rows held out (sim3d/costs/fit.py), written beside it as <profile>.fit.json."""
    from ..costs.fit import describe, fit_file
    try:
        rows = max(0, sum(1 for _ in path.open(encoding="utf-8", errors="replace")) - 1)
        # a minute for 600k rows here (issue 49): said before, not after
        with status_messages(f"fitting the analytical model to {rows:,} profile rows ...", err, every_message=True):
            result, record_path = fit_file(path)
    except ValueError as e:
        raise BadInput(f"--fit {path}: {e}") from None
    if as_json:
        _print_json({**measured, "fit": str(record_path),
                     "constants": [{"name": c.name, "value": c.value, "unit": c.unit, "rows": c.rows,
                                    "fit_mape": c.fit_mape, "cv_mape": c.cv_mape} for c in result.constants]})
        return
    for line in describe(result):
        out.print(line, highlight=False)
    out.print(f"wrote {record_path}", highlight=False)

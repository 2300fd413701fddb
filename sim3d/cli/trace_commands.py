"""`sim3d calibrate --from-trace` and `sim3d compare REPORT TRACE.json`: a profile of the user's
own stack from their PyTorch profiler traces, and a simulated step beside a traced one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .support import BadInput, _print_json, _writable_file, out, say

TRACE_SUFFIXES = (".json", ".json.gz")
UNCLASSIFIED_WARNING = 0.10  # a profile missing a tenth of the GPU's time is worth a word
WAITING_GPU = 0.10  # a traced GPU idle for a tenth of its step is worth a word, as above


def is_profiler_trace(path: Path) -> bool:
    """A Kineto trace file by its name (sim3d's own trace.json is refused by the reader)."""
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES)


def trace_files(paths: list[Path]) -> list[Path]:
    """The trace files named, a folder standing for the traces in it (one per rank, as
    torch.profiler.tensorboard_trace_handler writes them)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if is_profiler_trace(p))
            if not found:
                raise BadInput(f"{path}: a folder with no profiler trace in it (*.json or *.json.gz)")
            files += found
        else:
            files.append(path)
    return files


def _refuse_foreign(out_path: Path) -> None:
    """A CSV already there is replaced only when sim3d wrote it: its provenance JSON beside it
    names the profile schema (calibrate and calibrate --from-trace both write one)."""
    if not out_path.exists():
        return
    try:
        ours = "schema" in json.loads(out_path.with_suffix(".json").read_text())
    except (OSError, ValueError, TypeError):
        ours = False
    if not ours:
        raise BadInput(f"--out {out_path}: exists and is not a profile sim3d wrote (no provenance JSON beside it); "
                       "name a new file, or remove it first")


def calibrate_from_trace(traces: list[Path], out_path: Path | None, scenario: Path | None, as_json: bool) -> None:
    from ..costs.kineto import read_traces
    from ..costs.trace_profile import write_profile
    if out_path is None:
        raise BadInput("--from-trace: name the profile to write with --out PROFILE.csv")
    _writable_file(out_path, "--out", (".csv",))
    _refuse_foreign(out_path)
    read = read_traces(trace_files(traces))
    more = ((), {})
    if scenario is not None:  # the job the traces ran: its memory-bound kernels per layer
        from ..costs.trace_memory import memory_rows
        from ..scenario.load import load_scenario
        more = memory_rows(read, load_scenario(scenario))
    provenance = write_profile(read, out_path, command=" ".join(["sim3d", *sys.argv[1:]]), more=more)
    notes = []
    if scenario is not None:  # what the scenario now prices from the trace
        from ..api import simulate
        from ..costs.profile import Profile, profile_warnings
        result = simulate(scenario, sets=[f"costs.profile={out_path}"])
        notes = profile_warnings(result.scenario, Profile.load(out_path))
        provenance = {**provenance, "priced_from_profile": [what for what, source in result.explain()
                                                             if source.startswith("profile")]}
    if as_json:
        _print_json({**provenance, "profile": str(out_path), "warnings": notes})
        return
    out.print(f"wrote {out_path} and {out_path.with_suffix('.json')}", highlight=False)
    for trace in provenance.get("traces", []):
        out.print(f"  rank {trace.get('rank')}: {trace.get('path')} ({provenance.get('device_name', '?')}, "
                  f"{trace.get('kernels', '?')} kernels, steps {', '.join(map(str, trace.get('steps', [])))})",
                  highlight=False)
    rows = provenance.get("rows", {})
    out.print("  rows: " + ", ".join(f"{op} {count}" for op, count in sorted(rows.items())), highlight=False)
    for reason in provenance.get("left_out", []):
        say("left out:", reason, "yellow")
    share = provenance.get("unclassified_share", 0.0)
    if share > UNCLASSIFIED_WARNING:
        top = ", ".join(str(k) for k in list(provenance.get("unclassified_kernels", []))[:3])
        say("warning:", f"{share:.1%} of the GPU's kernel time is in kernels sim3d could not classify ({top})",
            "yellow")
    priced = [what.removeprefix("compute: ") for what in provenance.get("priced_from_profile", [])]
    if priced:
        out.print(f"{scenario} now prices from it: {', '.join(priced)}", highlight=False)
    for note in notes:
        say("warning:", note, "yellow")


def compare_with_traced(report: Path, traces: list[Path], as_json: bool) -> None:
    """The simulated step of REPORT (its summary.json) beside the traced one, part by part:
    the parts are re-priced from the scenario the report's manifest names."""
    from ..costs.kineto import read_traces
    from ..costs.step_parts import simulated_parts, traced_parts
    from ..costs.trace_profile import step_truth
    from ..report.compare import run_scenario
    summary_path = report / "summary.json" if report.is_dir() else report
    if not summary_path.is_file():
        raise BadInput(f"{report}: no summary.json (a folder `sim3d run` wrote, or its summary.json)")
    try:
        summary = json.loads(summary_path.read_text())
        simulated = float(summary["step_time_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadInput(f"{summary_path}: not a sim3d summary ({e})") from None
    truth = step_truth(read_traces(trace_files(traces)))
    traced = json.loads(truth.to_json())
    error = simulated / truth.step_time_s - 1
    idle = max(0.0, 1 - truth.gpu_busy_share)
    bubble = _simulated_idle(summary_path.parent / "trace.csv", summary)  # idle the simulation has too
    ran = run_scenario(summary_path.parent)
    sim_parts = simulated_parts(ran.scenario) if ran is not None else {}
    real_parts = traced_parts(traced["kinds_s"])
    rows = [("step", simulated, truth.step_time_s),
            ("exposed communication", summary.get("comm_exposed_s"), truth.comm_exposed_s)]
    rows += [(part, sim_parts.get(part), real_parts.get(part, 0.0))
             for part in [*sim_parts, *(p for p in real_parts if p not in sim_parts)]]
    differing = [(abs(s - r), part, s, r) for part, s, r in rows[2:] if s is not None]
    largest = max(differing) if differing else None
    if as_json:
        _print_json({"simulated": summary_path.as_posix(), "traced_files": [str(p) for p in traces],
                     "step_error": error, "simulated_step_s": simulated, "traced": traced, "traced_gpu_idle_share": idle,
                     "parts": {part: {"simulated_s": s, "traced_s": r} for part, s, r in rows},
                     "largest_difference": largest[1] if largest else None})
        return
    from rich.table import Table
    table = Table(title=f"{summary.get('name', report)}: simulated vs traced (seconds per step)", title_justify="left")
    for column in ("part", "simulated s", "traced s", "difference"):
        table.add_column(column, justify="left" if column == "part" else "right")
    for part, sim_s, traced_s in rows:
        table.add_row(part, "" if sim_s is None else f"{sim_s:.4f}", f"{traced_s:.4f}",
                      "" if sim_s is None else f"{sim_s - traced_s:+.4f}")
    out.print(table)
    out.print(f"step error {error:+.1%} (simulated against the traced median of {len(truth.step_s)} step(s), "
              f"{truth.step_min_s:.4f}-{truth.step_max_s:.4f} s, spread {truth.spread:.1%}); "
              f"unclassified kernel time {truth.unclassified_share:.1%}; traced GPU busy {1 - idle:.1%} of the step",
              highlight=False)
    if idle - bubble > WAITING_GPU:
        beyond = f", {idle - bubble:.0%} more than the simulated busiest rank" if bubble else ""
        say("note:", f"the traced GPU ran nothing for {idle:.0%} of the step{beyond}: it waited on its host "
            "(Python, kernel launches, synchronizations), its input or a pipeline neighbour; sim3d prices the GPUs' "
            "and the network's work and the schedule's waits, not the host's, so a step the host paces comes out "
            "fast (docs/calibration.md, 'A step the host paces')", "yellow")
    if largest:
        out.print(f"largest difference: {largest[1]} ({largest[2]:.4f} s simulated, {largest[3]:.4f} s traced)",
                  highlight=False)
    elif ran is None:
        say("note:", f"{report}: its manifest names no scenario that loads, so only the step is compared", "yellow")


def _simulated_idle(trace_csv: Path, summary: dict) -> float:
    """The share of the simulated step the busiest rank runs nothing (no compute, collective or
    pipeline transfer row in the report's trace.csv), to set beside the traced busiest GPU's; the
    summary's bubble_fraction (the least busy rank's) where the report has no trace."""
    import pandas as pd

    from ..costs.trace_profile import covered, merged
    try:
        rows = pd.read_csv(trace_csv, usecols=["rank", "start_s", "end_s"]).dropna()
    except (OSError, ValueError):
        return float(summary.get("bubble_fraction") or 0.0)
    step = float(rows["end_s"].max() - rows["start_s"].min()) if len(rows) else 0.0
    if step <= 0:
        return 0.0
    busiest = max(covered(merged(zip(spans["start_s"], spans["end_s"]))) for _, spans in rows.groupby("rank"))
    return max(0.0, 1 - busiest / step)

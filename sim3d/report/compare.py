"""Put a simulated and an executed trace side by side (`sim3d compare A B`).

Both traces have the columns of docs/contracts.md#trace-columns (`rank, stage, chunk,
microbatch, kind, stream, start_s, end_s, bytes, peer`). The simulated one may be folded (ranks 0..pp-1 of one
pipeline) while the executed one has every rank, so actions are aligned on
(pipeline rank, kind, microbatch, chunk), where a rank's pipeline rank is the stage of its
chunk 0 (the same in loop and V placement), and durations are averaged over the ranks that
share a key (tensor- and data-parallel replicas). Only the IR's action kinds are aligned: the
engine's TP_COMM / CP_COMM / EP_COMM rows say how much of a compute action was exposed
communication, which the executor's compute rows contain. Errors are relative: (sim - real) / real.
The step time of a trace is max(end) - min(start) over its compute-stream actions.

Where the two traces sit in run folders, each folder says which scenario ran (`sim3d execute`
writes it as `scenario.yaml`; `sim3d run`'s manifest names its file and `--set` values), and
`run_differences` lists the keys whose values differ, with the `--set` values that would
simulate what was executed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..schedule.ir import Kind
from ..trace import STREAM_OF_KIND, check_trace

KEY = ["pp_rank", "kind", "microbatch", "chunk"]
KIND_ORDER = [k.value for k in Kind]  # the IR's order: compute, point-to-point, data parallel


def _with_pp_rank(trace: pd.DataFrame) -> pd.DataFrame:
    t = trace.copy()
    first_chunk = t[t["chunk"] == 0].groupby("rank")["stage"].min()
    fallback = t.groupby("rank")["stage"].min()
    t["pp_rank"] = t["rank"].map(first_chunk).fillna(t["rank"].map(fallback)).astype(int)
    t["kind"] = t["kind"].astype(str)
    t.loc[t["kind"] == "OPT_STEP", "chunk"] = -1  # not bound to a chunk (traces differ: 0 or -1)
    t["duration_s"] = t["end_s"] - t["start_s"]
    return t


def step_time(trace: pd.DataFrame) -> float:
    compute = trace[trace["stream"] == "compute"]
    return float(compute["end_s"].max() - compute["start_s"].min()) if len(compute) else 0.0


def _rel(sim: float, real: float) -> float:
    return (sim - real) / real if real else (0.0 if sim == real else float("inf"))


@dataclass
class CompareResult:
    per_kind: pd.DataFrame  # kind, n, sim_mean_s, real_mean_s, rel_err
    per_action: pd.DataFrame  # pp_rank, kind, microbatch, chunk, sim_s, real_s, rel_err
    sim_step_s: float
    real_step_s: float
    unmatched_sim: int  # aligned keys present only in the simulated trace
    unmatched_real: int  # ... only in the executed trace
    # the executed run's median step over its steps (the trace holds one), and how many
    real_median: tuple[float, int] | None = None

    @property
    def step_rel_err(self) -> float:
        return _rel(self.sim_step_s, self.real_step_s)

    def to_dict(self) -> dict:
        median = {} if self.real_median is None else {
            "real_median_step_s": self.real_median[0], "real_steps": self.real_median[1],
            "median_step_rel_err": _rel(self.sim_step_s, self.real_median[0])}
        return {"sim_step_s": self.sim_step_s, "real_step_s": self.real_step_s, "step_rel_err": self.step_rel_err,
                **median, "unmatched_sim": self.unmatched_sim, "unmatched_real": self.unmatched_real,
                "per_kind": self.per_kind.to_dict(orient="records")}


    def render(self):
        """A rich Table: per-kind mean durations and the step time, sim vs real."""
        from rich.table import Table

        table = Table(title="simulated vs executed", caption=(
            f"{self.unmatched_sim} simulated / {self.unmatched_real} executed action keys unmatched"
            if self.unmatched_sim or self.unmatched_real else None))
        for col in ("action", "n", "sim (ms)", "real (ms)", "error"):
            table.add_column(col, justify="left" if col == "action" else "right")
        for row in self.per_kind.itertuples():
            table.add_row(row.kind, str(row.n), f"{row.sim_mean_s * 1e3:.3f}", f"{row.real_mean_s * 1e3:.3f}",
                          f"{row.rel_err:+.1%}")
        table.add_row("step", "", f"{self.sim_step_s * 1e3:.3f}", f"{self.real_step_s * 1e3:.3f}",
                      f"{self.step_rel_err:+.1%}", style="bold", end_section=self.real_median is None)
        if self.real_median is not None:  # one step of a shared CPU varies; the median of many less
            median, steps = self.real_median
            table.add_row(f"step, median of {steps} executed", "", f"{self.sim_step_s * 1e3:.3f}",
                          f"{median * 1e3:.3f}", f"{_rel(self.sim_step_s, median):+.1%}", style="bold",
                          end_section=True)
        return table


class UnusableTrace(ValueError):
    """A trace that holds no step to compare (its compute rows take no time)."""


class UnrelatedTraces(ValueError):
    """The two traces are not of the same layout and schedule; a table of their differences
    would be noise."""


# Traces of one layout and schedule align on every compute action; a few may differ (an
# executed trace holds one step, a zero-bubble W may be folded into B), a different run does not.
MIN_ALIGNED_COMPUTE = 0.9


def _require_same_run(both: pd.DataFrame, s: pd.DataFrame, r: pd.DataFrame) -> None:
    compute = both[both["kind"].isin(["F", "B", "BI", "BW"])]
    aligned = int((compute["_merge"] == "both").sum())
    sim_n = aligned + int((compute["_merge"] == "left_only").sum())
    real_n = aligned + int((compute["_merge"] == "right_only").sum())
    if aligned < MIN_ALIGNED_COMPUTE * max(sim_n, real_n, 1):
        def shape(t):
            c = t[t["kind"].isin(["F", "B", "BI", "BW"])]
            return (f"{c['pp_rank'].nunique()} pipeline rank(s), {c['microbatch'].nunique()} micro-batch(es), "
                    f"{c['chunk'].nunique()} chunk(s)")
        raise UnrelatedTraces(f"only {aligned} of {sim_n} simulated and {real_n} executed compute actions align; "
                              f"these traces are not of the same layout and schedule (simulated: {shape(s)}; "
                              f"executed: {shape(r)})")


def compare_traces(sim: pd.DataFrame, real: pd.DataFrame,
                   real_median: tuple[float, int] | None = None) -> CompareResult:
    """Align two traces action by action (see the module docstring) and report errors;
    `real_median`: the executed run's (median step, steps timed), shown beside its traced step."""
    sim, real = check_trace(sim), check_trace(real)
    for name, trace in (("simulated", sim), ("executed", real)):
        unknown = ~trace["kind"].astype(str).isin(list(STREAM_OF_KIND))
        if unknown.any():  # it would align with nothing, and the runs would look unrelated
            row = int(unknown.to_numpy().argmax())
            raise UnusableTrace(f"the {name} trace's data row {row + 1}: kind={trace['kind'].iloc[row]!r} is none of "
                                f"{', '.join(STREAM_OF_KIND)} (docs/contracts.md#trace-columns)")
        if step_time(trace) <= 0:  # every error would be infinite
            raise UnusableTrace(f"the {name} trace's step lasts 0 s: its compute rows start and end at the same "
                             "time (start_s, end_s); is it a trace of a run?")
    s, r = _with_pp_rank(sim), _with_pp_rank(real)
    s, r = s[s["kind"].isin(KIND_ORDER)], r[r["kind"].isin(KIND_ORDER)]
    s_mean = s.groupby(KEY, as_index=False)["duration_s"].mean().rename(columns={"duration_s": "sim_s"})
    r_mean = r.groupby(KEY, as_index=False)["duration_s"].mean().rename(columns={"duration_s": "real_s"})
    both = s_mean.merge(r_mean, on=KEY, how="outer", indicator=True)
    _require_same_run(both, s, r)
    matched = both[both["_merge"] == "both"].drop(columns="_merge").reset_index(drop=True)
    matched["rel_err"] = [_rel(a, b) for a, b in zip(matched["sim_s"], matched["real_s"])]
    per_kind = (matched.groupby("kind", as_index=False)
                .agg(n=("sim_s", "size"), sim_mean_s=("sim_s", "mean"), real_mean_s=("real_s", "mean")))
    per_kind["rel_err"] = [_rel(a, b) for a, b in zip(per_kind["sim_mean_s"], per_kind["real_mean_s"])]
    order = {k: i for i, k in enumerate(KIND_ORDER)}
    per_kind = per_kind.sort_values("kind", key=lambda col: col.map(lambda k: order.get(k, len(order))))
    return CompareResult(per_kind.reset_index(drop=True), matched, step_time(sim), step_time(real),
                         int((both["_merge"] == "left_only").sum()), int((both["_merge"] == "right_only").sum()),
                         real_median)


# ---- which scenario each run was -----------------------------------------------------------
# What does not change the work a run does: its name, the machine (a simulated cluster.gpu
# prices an executed CPU run through the profile in costs) and where the costs come from.
NOT_THE_RUN = ("name", "cluster", "costs")


@dataclass(frozen=True)
class RunScenario:
    scenario: object  # the Scenario
    source: str  # where it was read, for messages
    folder: Path
    as_run: bool  # the executor's own scenario.yaml, which `sim3d run` can take as it is
    device: str | None = None  # where an executed run ran ("cpu", "cuda:0 (...)"), from its manifest


@dataclass(frozen=True)
class Differences:
    keys: list[tuple[str, object, object]]  # (key, simulated value, executed value)
    sim: RunScenario
    real: RunScenario

    def describe(self) -> str:
        return ", ".join(f"{k} (simulated {_text(a)}, executed {_text(b)})" for k, a, b in self.keys)

    def sets(self) -> list[str]:
        """The --set values that make the simulated run the executed one; the cluster too when
        the world sizes differ (the executor ran one node of a process per rank)."""
        out = [f"{k}={_text(b)}" for k, a, b in self.keys]
        s, r = self.sim.scenario, self.real.scenario
        if s.world_size != r.world_size:
            out += [f"cluster.{k}={getattr(r.cluster, k)}" for k in ("nodes", "gpus_per_node")
                    if getattr(s.cluster, k) != getattr(r.cluster, k)]
        return out

    def remedy(self) -> str:
        profile = self.sim.scenario.costs.profile or "PROFILE"
        fix = "add " + " ".join(f"--set {x}" for x in self.sets()) + " to the simulated run"
        if self.real.as_run:
            fix = (f"simulate what was executed: sim3d run {self.real.source} --set costs.profile={profile} "
                   f"--out {self.sim.folder} (or {fix})")
        return fix

    def unpriced(self) -> str | None:
        """Why the simulated step cannot be this executed CPU run's: no profile priced it."""
        s = self.sim.scenario
        if self.real.device != "cpu" or s.costs.profile:
            return None
        return (f"the simulated run priced cluster.gpu {s.cluster.gpu} (no costs.profile), the executed one ran "
                f"on this CPU: measure it (sim3d calibrate --device cpu --quick --fit --scenario "
                f"{self.real.source} --out profiles/cpu.csv) and simulate with --set costs.profile=profiles/cpu.csv")

    def to_dict(self) -> list[dict]:
        return [{"key": k, "simulated": a, "executed": b} for k, a, b in self.keys]


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _flat(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def run_scenario(path: Path) -> RunScenario | None:
    """The scenario whose outputs are in `path` (a run folder, or a trace file in one): the
    executor's scenario.yaml, else the manifest's scenario file with its --set values; None
    where the folder does not say, or what it names no longer loads."""
    from ..errors import ScenarioError
    from ..executor.launch import SCENARIO_NAME
    from ..scenario.load import load_scenario
    from ..util.safe_files import MANIFEST_NAME
    folder = path if path.is_dir() else path.parent
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text()) if (folder / MANIFEST_NAME).is_file() else {}
        device = (manifest.get("ran") or {}).get("device")
        if (folder / SCENARIO_NAME).is_file():
            return RunScenario(load_scenario(folder / SCENARIO_NAME), str(folder / SCENARIO_NAME), folder, True, device)
        file, sets = manifest["scenario"], manifest.get("sets") or []
        shown = " ".join([file, *(f"--set {x}" for x in sets)])
        return RunScenario(load_scenario(file, sets), shown, folder, False, device)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ScenarioError):
        return None


def executed_median(path: Path) -> tuple[float, int] | None:
    """(median step, steps timed) that `sim3d execute` recorded in the manifest of `path`'s
    folder; the first step is a warm-up and not timed (executor/launch.py)."""
    from ..util.safe_files import MANIFEST_NAME
    folder = path if path.is_dir() else path.parent
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
        median, steps = float(manifest["median_step_s"]), len(manifest["step_times_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (median, max(steps - 1, 1)) if median > 0 else None


def run_differences(sim_path: Path, real_path: Path) -> Differences | None:
    """The scenario keys whose values differ between a simulated and an executed run (except
    NOT_THE_RUN's sections); None where either folder does not say what ran."""
    sim, real = run_scenario(sim_path), run_scenario(real_path)
    if sim is None or real is None:
        return None
    a, b = (dict(_flat(x.scenario.model_dump(mode="json"))) for x in (sim, real))
    keys = [(k, a.get(k), b.get(k)) for k in [*a, *(k for k in b if k not in a)]
            if k.split(".")[0] not in NOT_THE_RUN and a.get(k) != b.get(k)]
    return Differences(keys, sim, real)

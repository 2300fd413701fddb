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
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..schedule.ir import Kind
from ..trace import check_trace

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

    @property
    def step_rel_err(self) -> float:
        return _rel(self.sim_step_s, self.real_step_s)

    def to_dict(self) -> dict:
        return {"sim_step_s": self.sim_step_s, "real_step_s": self.real_step_s, "step_rel_err": self.step_rel_err,
                "unmatched_sim": self.unmatched_sim, "unmatched_real": self.unmatched_real,
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
                      f"{self.step_rel_err:+.1%}", style="bold", end_section=True)
        return table


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


def compare_traces(sim: pd.DataFrame, real: pd.DataFrame) -> CompareResult:
    """Align two traces action by action (see the module docstring) and report errors."""
    sim, real = check_trace(sim), check_trace(real)
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
                         int((both["_merge"] == "left_only").sum()), int((both["_merge"] == "right_only").sum()))

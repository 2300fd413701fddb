"""`sim3d plan`: which layout to run a model on N GPUs, in two tiers.

Tier one (tier_one.py) prices the layouts of the space (space.py): the exact memory model
first (the model states alone, then the full per-rank peak), then, for those that fit, a
closed-form step estimate (estimate.py); it leaves unpriced the layouts whose floor shows they
cannot be among the best `finalists` (unless `exhaustive`). Tier two simulates the best
`finalists` on the event engine, and those are ranked by the simulated step; the estimate's
error on each is kept, so the first tier's error is visible.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from ..engine.run import replay_step
from ..util.lifetime import die_with_parent
from ..model.memory import memory_report
from ..scenario.load import load_scenario
from ..errors import ScenarioError
from .pilot import PILOT_BATCH, PILOT_PLACES, pilot
from .space import Layout, Space
from .tier_one import LAYOUT_COLUMNS, WORKER, completed, layout_groups, price, price_batch, space_key, worker_state

FINALISTS = 200


@dataclass
class Plan:
    space: Space
    # every layout: its fields, memory verdict and estimate; peak_gib is the model states +
    # reserve (a lower bound) where those alone overflow, as why_not says
    candidates: pd.DataFrame
    dropped: dict[str, int]  # combinations each exclusion removed (space.py)
    finalists: pd.DataFrame  # the simulated ones, best simulated step first

    @property
    def fitting(self) -> int:
        """Priced layouts that fit (unpriced ones are not counted: see `priced`)."""
        return int(self.candidates["fits"].sum())

    @property
    def priced(self) -> int:
        """Layouts with a memory verdict: all of them, less those the bounded search left out."""
        return int(self.candidates["fits"].notna().sum())

    def estimate_error(self) -> dict:
        """How far tier one was from the simulation over the finalists: median |error| and
        the worst one, with its layout."""
        done = self.finalists.dropna(subset=["est_error"]) if not self.finalists.empty else self.finalists
        if done.empty:
            return {"median": None, "worst": None, "worst_layout": None}
        worst = done.loc[done["est_error"].abs().idxmax()]
        return {"median": float(done["est_error"].abs().median()), "worst": float(worst["est_error"]),
                "worst_layout": describe(worst)}

    def why_none(self) -> str:
        gpus = self.space.gpus
        if self.candidates.empty:
            reasons = ", ".join(f"{n:,} {why}" for why, n in self.dropped.items() if n)
            # a fixed size that divides no GPU count of this plan is the whole story
            misfit = [f"parallel.{k}={v[0]}" for k, v in self.space.choices.items()
                      if k in ("tp", "pp", "cp", "dp") and len(v) == 1 and gpus % v[0]]
            hint = (f"; --fix {' '.join(misfit)} does not divide {gpus} GPUs (tp x pp x cp x dp is the GPU count)"
                    if misfit else "")
            return f"no valid layout of this model on {gpus} GPUs (excluded: {reasons}){hint}"
        best = self.candidates.sort_values("peak_gib").iloc[0]
        bound = "at least " if best["why_not"].startswith("model states") else ""
        return (f"none of {len(self.candidates):,} layouts of this model on {gpus} GPUs fits in memory; the "
                f"closest, {describe(best)}, needs {bound}{best['peak_gib']:.1f} GiB of "
                f"{self.space.base.gpu.hbm_gib:.4g} usable ({best['why_not']}; --headroom lowers what is usable)")


def describe(row) -> str:
    text = f"tp{row['tp']} pp{row['pp']} dp{row['dp']}"
    text += "".join(f" {k}{row[k]}" for k in ("cp", "ep", "vpp") if row[k] > 1)
    return f"{text} mb{row['micro_batch']} {row['schedule']} {row['recompute']}"


# ---- tier two ------------------------------------------------------------------------------

def _tier_two(args: tuple) -> dict:
    """One finalist simulated as `sim3d run` would (its scenario re-read and checked from the
    file with its overrides), on the fabric and group links this worker already priced.
    Never raises: a finalist's failure is its row's error."""
    key, base, gpus, choices, path, overrides, layout = args
    from ..analysis.summary import summarize
    from ..schedule import ScheduleConstraint, ScheduleError
    try:
        estimator = worker_state(key, base, gpus, choices)[1]
        scenario = load_scenario(path, list(overrides))
        run = replay_step(scenario, costs=estimator.cost_model(layout, scenario))
        return {**summarize(run, memory_report(scenario, check_schedule=False)), "error": ""}
    except (ScenarioError, ScheduleConstraint, ScheduleError) as e:
        return {"error": str(e).splitlines()[-1]}
    except Exception as e:  # noqa: BLE001 - one broken finalist must not cost the others
        return {"error": f"internal error: {type(e).__name__}: {e}".splitlines()[0]}


def simulate_finalists(path: Path, space: Space, candidates: pd.DataFrame, count: int,
                       pool: ProcessPoolExecutor | None = None,
                       progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """The `count` best estimates, simulated; ranked by simulated step (errors last)."""
    best = candidates[candidates["fits"].fillna(False)].head(count)
    layouts = [Layout(**{k: _plain(row[k]) for k in LAYOUT_COLUMNS}) for _, row in best.iterrows()]
    key = space_key(space)
    jobs = [(key, space.base, space.gpus, space.choices, str(path), space.overrides(layout), layout)
            for layout in layouts]
    results: dict[Layout, dict] = {}
    for summary, job in completed(pool, _tier_two, jobs):
        results[job[-1]] = summary
        if progress:
            progress(1)
    rows = []
    for i, (layout, (_, estimate)) in enumerate(zip(layouts, best.iterrows())):
        summary = results[layout]
        step = summary.get("step_time_s")
        rows.append({**layout.row(), "peak_gib": estimate["peak_gib"], "est_step_s": estimate["est_step_s"],
                     "step_time_s": step, "est_error": estimate["est_step_s"] / step - 1 if step else None,
                     "est_off_by": _off_by(estimate, summary.get("breakdown")) if step else "",
                     "mfu": summary.get("mfu"), "bubble_fraction": summary.get("bubble_fraction"),
                     "error": summary.get("error", ""), "overrides": " ".join(jobs[i][5])})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    frame["failed"] = frame["error"].astype(bool)
    frame = frame.sort_values(["failed", "step_time_s"], kind="stable").drop(columns="failed")
    return frame.reset_index(drop=True)


# the simulation's critical-path breakdown (docs/contracts.md#summary-keys) grouped as the estimate's parts
PARTS = {"pipeline": ("compute", "recompute", "tp", "cp", "ep", "tp_sync", "pipeline_wait"),
         "p2p": ("pipeline_p2p",), "dp": ("dp",), "optimizer": ("embedding_sync", "optimizer")}
PART_NAMES = {"pipeline": "compute and bubble", "p2p": "pipeline transfers", "dp": "data-parallel tail",
              "optimizer": "optimizer step and embedding all-reduce"}


def _off_by(estimate, breakdown: dict | None) -> str:
    """The part of the step the estimate got most wrong, against the simulated breakdown."""
    if not breakdown:
        return ""
    sim = {part: sum(breakdown.get(k, 0.0) for k in keys) for part, keys in PARTS.items()}
    part = max(PARTS, key=lambda p: abs(estimate[f"est_{p}_s"] - sim[p]))
    return f"{PART_NAMES[part]}: estimated {estimate[f'est_{part}_s']:.2f} s, simulated {sim[part]:.2f} s"


def json_row(row) -> dict:
    """A finalists row as JSON values: numpy scalars as Python ones, NaN (a failed finalist's
    step) as null."""
    plain = {k: _plain(v) for k, v in row.items()}
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in plain.items()}


def _plain(value):
    """numpy scalars from a DataFrame row back to Python ones."""
    return value.item() if hasattr(value, "item") else value


# ---- the whole search ------------------------------------------------------------------------

def headroom_sets(path: Path, headroom: float, sets: tuple[str, ...] = ()) -> list[str]:
    """The override that leaves `headroom` (a fraction) of the card's memory free: the search
    judges every layout against the card less that room."""
    if not 0 <= headroom < 1:
        raise ScenarioError(f"--headroom {headroom:.0%}: expected a share of the card's memory from 0% to under 100%")
    if headroom == 0:
        return []
    return [f"cluster.hbm_gib={load_scenario(path, list(sets)).gpu.hbm_gib * (1 - headroom)!r}"]


def plan(path: Path, gpus: int, choices: dict | None = None, finalists: int = FINALISTS,
         workers: int | None = None, progress: Callable[[str, int, int], None] | None = None,
         headroom: float = 0.0, sets: tuple[str, ...] = (), exhaustive: bool = False) -> Plan:
    """Search the layout space of `path`'s model (with the `--set` texts `sets`) on `gpus`
    GPUs, leaving `headroom` (a share) of each card's memory free. `progress(phase, advance,
    total)` with phase "pilot" (tier one timed on a sample), "bound" (the floors of a bounded
    search), "price" or "simulate". `exhaustive`: price every layout, also those that cannot be
    among the finalists."""
    sets = tuple(sets)
    base = load_scenario(path, [*sets, *headroom_sets(path, headroom, sets)])
    base.gpu  # derived once; every layout's scenario is copied from this one
    space = Space(base, gpus, choices or {}, sets)
    layouts, dropped = space.layouts()
    workers = workers or max(1, os.cpu_count() or 1)
    tick = (lambda phase, total: (lambda n: progress(phase, n, total))) if progress else (lambda phase, total: None)
    # one pool for both tiers: a worker simulates finalists on the fabric and links it priced
    pool = ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent) if workers > 1 else None
    try:
        ticker = tick("price", len(layouts))
        key = space_key(space)
        worker_state(key, space.base, space.gpus, space.choices)  # this process's set-up, before the pilot times
        bounded = not exhaustive and finalists >= 1
        sample, sample_rows, rate = pilot(layout_groups(layouts), lambda chunk: price_batch(
            (key, space.base, space.gpus, space.choices, chunk)), workers,
            tick("pilot", PILOT_PLACES * (1 + PILOT_BATCH)) if bounded else ticker, bounded=bounded)
        if not bounded:
            chosen = set(map(id, sample))
            candidates = price(space, [x for x in layouts if id(x) not in chosen], pool, workers, ticker, rate,
                               sample_rows)
        else:  # the pilot's rows are left out: what a bounded search prices must not depend on its timing
            candidates = price(space, layouts, pool, workers, ticker, keep=finalists,
                               bounding=tick("bound", len(layouts)))
        count = min(finalists, int(candidates["fits"].sum()))  # unpriced layouts: NA, not counted
        done = (simulate_finalists(path, space, candidates, count, pool, tick("simulate", count)) if count
                else pd.DataFrame())
    except BaseException:  # a refusal, Ctrl-C or SIGTERM: the workers' batches are not waited for
        if pool is not None:
            _abandon(pool)
            pool = None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        WORKER.clear()  # in-process caches belong to this space only
    return Plan(space, candidates, dropped, done)


def _abandon(pool: ProcessPoolExecutor) -> None:
    """Stop a pool's workers now: shutdown(wait=True), and the interpreter's exit after a
    shutdown(wait=False), both wait for the batches they are pricing (minutes: a SIGTERM'd plan
    of MoE layouts on 16,384 GPUs ran on for 13 minutes)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public handle on them
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(5)


TABLES = ("candidates.csv", "finalists.csv")


def write_tables(result: Plan, folder: Path) -> list[Path]:
    """candidates.csv (every layout, its verdict and estimate) and finalists.csv, each renamed
    over its target once whole (util/safe_files.py); `sim3d plan` draws plan.png beside them."""
    from ..util.safe_files import write_with
    folder.mkdir(parents=True, exist_ok=True)
    written = planned_tables(folder)
    write_with(written[0], lambda path: result.candidates.to_csv(path, index=False))
    write_with(written[1], lambda path: result.finalists.to_csv(path, index=False))
    return written


def planned_tables(folder: Path) -> list[Path]:
    """The files `write_tables` writes, to be checked before the search starts."""
    return [folder / name for name in TABLES]


# Layouts that differ only in their switches (SP, ZeRO, HSDP, TP overlap) or rank order, and whose
# simulated steps are this close, are one pick for a reader: the table shows the best of them.
SIMILAR = 0.005
SHAPE = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "schedule", "recompute")
ABBREVIATIONS = ("SP sequence parallelism; Zn ZeRO stage n (1 optimizer, 2 + gradients, 3 + parameters); "
                 "HSDPk sharding groups of k ranks; TPO tensor-parallel communication overlap (TE userbuffers); "
                 "pp-dp rank order with pp inside dp; est. the estimate's error against the simulated step; "
                 "similar: layouts of the same shape, other switches, within 0.5% of the row's step")


def distinct_picks(finalists: pd.DataFrame, top: int) -> list[tuple[pd.Series, int]]:
    """The `top` best finalists of distinct shapes, each with the count of similar layouts it
    stands for (same SHAPE, step within SIMILAR of it); failed finalists are listed as they are."""
    picks: list[list] = []
    for _, row in finalists.iterrows():
        if not row["error"]:
            shape = tuple(row[k] for k in SHAPE)
            twin = next((p for p in picks if not p[0]["error"] and tuple(p[0][k] for k in SHAPE) == shape
                         and row["step_time_s"] <= p[0]["step_time_s"] * (1 + SIMILAR)), None)
            if twin is not None:
                twin[1] += 1
                continue
        if len(picks) < top:
            picks.append([row, 0])
    return [(row, similar) for row, similar in picks]


def plan_table(result: Plan, top: int, baseline_step: float | None = None):
    """The ranked finalists, one row per distinct pick (distinct_picks); with `baseline_step`
    (the user's own layout, simulated), a column with each pick's speed-up over it.
    ABBREVIATIONS spells out its abbreviations, for the caller to print beside it."""
    from rich.table import Table
    priced = (f"{result.priced:,} priced (the rest cannot beat the finalists), of which "
              if result.priced < len(result.candidates) else "")
    title = (f"best layouts: {len(result.candidates):,} candidates, {priced}{result.fitting:,} fit in memory, "
             f"{len(result.finalists)} simulated")
    table = Table(title=title, title_justify="left")
    columns = ["#", "layout", "schedule", "recompute", "switches", "step s", "est.", "MFU", "bubble", "GiB",
               "similar"]
    columns += ["vs yours"] if baseline_step else []
    for col in columns:
        table.add_column(col, justify="left" if col in ("layout", "schedule", "recompute", "switches") else "right",
                         no_wrap=True)
    for i, (row, similar) in enumerate(distinct_picks(result.finalists, top)):
        if row["error"]:
            table.add_row(str(i + 1), describe(row), row["schedule"], row["recompute"], "", "error",
                          *[""] * (len(columns) - 6))
            continue
        hsdp = row["zero"] and row["dp_shard"] < row["dp"] * row["cp"]
        switches = [name for name, on in (("SP", row["sequence_parallel"]), (f"Z{row['zero']}", row["zero"]),
                                          (f"HSDP{row['dp_shard']}", hsdp),
                                          ("TPO", row["tp_comm_overlap"]),
                                          ("pp-dp", row["order"].endswith("pp-dp"))) if on]
        gain = [f"{baseline_step / row['step_time_s'] - 1:+.1%}"] if baseline_step else []
        table.add_row(str(i + 1), describe(row).rsplit(" ", 2)[0], row["schedule"], row["recompute"],
                      " ".join(switches), f"{row['step_time_s']:.2f}", f"{row['est_error']:+.1%}",
                      f"{row['mfu']:.1%}", f"{row['bubble_fraction']:.1%}", f"{row['peak_gib']:.1f}",
                      f"+{similar}" if similar else "", *gain)
    return table


def baseline_of(path: Path, sets: tuple[str, ...] = ()) -> dict:
    """The scenario's own layout, simulated as `sim3d run` would: what each pick is measured
    against (`plan --baseline`)."""
    from ..api import simulate
    result = simulate(path, sets=list(sets))
    s, summary = result.scenario, result.summary
    layout = (f"tp{s.tp} pp{s.pp} dp{s.dp} cp{s.cp}" + (f" vpp{s.vpp}" if s.vpp > 1 else "")
              + f" mb{s.training.micro_batch} {s.schedule} {s.training.recompute}")
    return {"layout": layout, "step_time_s": summary["step_time_s"], "mfu": summary["mfu"],
            "peak_memory_gib": summary["peak_memory_gib"], "fits_in_memory": summary["fits_in_memory"]}


def estimate_misses(result: Plan, threshold: float = 0.10) -> list[str]:
    """Finalists whose estimate was off by more than `threshold`, and which part was."""
    done = result.finalists.dropna(subset=["est_error"]) if not result.finalists.empty else result.finalists
    return [f"#{i + 1} {describe(row)}: estimate {row['est_error']:+.1%}; {row['est_off_by']}"
            for i, row in done.iterrows() if abs(row["est_error"]) > threshold]


def check_space(path: Path, gpus: int, choices: dict | None = None, headroom: float = 0.0,
                sets: tuple[str, ...] = ()) -> None:
    """ScenarioError now if `gpus` cannot hold the scenario's nodes or NVLink domains, or the
    headroom is not a share, and WorkLimitExceeded if the dimensions are too many to walk."""
    sets = tuple(sets)
    Space(load_scenario(path, [*sets, *headroom_sets(path, headroom, sets)]), gpus, choices or {}, sets).check_size()


__all__ = ["Plan", "plan", "plan_table", "distinct_picks", "baseline_of", "headroom_sets", "estimate_misses", "json_row", "write_tables",
           "planned_tables", "TABLES", "check_space", "ScenarioError"]

"""Layout search: which (tp, pp, dp, vpp, micro_batch, schedule, recompute) to use on N GPUs.

Candidates are every valid layout of the scenario's model on `gpus` GPUs (tp within a node
and dividing the heads, pp dividing the layers, dp what remains); the memory model discards
those that do not fit (cheap, no simulation), the rest are simulated and ranked by step time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..model.memory import memory_report
from ..scenario import ScenarioError, load_scenario, read_scenario_yaml, scenario_from_dict
from .runner import run_jobs

MICRO_BATCHES = (1, 2, 4)
RECOMPUTE = ("none", "selective", "full")


@dataclass
class Candidate:
    overrides: tuple[str, ...]
    peak_gib: float
    summary: dict | None = None

    @property
    def label(self) -> str:
        return " ".join(o.split(".")[-1] for o in self.overrides)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class Search:
    fitting: list[Candidate]
    considered: int
    invalid: int = 0  # layouts the scenario checks reject (batch not divisible, ...)
    first_invalid: str = ""  # the first such reason, to show when nothing fits

    def why_none(self, gpus: int) -> str:
        text = f"none of {self.considered} layouts of this model on {gpus} GPUs fits"
        if self.invalid == self.considered:
            return f"{text}: every one is invalid, e.g. {self.first_invalid}"
        if self.invalid:
            return f"{text}: {self.invalid} are invalid (e.g. {self.first_invalid}), the rest exceed memory"
        return f"{text} in memory"


def candidates(path: Path, gpus: int) -> Search:
    """The layouts that fit in memory, and how many were considered or rejected."""
    base = load_scenario(path)
    raw = read_scenario_yaml(Path(path))  # parsed once; each candidate is the same dict with its overrides
    per_node = base.gpus_per_node
    if gpus % per_node and gpus > per_node:
        raise ScenarioError(f"--gpus {gpus} is not a whole number of {per_node}-GPU nodes")
    domain = base.cluster.intra_node.domain_nodes
    if domain > 1 and gpus % base.nvlink_domain_gpus:
        raise ScenarioError(f"--gpus {gpus} is not a whole number of {base.nvlink_domain_gpus}-GPU NVLink domains "
                            f"(cluster.intra_node.domain_nodes: {domain})")
    nodes, per_node = (gpus // per_node, per_node) if gpus >= per_node else (1, gpus)
    m = base.model
    domain = min(base.nvlink_domain_gpus, gpus)  # tensor parallelism stays on NVLink
    tps = [t for t in _divisors(domain) if m.heads % t == 0 and m.num_kv_heads % t == 0 and m.vocab % t == 0]
    pps = [p for p in _divisors(m.layers) if p <= 64]
    fitting, considered, invalid, first_invalid = [], 0, 0, ""
    for tp, pp, mb, recompute in itertools.product(tps, pps, MICRO_BATCHES, RECOMPUTE):
        if gpus % (tp * pp):
            continue
        dp = gpus // (tp * pp)
        schedules = [("1f1b", 1)] + ([("interleaved-1f1b", 2)] if pp > 1 and m.layers % (2 * pp) == 0 else [])
        for schedule, vpp in schedules:
            considered += 1
            overrides = (f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", f"parallel.vpp={vpp}",
                         f"training.micro_batch={mb}", f"training.recompute={recompute}", f"schedule={schedule}",
                         f"cluster.nodes={nodes}", f"cluster.gpus_per_node={per_node}")
            try:
                scenario = scenario_from_dict(raw, overrides)
            except ScenarioError as e:
                invalid += 1
                first_invalid = first_invalid or e.problems[0]
                continue
            report = memory_report(scenario, check_schedule=False)
            if report.fits:
                fitting.append(Candidate(overrides, report.peak_gib))
    return Search(fitting, considered, invalid, first_invalid)


def plan(path: Path, gpus: int, top: int = 10, workers: int | None = None,
         progress: Callable[[int, int], None] | None = None,
         found: Search | None = None) -> tuple[list[Candidate], int]:
    """`found`: what `candidates(path, gpus)` returned, when the caller has it already."""
    found = found or candidates(path, gpus)
    fitting, considered = found.fitting, found.considered
    jobs = [(str(i), str(path), c.overrides) for i, c in enumerate(fitting)]
    for count, (index, summary) in enumerate(run_jobs(jobs, workers), start=1):
        fitting[int(index)].summary = summary
        if progress:
            progress(count, len(jobs))
    ranked = sorted((c for c in fitting if c.summary and not c.summary.get("error")),
                    key=lambda c: c.summary["step_time_s"])
    return ranked[:top], considered


def plan_table(ranked: list[Candidate], considered: int, fitting: int):
    from rich.table import Table
    table = Table(title=f"best layouts ({fitting} of {considered} candidates fit in memory)", title_justify="left")
    for col in ("#", "tp", "pp", "dp", "vpp", "mb", "schedule", "recompute", "step s", "MFU", "bubble", "GiB"):
        table.add_column(col, justify="right")
    for i, c in enumerate(ranked, start=1):
        s = c.summary
        recompute = next(o.split("=")[1] for o in c.overrides if o.startswith("training.recompute"))
        table.add_row(str(i), str(s["tp"]), str(s["pp"]), str(s["dp"]), str(s["vpp"]), str(s["micro_batch"]),
                      s["schedule"], recompute, f"{s['step_time_s']:.2f}", f"{s['mfu']:.1%}",
                      f"{s['bubble_fraction']:.1%}", f"{c.peak_gib:.1f}")
    return table

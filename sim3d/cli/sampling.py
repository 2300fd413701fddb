"""`sim3d run --samples N --seed S`: the step's distribution over the scenario's variability,
beside the deterministic run's outputs (samples.csv, step_distribution.png, and the
summary's `step_distribution`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .progress import progress_bars
from .support import BadInput, err, out, print_whole

SAMPLE_OUTPUTS = ("samples.csv", "step_distribution.png", "gantt_worst.png")


@dataclass
class SamplingOptions:
    samples: int
    seed: int
    workers: int
    backend: str
    worst_gantt: bool = False

    def check(self) -> None:
        if self.samples < 1:
            raise BadInput(f"--samples {self.samples}: give at least 1")
        if self.seed < 0:
            raise BadInput(f"--seed {self.seed}: give a seed of 0 or more")
        if self.workers < 1:
            raise BadInput(f"--workers {self.workers}: give at least 1")
        from ..studies.runner import check_backend
        try:
            check_backend(self.backend)
        except ValueError as e:
            raise BadInput(str(e)) from None

    def planned_outputs(self, folder: Path, plots: bool) -> list[Path]:
        names = ["samples.csv"] + (["step_distribution.png"] if plots else []) + (
            ["gantt_worst.png"] if self.worst_gantt else [])
        return [folder / name for name in names]


@dataclass
class SampledRun:
    samples: object  # studies.monte_carlo.StepSamples
    stats: dict
    sampler: object  # studies.monte_carlo.Sampler: replays any one sample again, with its trace

    @classmethod
    def of(cls, scenario, deterministic: float, options: SamplingOptions, quiet: bool) -> "SampledRun":
        from ..studies.monte_carlo import Sampler, sample_steps
        sampler = Sampler(scenario, options.seed)
        run = dict(samples=options.samples, seed=options.seed, workers=options.workers, backend=options.backend,
                   deterministic=deterministic, sampler=sampler)
        if quiet:
            samples = sample_steps(scenario, **run)
        else:
            with progress_bars("sample", err) as bar:
                task = bar.add_task(f"sampling {options.samples:,} steps, seed {options.seed}", total=options.samples)
                samples = sample_steps(scenario, **run, progress=lambda done: bar.update(task, completed=done))
        return cls(samples, samples.describe(), sampler)

    def print(self, variability_off: bool) -> None:
        from rich.table import Table
        s = self.stats
        table = Table(title=f"step time over {s['samples']:,} samples (seed {s['seed']})", title_justify="left")
        for column in ("", "step (s)", f"{s['confidence']:.0%} interval (s)", "vs deterministic"):
            table.add_column(column, justify="left" if not column else "right")
        det = s["deterministic_step_s"]
        table.add_row("deterministic", f"{det:.4f}", "", "")
        for name in ("mean", "p50", "p95", "p99"):
            low, high = (f"{end:.4f}" if end is not None else "?" for end in s["intervals_s"][name])
            table.add_row(name, f"{s[f'{name}_s']:.4f}", f"{low} - {high}", f"{s[f'{name}_s'] / det - 1:+.2%}")
        print_whole(out, table)
        if variability_off:
            out.print("the scenario draws no variability: every sample is the deterministic step")
            return
        if any(None in ends for ends in s["intervals_s"].values()):
            out.print("?: too few samples lie beyond that percentile to bound it (p99 needs about 370)")
        tail = s["tail"]
        slow, flaky = tail["slow_gpus_per_sample"], tail["flaky_nodes_per_sample"]
        ranks = ", ".join(f"{rank} ({count})" for rank, count in tail["critical_ranks"].items())
        ties = f"; {s['distinct_steps']} distinct step times" if s["distinct_steps"] < s["samples"] else ""
        out.print(f"tail (the slowest {tail['samples']} samples): {slow['tail']:.2f} slow GPUs and "
                  f"{flaky['tail']:.2f} degraded nodes per sample (all samples: {slow['all']:.2f} and "
                  f"{flaky['all']:.2f}); ended by rank(s) {ranks}{ties}", highlight=False)

    def write(self, folder: Path, title: str, plots: bool, worst_gantt: bool = False,
              gantt_size: str = "screen") -> list[Path]:
        import csv
        import io
        from ..studies.step_distribution import samples_table
        from ..util.safe_files import write_bytes
        table = samples_table(self.samples)
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(table)
        writer.writerows(zip(*table.values()))
        written = [write_bytes(folder / "samples.csv", text.getvalue().encode())]
        if plots:
            from ..report.distribution_plot import plot_distribution
            written.append(plot_distribution(self.samples.steps, self.stats, title, folder / "step_distribution.png"))
        if worst_gantt:
            written.append(self._worst_gantt(folder / "gantt_worst.png", title, gantt_size))
        return written

    def _worst_gantt(self, path: Path, title: str, size: str) -> Path:
        """The Gantt chart of the slowest sample, replayed again with its own draws."""
        from ..report.gantt import plot_gantt
        from ..util.safe_files import replacing
        steps = self.samples.steps
        worst = int(steps.argmax())
        critical = int(self.samples.critical_rank[worst])
        lanes = self.sampler.replay.lane_ranks
        pipeline = lanes[(lanes == critical).any(axis=1)][0].tolist()
        title = (f"{title}: the slowest of {len(steps):,} samples (sample {worst}, seed {self.samples.seed}), "
                 f"{steps[worst]:.4g} s against {self.samples.deterministic:.4g} s without variability\n"
                 f"the pipeline of rank {critical}, which ended the step")
        with replacing(path) as temps:
            plot_gantt(self.sampler.trace(worst), temps, title=title, size=size, ranks=pipeline)
        return path

"""How much work one command may ask for before it is refused, and how to ask for more.

Every limit is an order of magnitude above the largest real run it could describe and sits
where this machine's replay would start to take minutes or gigabytes; a user who means it
raises the limit with the environment variable named in the refusal (README "Limits").
"""

from __future__ import annotations

import os
from dataclasses import dataclass


class WorkLimitExceeded(ValueError):
    """The input asks for more work than the limit allows; `str()` gives the estimate, the limit
    and how to raise it."""


@dataclass(frozen=True)
class Limit:
    env: str
    default: int
    unit: str
    why: str

    @property
    def value(self) -> int:
        text = os.environ.get(self.env)
        if text is None:
            return self.default
        try:
            value = int(float(text))
        except (ValueError, OverflowError):
            raise WorkLimitExceeded(f"{self.env}={text!r}: expected a number of {self.unit}") from None
        if value < 1:
            raise WorkLimitExceeded(f"{self.env}={text!r}: expected a positive number of {self.unit}")
        return value

    def check(self, amount: int, how: str = "") -> None:
        """Refuse `amount` (worked out as `how`, e.g. "1,000 micro-batches x 16 stages") above the limit."""
        if amount > self.value:
            asked = f"{how} = {amount:,} {self.unit}" if how else f"{amount:,} {self.unit}"
            raise WorkLimitExceeded(f"{asked}; the limit is {self.value:,} ({self.why}); "
                                    f"raise it on purpose with {self.env}={amount}")


# gpt3 at full fidelity (1.38 M estimated actions, 1.54 M trace rows with the TP rows) replays
# in 27 s and the whole command takes 79 s and 2.9 GB here: 1.5 M actions is about that.
ACTIONS = Limit("SIM3D_MAX_ACTIONS", 1_500_000, "schedule actions",
                "about a minute and a half and 3 GB for the whole command here")
# The deepest published dense models have ~130 layers (Megatron-Turing NLG 530B: 105; GPT-1T
# in Narayanan et al. 2021: 128).
LAYERS = Limit("SIM3D_MAX_LAYERS", 10_000, "layers", "75x the deepest published model")
# The largest single jobs reported (2024-25) run on ~100k GPUs; the topology of 262,144 GPUs
# builds in ~7 s and ~0.7 GB here (a ring is priced from the groups near it, topology.py), and a
# straggler run of Llama 3.1 405B on 131,072 H100s takes ~9 s whole (benchmarks/full_fidelity_scale.py).
GPUS = Limit("SIM3D_MAX_GPUS", 262_144, "GPUs", "the topology graph of more takes tens of seconds and gigabytes here")
# The flow network re-solves max-min fair shares over every group's flows at each collective:
# an MoE step (moe-1024.yaml's model on a fat tree) takes ~19 s and 0.4 GB here on 16,384 GPUs,
# ~90 s and 1.4 GB on 65,536, growing with the GPUs; the analytical network prices them in seconds.
FLOW_GPUS = Limit("SIM3D_MAX_FLOW_GPUS", 16_384, "GPUs",
                  "about 20 s here; beyond, about 1.4 ms a GPU, or use costs.network: analytical")
# Each executor rank is a torch process (~300 MB, one core's share of the step).
LOCAL_PROCESSES = Limit("SIM3D_MAX_LOCAL_PROCESSES", max(16, 4 * (os.cpu_count() or 1)), "local processes",
                        "4 per core of this machine, at least 16")


# sim3d plan's first tier prices ~9,000 layouts a second on this 2-core machine (168,594 in
# 18 s); the combinations it walks to find them cost ~1 us each.
PLAN_LAYOUTS = Limit("SIM3D_MAX_PLAN_LAYOUTS", 2_000_000, "layouts", "about four minutes of tier one here")
# Tier one's rate depends on the model and the cluster (MoE layouts on 65,536 GPUs price at
# ~7 a second here, dense ones at thousands), so `plan` times a sample of the layouts before
# pricing the rest and refuses when the extrapolated wall time is above this.
# Ten minutes: gpt3's 201,648 layouts on 1,024 GPUs price in about four here, the MoE
# scenario's on 131,072 GPUs would take hours (the pilot's estimates: benchmarks/plan_pilot.py).
PLAN_SECONDS = Limit("SIM3D_MAX_PLAN_SECONDS", 600, "seconds of tier one",
                     "ten minutes; narrow the search with the dimension options")
PLAN_COMBINATIONS = Limit("SIM3D_MAX_PLAN_COMBINATIONS", 10**9, "combinations of the dimensions",
                          "minutes just to walk them")


# A sweep point takes 0.05-1 s: 10,000 points is minutes to hours on a laptop-sized machine.
SWEEP_POINTS = Limit("SIM3D_MAX_SWEEP_POINTS", 10_000, "grid points", "minutes to hours of simulation")
# The executor measures a step; a few dozen steps give a stable median.
# gpt3.yaml with jitter, slow GPUs and flaky links replays about 10 M lane-actions a second
# here (benchmarks/monte_carlo.py: 100 samples x 8 pipelines x 24,080 actions in 1.9 s)
SAMPLE_WORK = Limit("SIM3D_MAX_SAMPLE_WORK", 10**9, "pipeline actions over all samples",
                    "about two minutes here")
EXECUTOR_STEPS = Limit("SIM3D_MAX_EXECUTOR_STEPS", 1_000, "executed steps", "a median needs tens, not thousands")


def actions_per_rank(microbatches: int, chunks: int, dp_buckets: int = 1) -> int:
    """At most how many actions one pipeline rank runs: per micro-batch and chunk RECV_F, F,
    SEND_F, RECV_B, B (or BI and BW), SEND_B; then the gradient buckets and the optimizer."""
    return microbatches * chunks * 7 + chunks * dp_buckets + 2


def check_schedule_size(pp: int, microbatches: int, chunks: int, dp_buckets: int = 1) -> None:
    """Refuse a folded schedule (one pipeline of `pp` ranks) whose replay would exceed ACTIONS;
    a full-fidelity replay is counted after folding, by the engine (engine/run.py)."""
    per_rank = actions_per_rank(microbatches, chunks, dp_buckets)
    ACTIONS.check(pp * per_rank,
                  f"{microbatches:,} micro-batches x {chunks} chunk(s) on {pp:,} simulated rank(s), "
                  f"about {per_rank:,} actions each")

"""Every pipeline schedule as one record: its generator, the layouts it accepts, its memory
rule, the planner's and the estimate's rules and where Megatron-LM stands on it. The checks,
the planner, the estimate, the memory model and the CLI read these records and never branch
on a schedule's name, so adding a schedule is one `register_spec` call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .generators import GENERATORS, Schedule, ScheduleConstraint

PLACEMENTS = ("loop", "v")
CHUNKS = ("one", "many", "two")  # vpp == 1, vpp >= 2 interleaved, vpp == 2 in a V
# how studies/estimate.py prices the bubble (schedules.md section 7)
BUBBLE_RULES = ("fill-drain", "interleaved", "zb-h1", "unit-timeline")


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    generator: Callable[..., Schedule]
    placement: str  # "loop" or "v": how a rank's chunks map to stages
    chunks: str  # one of CHUNKS: the vpp it accepts
    split_backward: bool  # backward runs as BI then BW (input and weight gradients apart)
    steady_inflight: bool  # in-flight activations bounded by a warm-up of at most 2*pp micro-batches
    bubble_rule: str  # one of BUBBLE_RULES
    p2p_per_chunk: bool  # a stage boundary carries each micro-batch once per chunk
    microbatches_multiple_of_pp: bool = False
    min_microbatches_per_pp: int = 0
    planned: bool = True  # the planner proposes it
    megatron_elsewhere: str | None = None  # why Megatron-LM's flags cannot ask for it, if not
    # torch.distributed.pipelining's class, less its "Schedule" prefix (torchtitan's
    # pipeline_parallel_schedule spelling), where PyTorch has one
    pytorch_name: str | None = None
    # a send holds the compute stream until delivered, whatever `training.overlap_p2p` says:
    # Megatron-LM overlaps pipeline transfers under the interleaved schedule alone (arguments.py
    # turns overlap_p2p_comm off without a virtual pipeline; schedules.py
    # forward_backward_pipelining_without_interleaving raises on it), and torch.distributed.
    # pipelining's Schedule1F1B waits on each fused send/receive batch of its steady state
    # (schedules.py `_wait_batch_p2p`, "fwd_send_bwd_recv") before the next compute
    blocking_sends: bool = False

    def __post_init__(self):
        for field, value, known in (("placement", self.placement, PLACEMENTS), ("chunks", self.chunks, CHUNKS),
                                    ("bubble_rule", self.bubble_rule, BUBBLE_RULES)):
            if value not in known:
                raise ValueError(f"schedule {self.name}: {field} {value!r} is not one of {', '.join(known)}")

    @property
    def default_vpp(self) -> int:
        """The vpp to take when none is given."""
        return 1 if self.chunks == "one" else 2

    def layout_problems(self, pp: int, vpp: int, microbatches: int | None) -> list[str]:
        """Each reason this schedule cannot run pp ranks with vpp chunks each over the given
        micro-batches (None: the batch does not split into micro-batches, nothing to say about
        their count), in the wording of the scenario checks."""
        p: list[str] = []
        if microbatches is not None and self.microbatches_multiple_of_pp and microbatches % pp:
            p.append(f"training.global_batch: {self.name} needs num_microbatches % pp == 0, "
                     f"got {microbatches} micro-batches for pp={pp}")
        if self.chunks == "many" and vpp == 1:
            p.append(f"parallel.vpp: {self.name} interleaves vpp > 1 chunks per rank, got vpp=1 (use 1f1b, or set vpp)")
        if self.chunks == "one" and vpp != 1:
            p.append(f"parallel.vpp: schedule {self.name} runs one chunk per rank, got vpp={vpp} (use interleaved-1f1b)")
        if self.chunks == "two" and vpp != 2:
            p.append(f"parallel.vpp: schedule {self.name} places two chunks per rank in a V, set vpp=2 (got {vpp})")
        least = self.min_microbatches_per_pp * pp
        if microbatches is not None and microbatches < least:
            p.append(f"training.global_batch: {self.name} needs at least {self.min_microbatches_per_pp}*pp={least} "
                     f"micro-batches, got {microbatches}")
        return p

    def accepts(self, pp: int, vpp: int, microbatches: int) -> bool:
        return not self.layout_problems(pp, vpp, microbatches)


SCHEDULES: dict[str, ScheduleSpec] = {}


def register_spec(spec: ScheduleSpec) -> ScheduleSpec:
    """Add a schedule (its generator becomes buildable by name too)."""
    SCHEDULES[spec.name] = spec
    GENERATORS[spec.name] = spec.generator
    return spec


def unregister_spec(name: str) -> None:
    SCHEDULES.pop(name)
    GENERATORS.pop(name)


def schedule_spec(name: str) -> ScheduleSpec:
    if name not in SCHEDULES:
        from ..cluster.gpus import suggest
        raise ScheduleConstraint(f"unknown schedule {name!r}{suggest(name, SCHEDULES)}; known: {', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def sends_overlap(schedule: str, asked: bool) -> bool:
    """Pipeline sends run beside the compute: asked (`training.overlap_p2p`) and allowed by the
    schedule (`ScheduleSpec.blocking_sends`)."""
    return asked and not SCHEDULES[schedule].blocking_sends


def planned_schedules() -> tuple[str, ...]:
    return tuple(name for name, spec in SCHEDULES.items() if spec.planned)


def megatron_schedule(vpp: int) -> str:
    """The schedule Megatron-LM runs: interleaved 1F1B once a virtual-pipeline degree is set."""
    return "interleaved-1f1b" if vpp > 1 else "1f1b"


_SAIL_FORK = "runs on sail-sg/zero-bubble-pipeline-parallelism's Megatron fork, not Megatron-LM itself"
for _spec in (
    ScheduleSpec("gpipe", GENERATORS["gpipe"], "loop", "one", split_backward=False, steady_inflight=False,
                 bubble_rule="fill-drain", p2p_per_chunk=False, planned=False,  # 1f1b's time, more memory
                 pytorch_name="GPipe",
                 megatron_elsewhere="GPipe is not a Megatron-LM schedule (all forwards, then all backwards)"),
    ScheduleSpec("1f1b", GENERATORS["1f1b"], "loop", "one", split_backward=False, steady_inflight=True,
                 bubble_rule="fill-drain", p2p_per_chunk=False, pytorch_name="1F1B", blocking_sends=True),
    ScheduleSpec("interleaved-1f1b", GENERATORS["interleaved-1f1b"], "loop", "many", split_backward=False,
                 steady_inflight=True, bubble_rule="interleaved", p2p_per_chunk=True,
                 microbatches_multiple_of_pp=True, pytorch_name="Interleaved1F1B"),
    ScheduleSpec("zb-h1", GENERATORS["zb-h1"], "loop", "one", split_backward=True, steady_inflight=True,
                 bubble_rule="zb-h1", p2p_per_chunk=False, megatron_elsewhere="ZB-H1 " + _SAIL_FORK),
    # twice 1F1B's activations (2 pp - 1 micro-batches in flight on every rank) for no bubble
    # inside a rank's span; the unit-cost timeline prices its fill, which is not zero
    ScheduleSpec("zb-h2", GENERATORS["zb-h2"], "loop", "one", split_backward=True, steady_inflight=True,
                 bubble_rule="unit-timeline", p2p_per_chunk=False, megatron_elsewhere="ZB-H2 " + _SAIL_FORK),
    ScheduleSpec("zbv", GENERATORS["zbv"], "v", "two", split_backward=True, steady_inflight=True,
                 bubble_rule="unit-timeline", p2p_per_chunk=False, megatron_elsewhere="ZB-V " + _SAIL_FORK,
                 pytorch_name="ZBVZeroBubble"),
    ScheduleSpec("dualpipev", GENERATORS["dualpipev"], "v", "two", split_backward=True, steady_inflight=True,
                 bubble_rule="unit-timeline", p2p_per_chunk=False, min_microbatches_per_pp=2,
                 megatron_elsewhere="DualPipeV is deepseek-ai/DualPipe's schedule, not a Megatron-LM one",
                 pytorch_name="DualPipeV"),
):
    register_spec(_spec)

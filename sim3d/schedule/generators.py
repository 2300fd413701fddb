"""Compute-only schedule generators, registered by name.

Each returns a `Schedule` holding only F / B / BI / BW actions; the lowering passes add
communication. Formulas are written from the papers and the notes in
shared/reference/schedules.md (sections 3.1, 3.2, 4.2, 1.3), not ported from any codebase.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from .ir import Action, Kind, Schedule, StageMap

F, B, BI, BW = Kind.F, Kind.B, Kind.BI, Kind.BW
GENERATORS: dict[str, Callable[..., Schedule]] = {}


def register(name: str):
    def wrap(fn):
        GENERATORS[name] = fn
        return fn
    return wrap


class ScheduleConstraint(ValueError):
    """The requested (pp, microbatches, vpp) is not expressible by this schedule."""


def _check(pp: int, m: int, vpp: int, name: str, want_vpp: int | None = None) -> None:
    if pp < 1 or m < 1 or vpp < 1:
        raise ScheduleConstraint(f"{name}: pp, microbatches and vpp must be >= 1 (got {pp}, {m}, {vpp})")
    if want_vpp is not None and vpp != want_vpp:
        raise ScheduleConstraint(f"{name}: needs vpp={want_vpp}, got vpp={vpp}")


def build(name: str, pp: int, microbatches: int, vpp: int = 1) -> Schedule:
    if name not in GENERATORS:
        from ..cluster.gpus import suggest
        raise ScheduleConstraint(f"unknown schedule {name!r}{suggest(name, GENERATORS)}; known: {', '.join(GENERATORS)}")
    return GENERATORS[name](pp, microbatches, vpp)


def _schedule(name: str, m: int, stages: StageMap, ranks: list[list[Action]]) -> Schedule:
    return Schedule(name, m, stages, tuple(tuple(r) for r in ranks))


@register("gpipe")
def gpipe(pp: int, m: int, vpp: int = 1) -> Schedule:
    """GPipe (Huang et al. 2019): all forwards, then all backwards."""
    _check(pp, m, vpp, "gpipe", want_vpp=1)
    ranks = [[Action(F, i) for i in range(m)] + [Action(B, i) for i in range(m)] for _ in range(pp)]
    return _schedule("gpipe", m, StageMap(pp), ranks)


@register("1f1b")
def one_f_one_b(pp: int, m: int, vpp: int = 1) -> Schedule:
    """PipeDream-Flush / Megatron 1F1B (Narayanan et al. 2021): rank r runs
    min(pp - r - 1, m) warm-up forwards, alternates one forward and one backward, then drains."""
    _check(pp, m, vpp, "1f1b", want_vpp=1)
    ranks = []
    for r in range(pp):
        warmup = min(pp - r - 1, m)
        order = [Action(F, i) for i in range(warmup)]
        for i in range(m - warmup):
            order += [Action(F, warmup + i), Action(B, i)]
        order += [Action(B, i) for i in range(m - warmup, m)]
        ranks.append(order)
    return _schedule("1f1b", m, StageMap(pp), ranks)


def _interleaved_table(pp: int, m: int, vpp: int) -> list[tuple[int, int]]:
    """Megatron's virtual-microbatch table: micro-batches in groups of pp, each group
    visiting every chunk in turn. Entry k = (microbatch, chunk) of the k-th forward."""
    table = []
    for group in range(0, m, pp):
        for chunk in range(vpp):
            table += [(mb, chunk) for mb in range(group, min(group + pp, m))]
    return table


@register("interleaved-1f1b")
def interleaved_1f1b(pp: int, m: int, vpp: int = 2) -> Schedule:
    """Megatron's interleaved 1F1B (Narayanan et al. 2021, section 2.2): vpp chunks per rank,
    warm-up 2(pp-r-1) + (vpp-1)*pp chunk-forwards, then one forward / one backward; the
    k-th backward runs chunk vpp-1-c of the k-th table entry."""
    _check(pp, m, vpp, "interleaved-1f1b")
    if m % pp:
        raise ScheduleConstraint(
            f"interleaved-1f1b: microbatches ({m}) must be a multiple of pp ({pp}): "
            "micro-batches move through the chunks in groups of pp")
    table = _interleaved_table(pp, m, vpp)
    total = len(table)
    fwd = [Action(F, mb, c) for mb, c in table]
    bwd = [Action(B, mb, vpp - 1 - c) for mb, c in table]
    ranks = []
    for r in range(pp):
        warmup = min(2 * (pp - r - 1) + (vpp - 1) * pp, total)
        order = fwd[:warmup]
        for k in range(total - warmup):
            order += [fwd[warmup + k], bwd[k]]
        order += bwd[total - warmup:]
        ranks.append(order)
    return _schedule("interleaved-1f1b", m, StageMap(pp, vpp), ranks)


@register("zb-h1")
def zb_h1(pp: int, m: int, vpp: int = 1) -> Schedule:
    """ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241): the 1F1B
    skeleton with the backward split into BI (input grad, on the critical path) and BW
    (weight grad); rank r defers its BW's by r slots into the cool-down bubble."""
    _check(pp, m, vpp, "zb-h1", want_vpp=1)
    ranks = []
    for r in range(pp):
        warmup = min(pp - r - 1, m)
        order = [Action(F, i) for i in range(warmup)]
        pending: deque[int] = deque()
        for slot in range(m):
            if slot < m - warmup:
                order.append(Action(F, warmup + slot))
            order.append(Action(BI, slot))
            pending.append(slot)
            if slot >= r:
                order.append(Action(BW, pending.popleft()))
        order += [Action(BW, i) for i in pending]
        ranks.append(order)
    return _schedule("zb-h1", m, StageMap(pp), ranks)


@register("zb-h2")
def zb_h2(pp: int, m: int, vpp: int = 1) -> Schedule:
    """ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241, section 3.1
    and its Figure 3): the split backward of ZB-H1 with more warm-up forwards, so that no stage
    waits for its first BI, and the BW's moved to the tail. The layout becomes a parallelogram:
    with equal F, BI and BW each stage is busy without a gap from its first action to its last,
    at the price of up to 2 pp - 1 micro-batches in flight (twice 1F1B's).

    Built by list scheduling at unit costs: every stage runs, whenever it is free, the first
    startable of BI, F and BW in that order, a forward only while fewer than 2 pp - 1
    micro-batches are in flight on it (freed by their BW). Startable: F in micro-batch order
    after the previous stage's F; BI after its own F and the next stage's BI; BW after its own
    BI."""
    _check(pp, m, vpp, "zb-h2", want_vpp=1)
    cap = 2 * pp - 1
    done: dict[tuple[Kind, int, int], int] = {}  # (kind, rank, mb) -> the unit it ends at
    nxt = [{F: 0, BI: 0, BW: 0} for _ in range(pp)]
    ranks: list[list[Action]] = [[] for _ in range(pp)]

    def ready_at(kind: Kind, r: int, mb: int) -> int | None:
        """The unit from which the action may start, or None while a dependency is unfinished."""
        deps = {F: [(F, r - 1, mb)] if r > 0 else [],
                BI: [(F, r, mb)] + ([(BI, r + 1, mb)] if r < pp - 1 else []),
                BW: [(BI, r, mb)]}[kind]
        ends = [done.get(dep) for dep in deps]
        return None if None in ends else max(ends, default=0)

    now, left = 0, 3 * m * pp
    while left:
        started = []
        for r in range(pp):
            if ranks[r] and done[(ranks[r][-1].kind, r, ranks[r][-1].mb)] > now:
                continue  # still running its last action
            in_flight = nxt[r][F] - nxt[r][BW]
            for kind in (BI, F, BW):
                mb = nxt[r][kind]
                if mb >= m or (kind is F and in_flight >= cap):
                    continue
                if (at := ready_at(kind, r, mb)) is not None and at <= now:
                    started.append((kind, r, mb))
                    break
        for kind, r, mb in started:
            ranks[r].append(Action(kind, mb))
            nxt[r][kind] += 1
            done[(kind, r, mb)] = now + 1
            left -= 1
        now += 1
    return _schedule("zb-h2", m, StageMap(pp), ranks)


@register("zbv")
def zbv(pp: int, m: int, vpp: int = 2) -> Schedule:
    """ZB-V (Qi et al. 2024, arXiv:2401.10241 section 6): two chunks per rank in V placement
    (rank r holds stages r and 2pp-1-r) with the backward split into BI and BW. Phases, per
    shared/reference/schedules.md section 1.3: warm-up forwards of chunk 0; pairs F1 F0;
    F1 BI1 BW1 triples; steady F0 BI0 BW0 F1 BI1 BW1; cool-down BI's with deferred BW's;
    the remaining BW's. Built for max(2pp-1, m) micro-batches, then the padding is dropped."""
    _check(pp, m, vpp, "zbv", want_vpp=2)
    n = max(2 * pp - 1, m)
    ranks = []
    for r in range(pp):
        order: list[Action] = []
        count = {(k, c): 0 for k in (F, BI, BW) for c in (0, 1)}
        pending = {0: deque(), 1: deque()}

        def emit(kind: Kind, chunk: int) -> None:
            if kind is BW:
                mb = pending[chunk].popleft()
            else:
                mb = count[(kind, chunk)]
                if mb >= n:
                    return
                if kind is BI:
                    pending[chunk].append(mb)
            count[(kind, chunk)] += 1
            order.append(Action(kind, mb, chunk))

        for _ in range(2 * (pp - r) - 1):
            emit(F, 0)
        for _ in range(r):
            emit(F, 1)
            emit(F, 0)
        for _ in range(pp - r):
            emit(F, 1)
            emit(BI, 1)
            emit(BW, 1)
        while count[(F, 1)] < count[(F, 0)] or count[(F, 0)] < n:
            if count[(F, 0)] < n:
                emit(F, 0)
            emit(BI, 0)
            emit(BW, 0)
            emit(F, 1)
            emit(BI, 1)
            emit(BW, 1)
        for _ in range(r):
            emit(BI, 0)
            emit(BI, 1)
        for _ in range(pp - r):
            emit(BI, 0)
            emit(BW, 0)
        while pending[1]:
            emit(BW, 1)
        while pending[0]:
            emit(BW, 0)
        ranks.append([a for a in order if a.mb < m])
    return _schedule("zbv", m, StageMap(pp, 2, "v"), ranks)


@register("dualpipev")
def dualpipev(pp: int, m: int, vpp: int = 2) -> Schedule:
    """DualPipeV (DeepSeek-AI, deepseek-ai/DualPipe, 2025; the "cut-in-half" DualPipe of the
    DeepSeek-V3 report): V placement, eight phases per rank r (schedules.md section 1.3).
    Phases 4 and 5 pair a forward of one chunk with a backward of the other; DualPipe
    overlaps each pair, which this IR expresses as the two actions back to back (the engine
    runs them one after the other, an upper bound on the overlapped time). The tail switches
    to split backwards (BI, with BW deferred) to fill the drain."""
    _check(pp, m, vpp, "dualpipev", want_vpp=2)
    if m < 2 * pp:
        raise ScheduleConstraint(f"dualpipev: needs at least 2*pp = {2 * pp} micro-batches, got {m}")
    ranks = []
    for r in range(pp):
        order: list[Action] = []
        nxt = {(F, 0): 0, (F, 1): 0, (B, 0): 0, (B, 1): 0}
        weights: deque[tuple[int, int]] = deque()  # (chunk, mb) whose BW is still to run

        def forward(chunk: int) -> None:
            order.append(Action(F, nxt[(F, chunk)], chunk))
            nxt[(F, chunk)] += 1

        def backward(chunk: int, split: bool = False) -> None:
            mb = nxt[(B, chunk)]
            nxt[(B, chunk)] += 1
            order.append(Action(BI if split else B, mb, chunk))
            if split:
                weights.append((chunk, mb))

        def weight() -> None:
            chunk, mb = weights.popleft()
            order.append(Action(BW, mb, chunk))

        for _ in range(2 * (pp - r - 1)):                      # 1: nF0
            forward(0)
        for _ in range(r + 1):                                  # 2: nF0F1
            forward(0)
            forward(1)
        for _ in range(pp - r - 1):                             # 3: nI1W1F1
            backward(1, split=True)
            weight()
            forward(1)
        for _ in range(m - 2 * pp + r + 1):                     # 4: n(F0&B1)(F1&B0)
            forward(0)
            backward(1)
            forward(1)
            backward(0)
        for _ in range(pp - r - 1):                             # 5: nB1(F1&B0)
            backward(1)
            forward(1)
            backward(0)
        split = False
        for i in range(r + 1):                                  # 6: nB1B0, zero bubble half-way
            if i == (r + 1) // 2 and r % 2 == 1:
                split = True
            backward(1, split)
            if i == (r + 1) // 2 and r % 2 == 0:
                split = True
            backward(0, split)
        for _ in range(pp - r - 1):                             # 7: nWB0
            weight()
            backward(0, split=True)
        while weights:                                          # 8: nW
            weight()
        ranks.append(order)
    return _schedule("dualpipev", m, StageMap(pp, 2, "v"), ranks)

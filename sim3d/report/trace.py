"""Reading a trace (the contract, its columns and CSV form are `sim3d.trace`): action tokens,
SEND/RECV pairs, busy time and bubble per rank, and the Chrome Trace Event JSON that Perfetto
opens. The trace is read as numpy columns (`sim3d.trace.trace_columns`: a DataFrame, the
engine's rows or columns alike), so `sim3d run` writes the Perfetto trace without importing
pandas (a third of a second); only `bubble_by_rank`, which returns a Series, imports it.
`import sim3d` must stay free of matplotlib and torch (the Gantt chart lives in `gantt.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import numpy as np

from ..trace import trace_columns
from .bubbles import bubble_fractions
from .trace_slices import slice_texts

# Fixed thread id per stream so every rank shows its lanes in the same order in Perfetto.
STREAM_TIDS = {"compute": 0, "tp": 1, "cp": 2, "ep": 3, "pp": 4, "dp": 5}
_BUCKETED = frozenset({"DP_REDUCE", "PARAM_GATHER"})
_P2P_SENDS = {"SEND_F": "RECV_F", "SEND_B": "RECV_B"}


# ---- action tokens -----------------------------------------------------------------------

def action_token(kind: str, chunk: int, microbatch: int, peer: int) -> str:
    """The IR's text form of a row: F3, B2.1, SEND_F3.1@2, DP_REDUCE#0, OPT_STEP.

    Unknown kinds (engine-emitted TP/CP/EP collectives) follow the same pattern
    generically: kind, then micro-batch, `.chunk` when non-zero, `@peer` when known.
    """
    kind = str(kind)
    if kind in _BUCKETED:
        return (f"{kind}#{microbatch}" + (f".{chunk}" if chunk > 0 else "")) if microbatch >= 0 else kind
    if microbatch < 0:
        return kind
    text = f"{kind}{microbatch}" + (f".{chunk}" if chunk else "")
    return text + (f"@{peer}" if peer >= 0 else "")


# ---- Chrome Trace Event JSON ----------------------------------------------------------------

def _tids(streams) -> dict[str, int]:
    tids = dict(STREAM_TIDS)
    for s in sorted(set(streams) - set(tids)):  # unknown streams get ids after the fixed ones
        tids[s] = max(tids.values()) + 1
    return tids


def p2p_pairs(trace) -> list[tuple[int, int]]:
    """(send row position, recv row position) pairs for every SEND with a matching RECV.

    A SEND on rank s with peer d pairs with a RECV of the same direction on rank d whose
    peer is s, for the same micro-batch; several messages on one such channel match in
    start-time order, as NCCL / gloo messages do: sends and receives are numbered apart on
    each channel in that order, then joined on channel and number (in numpy: a dict per
    message took a third of the Perfetto trace's time on the flagship).
    """
    t = trace_columns(trace)
    kinds = t["kind"]
    p2p = np.flatnonzero(np.isin(kinds, list(_P2P_SENDS) + list(_P2P_SENDS.values())))  # compute never pairs
    rows = p2p[np.lexsort((t["end_s"][p2p], t["start_s"][p2p]))]  # stable: ties keep row order
    kind = kinds[rows]
    sent = np.isin(kind, list(_P2P_SENDS))
    forward = (kind == "SEND_F") | (kind == "RECV_F")
    src = np.where(sent, t["rank"][rows], t["peer"][rows])
    dst = np.where(sent, t["peer"][rows], t["rank"][rows])
    mb = t["microbatch"][rows]
    # one id per (src, dst, direction, mb) channel, shared by its sends and receives
    by_channel = np.lexsort((mb, forward, dst, src))
    keys = np.stack([src, dst, forward, mb])[:, by_channel]
    channel = np.empty(len(rows), dtype=np.int64)
    channel[by_channel] = np.cumsum(np.r_[True, (keys[:, 1:] != keys[:, :-1]).any(axis=0)]) if len(rows) else []
    # the number of each send (receive) on its channel, in time order
    numbered = np.lexsort((np.arange(len(rows)), channel, sent))
    first = np.r_[True, (channel[numbered][1:] != channel[numbered][:-1]) | (sent[numbered][1:] != sent[numbered][:-1])]
    starts = np.flatnonzero(first)
    number = np.empty(len(rows), dtype=np.int64)
    number[numbered] = np.arange(len(rows)) - np.repeat(starts, np.diff(np.r_[starts, len(rows)]))
    key = channel * (len(rows) + 1) + number
    _, at_send, at_recv = np.intersect1d(key[sent], key[~sent], assume_unique=True, return_indices=True)
    pairs = np.stack([rows[sent][at_send], rows[~sent][at_recv]], 1)
    pairs = pairs[np.argsort(pairs[:, 0])]  # a send pairs once: its position orders the pairs
    return list(map(tuple, pairs.tolist()))


# Lanes of one stream get thread ids tid * LANE_STRIDE + lane (lane 0 keeps the stream's id).
LANE_STRIDE = 100


def _lanes(rank: np.ndarray, stream_id: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per row such that rows of one (rank, stream) and lane never overlap: Perfetto
    drops slices on one thread that overlap without nesting, and the pipeline stream's sends
    and receives overlap all the time. Greedy interval partitioning in (start, end) order: the
    first free lane. A stream whose rows never overlap (compute, most of them) is all lane 0,
    found without the loop."""
    lane = np.zeros(len(rank), dtype=np.int64)
    order = np.lexsort((end, start, stream_id, rank))  # by thread, then as the greedy visits them
    r, k = rank[order], stream_id[order]
    bounds = np.flatnonzero((np.diff(r) != 0) | (np.diff(k) != 0)) + 1
    for rows in np.split(order, bounds):
        starts, ends = start[rows], end[rows]
        if len(rows) < 2 or (starts[1:] >= np.maximum.accumulate(ends)[:-1]).all():
            continue  # each row starts once every earlier one has ended: lane 0 throughout
        free_at: list[float] = []  # each lane's end
        for i, s, e in zip(rows.tolist(), starts.tolist(), ends.tolist()):
            for j, busy_until in enumerate(free_at):
                if busy_until <= s:
                    lane[i], free_at[j] = j, e
                    break
            else:
                lane[i] = len(free_at)
                free_at.append(e)
    return lane


def _threads(rank: np.ndarray, tid: np.ndarray, lane: np.ndarray) -> list[tuple[int, int, int]]:
    """The distinct (rank, tid, lane) of the rows, in that order: unique of one int64 key per
    row (a lexicographic unique of row triples sorts ten times slower)."""
    if not len(rank):
        return []
    tids, lanes = int(tid.max()) + 1, int(lane.max()) + 1
    keys = np.unique((rank * tids + tid) * lanes + lane).tolist()
    return [(key // (tids * lanes), key // lanes % tids, key % lanes) for key in keys]


def chrome_trace_events(trace, rank_labels: Mapping[int, str] | None = None) -> list[dict]:
    """The trace's Chrome Trace events as dicts (what `write_chrome_trace` writes)."""
    body = _chrome_trace_body(trace, rank_labels).rstrip(b",")
    return json.loads(b"[" + body + b"]")


def _chrome_trace_body(trace, rank_labels: Mapping[int, str] | None = None, extra: list[str] = ()) -> bytes:
    """The events as JSON text, comma-separated: a slice per row (formatted in bulk where
    pyarrow can, trace_slices.py), the flow arrows, the process and thread names, and `extra`
    (events already as JSON text). Every number is finite (checked) and every string escaped,
    so the text is valid JSON."""
    t = trace_columns(trace)
    labels = dict(rank_labels or {})
    stream_of_row = t["stream"].tolist()
    streams = sorted(set(stream_of_row))  # a handful: a dict beats sorting 10^5 strings
    tids = _tids(streams)
    stream_tid = np.fromiter(map(tids.__getitem__, stream_of_row), dtype=np.int64, count=len(stream_of_row))
    start, end = t["start_s"], t["end_s"]
    lanes = _lanes(t["rank"], stream_tid, start, end)
    tid_array = stream_tid + LANE_STRIDE * lanes
    meta: list[dict] = []
    for rank in np.unique(t["rank"]).tolist():
        label = labels.get(rank)
        name = f"rank {rank} ({label})" if label else f"rank {rank}"
        meta.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": name}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
    name_of = {tids[name]: name for name in streams}
    for rank, tid, lane in _threads(t["rank"], stream_tid, lanes):
        meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid + LANE_STRIDE * lane,
                     "args": {"name": name_of[tid] if lane == 0 else f"{name_of[tid]} ({lane + 1})"}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid + LANE_STRIDE * lane,
                     "args": {"sort_index": tid * LANE_STRIDE + lane}})
    us = 1e6
    ts, dur = start * us, np.clip(end - start, 0.0, None) * us
    if not (np.isfinite(ts).all() and np.isfinite(dur).all()):
        raise ValueError("write_chrome_trace: the trace has non-finite times")
    ints = {c: t[c] for c in ("rank", "stage", "chunk", "microbatch", "bytes", "peer")}
    blocks = slice_texts(ints, t["kind"], ts, dur, tid_array, _BUCKETED)
    kinds = t["kind"].tolist()
    if blocks is None:
        blocks = [_slice_texts_in_python(ints, kinds, ts, dur, tid_array)]
    # Flow arrows bind to the slice enclosing their timestamp, so anchor them mid-slice
    # (zero-duration slices are anchored at their only instant).
    quoted = {kind: json.dumps(kind) for kind in set(kinds)}
    rank_of, tid_of, mid = ints["rank"].tolist(), tid_array.tolist(), (ts + dur / 2).tolist()
    texts = []
    for flow_id, (s, r) in enumerate(p2p_pairs(t)):
        common = f'"name":{quoted[kinds[s]]},"cat":"p2p","id":{flow_id}'
        texts.append(f'{{{common},"ph":"s","ts":{mid[s]!r},"pid":{rank_of[s]},"tid":{tid_of[s]}}}')
        texts.append(f'{{{common},"ph":"f","bp":"e","ts":{mid[r]!r},"pid":{rank_of[r]},"tid":{tid_of[r]}}}')
    texts += [json.dumps(e, separators=(",", ":"), allow_nan=False) for e in meta]
    return b"".join(blocks) + ",".join([*texts, *extra]).encode()


def _slice_texts_in_python(ints, kinds, ts, dur, tids) -> bytes:
    cols = {c: v.tolist() for c, v in ints.items()}
    quoted = {kind: json.dumps(kind) for kind in set(kinds)}
    names = [json.dumps(action_token(kind, chunk, mb, peer))
             for kind, chunk, mb, peer in zip(kinds, cols["chunk"], cols["microbatch"], cols["peer"])]
    return "".join(_SLICE % row for row in zip(names, map(quoted.__getitem__, kinds), ts.tolist(), dur.tolist(),
                                                  cols["rank"], tids.tolist(), cols["stage"], cols["chunk"],
                                                  cols["microbatch"], cols["bytes"], cols["peer"])).encode()


_SLICE = ('{"name":%s,"cat":%s,"ph":"X","ts":%r,"dur":%r,"pid":%d,"tid":%d,'
          '"args":{"stage":%d,"chunk":%d,"microbatch":%d,"bytes":%d,"peer":%d}},')


# The process that holds the link counter tracks (sorted above the ranks by its sort index):
# a pid no rank has (scenario/bounds.py caps GPUs at 2^22) and not negative, which Perfetto's
# JSON importer would fold into pid 0, rank 0's process.
LINKS_PID = 2**30


def link_counter_events(timelines: Mapping[str, list[tuple[float, float]]]) -> list[str]:
    """Perfetto counter tracks ("C" events), one per link direction: its busy percentage, as
    JSON texts (formatted directly: thousands of json.dumps calls were a fifth of the file's
    time; the text is what json.dumps gives)."""
    if not timelines:
        return []
    events = [json.dumps(e, separators=(",", ":")) for e in (
        {"name": "process_name", "ph": "M", "pid": LINKS_PID, "tid": 0, "args": {"name": "links (busy %)"}},
        {"name": "process_sort_index", "ph": "M", "pid": LINKS_PID, "tid": 0, "args": {"sort_index": -1}})]
    for link, points in timelines.items():
        times, busy = np.array([p[0] for p in points], dtype=float) * 1e6, [round(100 * v, 3) for _, v in points]
        if not (np.isfinite(times).all() and np.isfinite(busy).all()):
            raise ValueError(f"write_chrome_trace: link {link} has non-finite times or levels")
        head = f'{{"name":{json.dumps(link)},"ph":"C","pid":{LINKS_PID},"ts":'
        events += [f'{head}{t!r},"args":{{"busy %":{v!r}}}}}' for t, v in zip(times.tolist(), busy)]
    return events


def write_chrome_trace(trace, path: str | Path, rank_labels: Mapping[int, str] | None = None,
                       link_timelines: Mapping[str, list[tuple[float, float]]] | None = None) -> Path:
    """Write a Perfetto / chrome://tracing JSON file (gzipped when `path` ends in .gz) of a
    trace (DataFrame, engine rows or columns): one process per rank, one thread per stream,
    `X` slices in microseconds named by action token, and SEND -> RECV flow arrows; with
    `link_timelines` (traffic.link_timelines), a counter track per link of its busy
    percentage over time.

    `rank_labels[r]` (e.g. "pp1 tp0 dp0") is shown as "rank r (pp1 tp0 dp0)".
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = _chrome_trace_body(trace, rank_labels, extra=link_counter_events(link_timelines or {})).rstrip(b",")
    text = b'{"traceEvents":[' + body + b'],"displayTimeUnit":"ms"}'
    if path.suffix == ".gz":  # Perfetto opens trace.json.gz as it is
        import gzip
        # not gzip.open: its header would carry the file's name, a temporary one when written
        # safely (util/safe_files.py)
        text = gzip.compress(text, compresslevel=6)
    path.write_bytes(text)
    return path


# ---- bubbles ----------------------------------------------------------------------------

def bubble_by_rank(df):
    """Idle fraction of each rank's compute stream over the step span (`bubbles.py`: the
    span is the whole trace's, busy time the union of the rank's compute intervals), as a
    pandas Series. Index: rank; ranks with no compute rows report 1.0."""
    import pandas as pd
    fractions = bubble_fractions(trace_columns(df))
    return pd.Series(list(fractions.values()), index=pd.Index(list(fractions), name="rank", dtype="int64"),
                     name="bubble", dtype=float)

"""Reading a trace (the contract, its columns and CSV form are `sim3d.trace`): action tokens,
SEND/RECV pairs, busy time and bubble per rank, and the Chrome Trace Event JSON that Perfetto
opens. Only pandas and the standard library are imported here: `import sim3d` must stay free
of matplotlib and torch (the Gantt chart lives in `gantt.py`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from ..trace import canonical, check_trace, trace_columns
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


def p2p_pairs(df: pd.DataFrame) -> list[tuple[int, int]]:
    """(send row position, recv row position) pairs for every SEND with a matching RECV.

    A SEND on rank s with peer d pairs with a RECV of the same direction on rank d whose
    peer is s, for the same micro-batch; several messages on one such channel match in
    start-time order, as NCCL / gloo messages do. (Vectorized: numbered per channel in that
    order, then joined on channel and number.)
    """
    df = check_trace(df).reset_index(drop=True)
    p2p = df[df["kind"].isin(list(_P2P_SENDS) + list(_P2P_SENDS.values()))]  # compute rows never pair
    ordered = p2p.sort_values(["start_s", "end_s"], kind="stable")
    is_send = ordered["kind"].isin(list(_P2P_SENDS))
    sends, recvs = ordered[is_send], ordered[~is_send]
    channel = ["src", "dst", "direction", "microbatch"]
    send_keys = pd.DataFrame({"src": sends["rank"], "dst": sends["peer"], "microbatch": sends["microbatch"],
                              "direction": sends["kind"].map(_P2P_SENDS).astype(str), "send": sends.index})
    recv_keys = pd.DataFrame({"src": recvs["peer"], "dst": recvs["rank"], "microbatch": recvs["microbatch"],
                              "direction": recvs["kind"].astype(str), "recv": recvs.index})
    send_keys["n"] = send_keys.groupby(channel, sort=False).cumcount()
    recv_keys["n"] = recv_keys.groupby(channel, sort=False).cumcount()
    matched = send_keys.merge(recv_keys, on=channel + ["n"])
    return sorted(zip(matched["send"].tolist(), matched["recv"].tolist()))


# Lanes of one stream get thread ids tid * LANE_STRIDE + lane (lane 0 keeps the stream's id).
LANE_STRIDE = 100


def _lanes(df: pd.DataFrame) -> list[int]:
    """A lane per row such that rows of one (rank, stream, lane) never overlap: Perfetto drops
    slices on one thread that overlap without nesting, and the pipeline stream's sends and
    receives overlap all the time. Greedy interval partitioning: the first free lane."""
    lane = [0] * len(df)
    free_at: dict[tuple, list[float]] = defaultdict(list)  # (rank, stream) -> each lane's end
    order = np.lexsort((df["end_s"].to_numpy(), df["start_s"].to_numpy())).tolist()
    ranks, streams, starts, ends = (df[c].tolist() for c in ("rank", "stream", "start_s", "end_s"))
    for i in order:
        ends_of = free_at[(ranks[i], streams[i])]
        for k, end in enumerate(ends_of):
            if end <= starts[i]:
                lane[i], ends_of[k] = k, ends[i]
                break
        else:
            lane[i] = len(ends_of)
            ends_of.append(ends[i])
    return lane


def chrome_trace_events(df: pd.DataFrame, rank_labels: Mapping[int, str] | None = None) -> list[dict]:
    """The trace's Chrome Trace events as dicts (what `write_chrome_trace` writes)."""
    body = _chrome_trace_body(df, rank_labels).rstrip(b",")
    return json.loads(b"[" + body + b"]")


def _chrome_trace_body(df: pd.DataFrame, rank_labels: Mapping[int, str] | None = None,
                       extra: list[dict] = ()) -> bytes:
    """The events as JSON text, comma-separated: a slice per row (formatted in bulk where
    pyarrow can, trace_slices.py), the flow arrows, the process and thread names, and `extra`.
    Every number is finite (checked) and every string escaped, so the text is valid JSON."""
    df = canonical(df)
    labels = dict(rank_labels or {})
    tids = _tids(df["stream"].unique())
    lanes = _lanes(df)
    tid_array = np.array([tids[stream] for stream in df["stream"].tolist()], dtype=np.int64) + LANE_STRIDE * np.array(
        lanes, dtype=np.int64)
    meta: list[dict] = []
    threads = sorted(set(zip(df["rank"].tolist(), df["stream"].tolist(), lanes)), key=lambda t: (t[0], tids[t[1]], t[2]))
    for rank in sorted(df["rank"].unique().tolist()):
        label = labels.get(rank)
        name = f"rank {rank} ({label})" if label else f"rank {rank}"
        meta.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": name}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
    for rank, stream, lane in threads:
        tid = tids[stream] + LANE_STRIDE * lane
        meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid,
                     "args": {"name": stream if lane == 0 else f"{stream} ({lane + 1})"}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid,
                     "args": {"sort_index": tids[stream] * LANE_STRIDE + lane}})
    us = 1e6
    start, end = df["start_s"].to_numpy(dtype=float), df["end_s"].to_numpy(dtype=float)
    ts, dur = start * us, np.clip(end - start, 0.0, None) * us
    if not (np.isfinite(ts).all() and np.isfinite(dur).all()):
        raise ValueError("write_chrome_trace: the trace has non-finite times")
    ints = {c: df[c].to_numpy(dtype=np.int64) for c in ("rank", "stage", "chunk", "microbatch", "bytes", "peer")}
    kinds = df["kind"].tolist()
    blocks = slice_texts(ints, kinds, ts, dur, tid_array, _BUCKETED)
    if blocks is None:
        blocks = [_slice_texts_in_python(ints, kinds, ts, dur, tid_array)]
    # Flow arrows bind to the slice enclosing their timestamp, so anchor them mid-slice
    # (zero-duration slices are anchored at their only instant).
    quoted = {kind: json.dumps(kind) for kind in set(kinds)}
    rank_of, tid_of, mid = ints["rank"].tolist(), tid_array.tolist(), (ts + dur / 2).tolist()
    texts = []
    for flow_id, (s, r) in enumerate(p2p_pairs(df)):
        common = f'"name":{quoted[kinds[s]]},"cat":"p2p","id":{flow_id}'
        texts.append(f'{{{common},"ph":"s","ts":{mid[s]!r},"pid":{rank_of[s]},"tid":{tid_of[s]}}}')
        texts.append(f'{{{common},"ph":"f","bp":"e","ts":{mid[r]!r},"pid":{rank_of[r]},"tid":{tid_of[r]}}}')
    texts += [json.dumps(e, separators=(",", ":"), allow_nan=False) for e in [*meta, *extra]]
    return b"".join(blocks) + ",".join(texts).encode()


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


def link_counter_events(timelines: Mapping[str, list[tuple[float, float]]]) -> list[dict]:
    """Perfetto counter tracks ("C" events), one per link direction: its busy percentage."""
    if not timelines:
        return []
    events = [{"name": "process_name", "ph": "M", "pid": LINKS_PID, "tid": 0, "args": {"name": "links (busy %)"}},
              {"name": "process_sort_index", "ph": "M", "pid": LINKS_PID, "tid": 0, "args": {"sort_index": -1}}]
    for link, points in timelines.items():
        events += [{"name": link, "ph": "C", "pid": LINKS_PID, "ts": t * 1e6, "args": {"busy %": round(100 * v, 3)}}
                   for t, v in points]
    return events


def write_chrome_trace(df: pd.DataFrame, path: str | Path, rank_labels: Mapping[int, str] | None = None,
                       link_timelines: Mapping[str, list[tuple[float, float]]] | None = None) -> Path:
    """Write a Perfetto / chrome://tracing JSON file (gzipped when `path` ends in .gz): one
    process per rank, one thread per stream, `X` slices in microseconds named by action
    token, and SEND -> RECV flow arrows; with `link_timelines` (traffic.link_timelines), a
    counter track per link of its busy percentage over time.

    `rank_labels[r]` (e.g. "pp1 tp0 dp0") is shown as "rank r (pp1 tp0 dp0)".
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = _chrome_trace_body(df, rank_labels, extra=link_counter_events(link_timelines or {})).rstrip(b",")
    text = b'{"traceEvents":[' + body + b'],"displayTimeUnit":"ms"}'
    if path.suffix == ".gz":  # Perfetto opens trace.json.gz as it is
        import gzip
        # not gzip.open: its header would carry the file's name, a temporary one when written
        # safely (report/safe_files.py)
        text = gzip.compress(text, compresslevel=6)
    path.write_bytes(text)
    return path


# ---- bubbles ----------------------------------------------------------------------------

def bubble_by_rank(df: pd.DataFrame) -> pd.Series:
    """Idle fraction of each rank's compute stream over the step span (`bubbles.py`: the
    span is the whole trace's, busy time the union of the rank's compute intervals).
    Index: rank; ranks with no compute rows report 1.0."""
    fractions = bubble_fractions(trace_columns(df))
    return pd.Series(list(fractions.values()), index=pd.Index(list(fractions), name="rank", dtype="int64"),
                     name="bubble", dtype=float)

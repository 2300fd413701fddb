"""The Chrome trace's slices ("X" events, one per trace row) as JSON text, in bulk.

A full-fidelity trace has hundreds of thousands of rows; formatting each in Python took 1.2 s
of the 2 s that writing trace.json cost for gpt3.yaml on 1024 GPUs. With pyarrow installed the
rows are formatted column-wise by Arrow's string kernels: numbers in their shortest exact form
(valid JSON, the same floats when read back), names built from the same rule as
`action_token`. Without pyarrow, or where a kind would need JSON escaping, `None` tells the
caller to format the rows itself.
"""

from __future__ import annotations

import re

import numpy as np

from ..trace import arrow_array, arrow_scalar

_PLAIN = re.compile(r"[A-Za-z0-9_]+")  # kinds whose tokens need no JSON escaping
_ROWS_PER_BLOCK = 200_000  # bounds the text held at once (and Arrow's 2 GiB string offsets)


def slice_texts(columns: dict[str, np.ndarray], kinds: np.ndarray, ts: np.ndarray, dur: np.ndarray,
                tids: np.ndarray, bucketed: frozenset[str]) -> list[bytes] | None:
    """Blocks of `{...},` texts, one object per row, or None (see the module docstring).
    `columns`: rank, stage, chunk, microbatch, bytes, peer (int64); `kinds`: the kind column.
    Every Arrow value is built from buffers (`sim3d.trace.arrow_array`): pyarrow would import
    pandas to convert a Python literal."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return None
    if not all(_PLAIN.fullmatch(k) for k in set(np.asarray(kinds).tolist())):
        return None
    blocks = []
    for lo in range(0, len(kinds), _ROWS_PER_BLOCK):
        hi = min(lo + _ROWS_PER_BLOCK, len(kinds))
        cut = {name: values[lo:hi] for name, values in columns.items()}
        kind = arrow_array(kinds[lo:hi], large=False)
        text = {name: pc.cast(arrow_array(values), pa.string()) for name, values in cut.items()}
        name = _tokens(pc, kind, cut, text, bucketed)
        row = _join(pc, '{"name":"', name, '","cat":"', kind, '","ph":"X","ts":',
                    pc.cast(arrow_array(ts[lo:hi]), pa.string()), ',"dur":', pc.cast(arrow_array(dur[lo:hi]), pa.string()),
                    ',"pid":', text["rank"], ',"tid":', pc.cast(arrow_array(tids[lo:hi]), pa.string()),
                    ',"args":{"stage":', text["stage"], ',"chunk":', text["chunk"], ',"microbatch":', text["microbatch"],
                    ',"bytes":', text["bytes"], ',"peer":', text["peer"], "}},")
        blocks.append(_concatenated(row))
    return blocks


def _join(pc, *parts):
    """The parts (string arrays, or str for the same text on every row) joined row by row."""
    return pc.binary_join_element_wise(*(arrow_scalar(p) if isinstance(p, str) else p for p in parts),
                                       arrow_scalar(""))


def _tokens(pc, kind, cut, text, bucketed):
    """`action_token` column-wise: F3, B2.1, SEND_F3.1@2, DP_REDUCE#0, OPT_STEP."""
    mb, chunk, peer = (arrow_array(cut[c]) for c in ("microbatch", "chunk", "peer"))
    zero, empty = arrow_scalar(0), arrow_scalar("")
    is_bucketed = pc.is_in(kind, value_set=arrow_array(sorted(bucketed), large=False))
    has_mb = pc.greater_equal(mb, zero)
    number = pc.if_else(has_mb, _join(pc, pc.if_else(is_bucketed, arrow_scalar("#"), empty), text["microbatch"]),
                        empty)
    # a bucket names its chunk when positive; an action when non-zero (an OPT_STEP has no micro-batch)
    shows_chunk = pc.and_(has_mb, pc.if_else(is_bucketed, pc.greater(chunk, zero), pc.not_equal(chunk, zero)))
    chunk_part = pc.if_else(shows_chunk, _join(pc, ".", text["chunk"]), empty)
    shows_peer = pc.and_(pc.and_(has_mb, pc.invert(is_bucketed)), pc.greater_equal(peer, zero))
    peer_part = pc.if_else(shows_peer, _join(pc, "@", text["peer"]), empty)
    return _join(pc, kind, number, chunk_part, peer_part)


def _concatenated(strings) -> bytes:
    """The texts of a string array back to back: its data buffer between its first and last
    offsets (the array may be a slice of a larger buffer)."""
    strings = strings.combine_chunks() if hasattr(strings, "combine_chunks") else strings
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32, count=len(strings) + 1, offset=strings.offset * 4)
    return strings.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]]

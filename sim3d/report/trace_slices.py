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
        kernels = _Kernels()
    except ImportError:
        return None
    if not all(_PLAIN.fullmatch(k) for k in set(np.asarray(kinds).tolist())):
        return None
    blocks = []
    for lo in range(0, len(kinds), _ROWS_PER_BLOCK):
        hi = min(lo + _ROWS_PER_BLOCK, len(kinds))
        cut = {name: values[lo:hi] for name, values in columns.items()}
        kind = arrow_array(kinds[lo:hi], large=False)
        text = {name: kernels.text(values) for name, values in cut.items()}
        name = _tokens(kernels, kind, cut, text, bucketed)
        row = kernels.join('{"name":"', name, '","cat":"', kind, '","ph":"X","ts":', kernels.text(ts[lo:hi]),
                           ',"dur":', kernels.text(dur[lo:hi]), ',"pid":', text["rank"],
                           ',"tid":', kernels.text(tids[lo:hi]), ',"args":{"stage":', text["stage"],
                           ',"chunk":', text["chunk"], ',"microbatch":', text["microbatch"],
                           ',"bytes":', text["bytes"], ',"peer":', text["peer"], "}},")
        blocks.append(_concatenated(row))
    return blocks


class _Kernels:
    """The few Arrow compute functions used here, called by name. pyarrow.compute wraps all of
    its ~300 functions in Python when imported (0.07 s of `sim3d run`'s critical path);
    pyarrow._compute, which it is built on, calls them as they are. A pyarrow without that
    module still has the public pyarrow.compute."""

    def __init__(self):
        import pyarrow as pa
        try:
            from pyarrow._compute import CastOptions, SetLookupOptions, call_function
        except ImportError:
            from pyarrow.compute import CastOptions, SetLookupOptions, call_function
        self.call, self.set_lookup, self.to_string = call_function, SetLookupOptions, CastOptions.safe(pa.string())

    def text(self, values: np.ndarray):
        """A numpy column as Arrow strings (numbers in their shortest exact form)."""
        return self.call("cast", [arrow_array(values)], self.to_string)

    def join(self, *parts):
        """The parts (string arrays, or str for the same text on every row) joined row by row."""
        return self.call("binary_join_element_wise",
                         [arrow_scalar(p) if isinstance(p, str) else p for p in parts] + [arrow_scalar("")])

    def is_in(self, values, choices: list[str]):
        return self.call("is_in", [values], self.set_lookup(arrow_array(choices, large=False)))


def _tokens(k: _Kernels, kind, cut, text, bucketed):
    """`action_token` column-wise: F3, B2.1, SEND_F3.1@2, DP_REDUCE#0, OPT_STEP."""
    mb, chunk, peer = (arrow_array(cut[c]) for c in ("microbatch", "chunk", "peer"))
    zero, empty = arrow_scalar(0), arrow_scalar("")
    is_bucketed = k.is_in(kind, sorted(bucketed))
    has_mb = k.call("greater_equal", [mb, zero])
    number = k.call("if_else", [has_mb, k.join(k.call("if_else", [is_bucketed, arrow_scalar("#"), empty]),
                                               text["microbatch"]), empty])
    # a bucket names its chunk when positive; an action when non-zero (an OPT_STEP has no micro-batch)
    shows_chunk = k.call("and", [has_mb, k.call("if_else", [is_bucketed, k.call("greater", [chunk, zero]),
                                                            k.call("not_equal", [chunk, zero])])])
    chunk_part = k.call("if_else", [shows_chunk, k.join(".", text["chunk"]), empty])
    shows_peer = k.call("and", [k.call("and", [has_mb, k.call("invert", [is_bucketed])]),
                                k.call("greater_equal", [peer, zero])])
    peer_part = k.call("if_else", [shows_peer, k.join("@", text["peer"]), empty])
    return k.join(kind, number, chunk_part, peer_part)


def _concatenated(strings) -> bytes:
    """The texts of a string array back to back: its data buffer between its first and last
    offsets (the array may be a slice of a larger buffer)."""
    strings = strings.combine_chunks() if hasattr(strings, "combine_chunks") else strings
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32, count=len(strings) + 1, offset=strings.offset * 4)
    return strings.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]]

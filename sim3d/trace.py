"""The trace contract (docs/contracts.md#trace-columns), below the engine and the executor, which both
build rows for it, and the report, which reads and writes it.

One row per executed action, simulated and executed alike, columns TRACE_COLUMNS:

* `rank` and `peer` are global ranks; `peer` is -1 where no single peer applies, so
  SEND -> RECV flows join rows directly.
* `stage` is the global pipeline stage of the action's chunk; `chunk` is -1 for OPT_STEP.
* `microbatch` is -1 where it does not apply; for the bucketed data-parallel kinds
  (DP_REDUCE, PARAM_GATHER) it carries the bucket index, so `DP_REDUCE#3` can be rebuilt.
* `stream` is the kind's stream (STREAM_OF_KIND); the simulator adds TP_COMM / CP_COMM /
  EP_COMM / DP_COMM rows on the tp / cp / ep / dp streams for the collectives inside a compute
  action (DP_COMM: a sharded data-parallel unit's parameter gathers and gradient reduce-scatters),
  ending with it.
* A SEND row spans the transfer on the wire (simulated) or the isend until it is seen
  complete (executed). A RECV row is the same message seen from the receiver: from the
  moment it could start arriving (the later of the post and the transfer's start) until it
  is there; a RECV never makes its rank wait (the consuming compute does).
* `bytes`: what this rank puts on the wire for the action. SEND and RECV: the message.
  Collective rows (DP_REDUCE, PARAM_GATHER, *_COMM): the ring's bus bytes, i.e. the buffer
  times nccl-tests' bus factor (2(n-1)/n for an all-reduce, (n-1)/n for an all-gather,
  reduce-scatter or all-to-all); 0 for a group of one and for compute.

Only the standard library is imported at module level: the engine imports this module, and
`import sim3d` stays free of pandas until a table is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .schedule.ir import Kind
from .util.gc_control import gc_paused


class TraceRow(NamedTuple):
    """One row of a trace, fields in TRACE_COLUMNS order. A tuple, so everything that reads
    rows by position keeps working and a row costs no more memory than before. Hot paths
    (the engine writes a row per simulated action) build it with
    `tuple.__new__(TraceRow, values)`: the same object without the keyword-handling
    constructor, a third of the cost."""
    rank: int
    stage: int
    chunk: int
    microbatch: int
    kind: str
    stream: str
    start_s: float
    end_s: float
    bytes: int
    peer: int


TRACE_COLUMNS = TraceRow._fields
STREAM_OF_KIND = {**{k.value: "compute" for k in (Kind.F, Kind.B, Kind.BI, Kind.BW, Kind.OPT_STEP)},
                  **{k.value: "pp" for k in (Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B)},
                  Kind.DP_REDUCE.value: "dp", Kind.PARAM_GATHER.value: "dp",
                  "TP_COMM": "tp", "CP_COMM": "cp", "EP_COMM": "ep", "DP_COMM": "dp"}

_INT_COLUMNS = ("rank", "stage", "chunk", "microbatch", "bytes", "peer")
_FLOAT_COLUMNS = ("start_s", "end_s")
_STR_COLUMNS = ("kind", "stream")



def empty_trace():
    """A trace with no rows but the right columns and dtypes (so concat keeps the dtypes)."""
    import pandas as pd
    return canonical(pd.DataFrame({c: [] for c in TRACE_COLUMNS}))


def check_trace(df):
    """Raise ValueError unless `df` has exactly the trace columns; return it in column order."""
    import pandas as pd
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"a trace must be a pandas DataFrame, got {type(df).__name__}")
    present = [str(c) for c in df.columns]
    missing = [c for c in TRACE_COLUMNS if c not in present]
    extra = [c for c in present if c not in TRACE_COLUMNS]
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing column(s) " + ", ".join(missing))
        if extra:
            parts.append("unexpected column(s) " + ", ".join(extra))
        raise ValueError("trace: " + "; ".join(parts) + f" (expected exactly {', '.join(TRACE_COLUMNS)})")
    if len(set(present)) != len(present):
        raise ValueError("trace: duplicated column names")
    return df.loc[:, list(TRACE_COLUMNS)]


def check_trace_values(df):
    """Raise ValueError naming the first row whose times or ids no run could produce."""
    import numpy as np
    problems = [("start_s", ~np.isfinite(df["start_s"]) | (df["start_s"] < 0), "a finite time >= 0"),
                ("end_s", ~np.isfinite(df["end_s"]) | (df["end_s"] < df["start_s"]), "a finite time >= start_s"),
                ("rank", df["rank"] < 0, "a rank >= 0"),
                ("bytes", df["bytes"] < 0, "bytes >= 0")]
    for column, bad, expected in problems:
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            value = df[column].iloc[row]
            value = value.item() if hasattr(value, "item") else value  # 0.0, not np.float64(0.0)
            raise ValueError(f"data row {row + 1}: {column}={value!r}, expected {expected}")
    return df


def canonical(df):
    """Cast to the canonical dtypes: int64 for ids/bytes, float64 for times, str for labels."""
    out = check_trace(df).copy()
    for c in _INT_COLUMNS:
        out[c] = out[c].astype("int64")
    for c in _FLOAT_COLUMNS:
        out[c] = out[c].astype("float64")
    for c in _STR_COLUMNS:
        out[c] = out[c].astype(str)
    return out.reset_index(drop=True)



def trace_columns(trace) -> dict:
    """The trace as one numpy array per column (TRACE_COLUMNS, canonical dtypes; labels as
    fixed-width strings), from engine rows, a trace DataFrame, or columns already. The plots
    read this form: it needs no pandas, so the plotting process need not import it (a fifth
    of a second on the flagship's critical path), and it pickles as raw buffers."""
    import numpy as np
    if isinstance(trace, (list, tuple)):
        with gc_paused():
            if all(type(row) is TraceRow or type(row) is tuple for row in trace):
                return _columns_of_rows(trace)
            # rows of another form (lists, read from JSON): a column at a time
            return {name: _column(name, [row[i] for row in trace]) for i, name in enumerate(TRACE_COLUMNS)}
    if hasattr(trace, "columns") and hasattr(trace, "loc"):  # a DataFrame
        trace = check_trace(trace)
    elif not (hasattr(trace, "keys") and all(name in trace for name in TRACE_COLUMNS)):
        raise ValueError(f"a trace must be engine rows, a DataFrame or its columns, got {type(trace).__name__}")
    return {name: _column(name, np.asarray(trace[name])) for name in TRACE_COLUMNS}


def _columns_of_rows(rows) -> dict:
    """Rows in TRACE_COLUMNS order as columns, read by numpy in one pass into a structured
    array (half the time of a list per column: the flagship's Gantt chart waits for this);
    the labels as wide as their longest value, as numpy sizes them from a list."""
    import numpy as np
    widths = {name: max(map(len, {str(row[i]) for row in rows}), default=1)  # str first: 1 and True differ
              for i, name in enumerate(TRACE_COLUMNS) if name in _STR_COLUMNS}
    table = np.array(rows, dtype=[(name, f"<U{widths[name]}" if name in widths else
                                   "float64" if name in _FLOAT_COLUMNS else "int64") for name in TRACE_COLUMNS])
    return {name: np.ascontiguousarray(table[name]) for name in TRACE_COLUMNS}


def _column(name: str, values):
    import numpy as np
    if name in _STR_COLUMNS:
        return np.asarray(values, dtype=str)
    return np.asarray(values).astype("int64" if name in _INT_COLUMNS else "float64", copy=False)


def rows_to_frame(rows):
    """A trace DataFrame in the canonical dtypes from rows in TRACE_COLUMNS order (TraceRow,
    or any tuple in that order: the engine's and executor's rows). Built column by column:
    pandas' row-wise constructor took 1.4 s for a full-fidelity trace of 192,640 rows, this 0.2 s."""
    import pandas as pd
    if not rows:
        return empty_trace()
    with gc_paused():
        data = {}
        for i, name in enumerate(TRACE_COLUMNS):
            values = [row[i] for row in rows]
            data[name] = pd.array(values, dtype="str") if name in _STR_COLUMNS else _column(name, values)
        return pd.DataFrame(data)


# ---- CSV ------------------------------------------------------------------------------

def write_trace_csv(trace, path: str | Path, table=None) -> Path:
    """`trace`: a DataFrame, engine rows or their columns (`trace_columns`); `table`: its Arrow
    table (`arrow_table`), where the caller has built it already for Parquet too. Floats
    round-trip exactly: the CSV is also the input of `sim3d compare`, which must not drift.
    With pyarrow installed its C++ writer does it (shortest exact form), from the columns
    without pandas: ten times faster than pandas' %.17g on a full-fidelity trace (0.16 s
    against 1.8 s for 192,640 rows)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if parquet_available():
        import pyarrow.csv
        columns = trace_columns(trace)
        table = arrow_table(columns) if table is None else table
        # unquoted, as pandas writes it, where no label needs quotes (the engine's never do);
        # the labels read from numpy: Arrow's unique() would import pyarrow.compute (0.07 s)
        labels = set(columns["kind"].tolist()) | set(columns["stream"].tolist())
        plain = not any(set(label) & set(',"\r\n') for label in labels)
        style = "none" if plain else "needed"
        try:  # the column names never need quotes (quoting_header: pyarrow >= 20)
            options = pyarrow.csv.WriteOptions(quoting_style=style, quoting_header="none")
        except TypeError:
            options = pyarrow.csv.WriteOptions(quoting_style=style)
        pyarrow.csv.write_csv(table, path, write_options=options)
    else:
        import pandas as pd
        pd.DataFrame(trace_columns(trace)).to_csv(path, index=False, float_format="%.17g")
    return path


def arrow_table(trace):
    """The trace as an Arrow table of the canonical types (labels as large_string, which is
    what pandas' str columns became), built without pandas."""
    import pyarrow as pa
    columns = trace_columns(trace)
    return pa.Table.from_arrays([arrow_array(columns[name]) for name in TRACE_COLUMNS], names=list(TRACE_COLUMNS))


# ---- Arrow without pandas ---------------------------------------------------------------
# pyarrow imports pandas, when installed, the first time it converts a Python or numpy object
# (pa.array, pa.scalar, a literal handed to a compute function): a third of a second that
# `sim3d run` spends nowhere else. These build arrays from their buffers instead.

def arrow_array(values, large: bool = True):
    """A numpy column as an Arrow array: integers and floats as they are (no copy), anything
    else as text (large_string, or string with `large=False`)."""
    import numpy as np
    import pyarrow as pa
    values = np.asarray(values)
    if values.dtype.kind in "iuf":
        values = np.ascontiguousarray(values)
        return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])
    encoded = [str(v).encode() for v in values.tolist()]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(np.fromiter(map(len, encoded), dtype=offsets.dtype, count=len(encoded)), out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(encoded),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def arrow_scalar(value):
    """A str, int or float as an Arrow scalar (string, int64, double)."""
    import numpy as np
    if isinstance(value, str):
        return arrow_array(np.array([value]), large=False)[0]
    return arrow_array(np.array([value], dtype=np.int64 if isinstance(value, int) else np.float64))[0]


def read_trace_csv(path: str | Path):
    import pandas as pd

    dtypes = {**{c: "int64" for c in _INT_COLUMNS}, **{c: "float64" for c in _FLOAT_COLUMNS},
              **{c: str for c in _STR_COLUMNS}}
    # pandas < 3 needs "round_trip" for bit-exact floats; pandas 3 does that by default and
    # deprecates the argument.
    exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    try:
        df = pd.read_csv(path, dtype=dtypes, keep_default_na=False, **exact)
    except (ValueError, OverflowError) as exc:  # a blank in an integer column, an id beyond int64
        raise ValueError(f"{path}: not a valid trace CSV ({_first_bad_cell(path) or str(exc).splitlines()[0]})") \
            from None
    return check_trace_values(canonical(df))


def _first_bad_cell(path) -> str | None:
    """Where a trace CSV that does not parse goes wrong: its first row with the wrong number
    of fields, or the first value its column cannot hold; None where that cannot be found."""
    import csv
    try:
        with open(path, newline="") as f:
            rows = csv.reader(f)
            header = next(rows)
            for number, row in enumerate(rows, start=1):
                if len(row) != len(header):
                    return f"data row {number} has {len(row)} fields, the header {len(header)}"
                for column, text in zip(header, row):
                    kind = int if column in _INT_COLUMNS else float if column in _FLOAT_COLUMNS else None
                    try:
                        if kind is not None:
                            kind(text)
                    except ValueError:
                        return (f"data row {number}: {column}={text!r}, expected "
                                f"{'a whole number' if kind is int else 'a number'}")
    except (OSError, UnicodeDecodeError, StopIteration, csv.Error):
        return None
    return None


# ---- Parquet (when pyarrow is installed: pip install 'sim3d[parquet]') ---------------------

def parquet_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("pyarrow") is not None


def write_trace_parquet(trace, path: str | Path, table=None) -> Path:
    """`trace` and `table` as `write_trace_csv` takes them; written by pyarrow alone (snappy,
    as pandas wrote it), so no pandas schema metadata: pandas reads the same table back."""
    import pyarrow.parquet as pq
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(arrow_table(trace) if table is None else table, path)
    return path


def read_trace(path: str | Path):
    """A trace from its CSV or Parquet file (by suffix), checked against the contract."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pandas as pd
        if not parquet_available():
            raise ValueError(f"{path}: reading Parquet needs pyarrow (pip install 'sim3d[parquet]')")
        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises its own types for bad files
            raise ValueError(f"{path}: not a valid Parquet trace ({str(exc).splitlines()[0]})") from None
        return check_trace_values(canonical(df))
    return read_trace_csv(path)


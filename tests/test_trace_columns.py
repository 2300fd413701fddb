"""A trace's forms for the writers and plots: engine rows as a DataFrame (`rows_to_frame`) and
as numpy columns (`trace_columns`), each equal to what pandas or numpy make of the rows alone."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sim3d.trace import TRACE_COLUMNS, TraceRow

ROOT = Path(__file__).resolve().parents[1]


def test_rows_to_frame_builds_the_canonical_table_column_by_column():
    """The engine's rows become a trace column by column (fast); it must equal pandas'
    row-wise constructor followed by the canonical casts, dtypes included."""
    import sim3d
    from sim3d.trace import canonical, rows_to_frame
    rows = sim3d.simulate(ROOT / "scenarios" / "mesh-32.yaml", full_fidelity=True).sim.rows
    rows = rows + [TraceRow(3, 1, 0, 2, "SEND_F", "pp", 0.5, 0.75, 7.0, 4)]  # a float byte count casts like canonical()
    built = rows_to_frame(rows)
    pd.testing.assert_frame_equal(built, canonical(pd.DataFrame(rows, columns=list(TRACE_COLUMNS))))
    assert len(rows_to_frame([])) == 0 and tuple(rows_to_frame([]).columns) == TRACE_COLUMNS


def test_trace_columns_equal_the_table_from_rows_frames_and_columns():
    """The plots' numpy form of a trace is the same whichever form it was handed."""
    import numpy as np
    import sim3d
    from sim3d.trace import rows_to_frame, trace_columns
    rows = sim3d.simulate(ROOT / "scenarios" / "mesh-32.yaml", full_fidelity=True).sim.rows
    frame = rows_to_frame(rows)
    forms = [trace_columns(rows), trace_columns(frame), trace_columns(trace_columns(frame))]
    for form in forms:
        assert tuple(form) == TRACE_COLUMNS
        for name in TRACE_COLUMNS:  # as Python values: a truncated label or a rounded time shows
            assert form[name].tolist() == frame[name].tolist(), name
    assert forms[0]["rank"].dtype == np.int64 and forms[0]["start_s"].dtype == np.float64
    with pytest.raises(ValueError, match="engine rows, a DataFrame or its columns"):
        trace_columns({"rank": [0]})


@pytest.mark.parametrize("rows", [
    [],
    [(0, 0, 0, 1, "F", "compute", 0, 1.5, 2.0, -1), (1, 0, 0, 1, "EP_COMBINE_COMM", "ep", 0.5, 1, True, 0)],
    [(3, 1, 0, 2, 7, "pp", 0, 2**60, 2**62, 2)],  # a label that is no str, integers as times
    [(0, 0, 0, 0, 1, "compute", 0, 1, 0, -1), (0, 0, 0, 0, True, "compute", 1, 2, 0, -1)],  # 1 and True: one set entry
    [[0, 0, 0, 1, "F", "compute", 0.0, 1.5, 2, -1]],  # rows as lists (read from JSON)
])
def test_rows_become_the_columns_numpy_makes_of_each(rows):
    """Engine rows are read in one pass (a structured array); each column must be what numpy
    makes of that column alone: labels as wide as the longest, times as floats, ids as int64."""
    import numpy as np
    from sim3d.trace import trace_columns
    columns = trace_columns(rows)
    for i, name in enumerate(TRACE_COLUMNS):
        values = [row[i] for row in rows]
        alone = (np.asarray(values, dtype=str) if name in ("kind", "stream") else
                 np.asarray(values).astype("float64" if name.endswith("_s") else "int64"))
        assert columns[name].dtype == alone.dtype and columns[name].tolist() == alone.tolist(), name

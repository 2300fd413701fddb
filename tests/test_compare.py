import pandas as pd
import pytest

from sim3d.report.compare import compare_traces
from sim3d.trace import TRACE_COLUMNS, TraceRow, read_trace_csv, write_trace_csv


def row(rank, stage, kind, mb, start, end, chunk=0, stream="compute"):
    return TraceRow(rank=rank, stage=stage, chunk=chunk, microbatch=mb, kind=kind, stream=stream,
                    start_s=start, end_s=end, bytes=0, peer=-1)


def test_folded_sim_against_replicated_real():
    # simulated: pp=2 folded (ranks 0, 1); F takes 1.0, B takes 2.0, the step 6.0
    sim = pd.DataFrame([row(0, 0, "F", 0, 0.0, 1.0), row(1, 1, "F", 0, 1.0, 2.0),
                        row(1, 1, "B", 0, 2.0, 4.0), row(0, 0, "B", 0, 4.0, 6.0)], columns=TRACE_COLUMNS)
    # executed: pp=2 x dp=2 (ranks 0,1 stage 0; ranks 2,3 stage 1): F 1.0/1.4 and 1.2/1.2
    # (mean 1.2 and 1.2), B 2.5 on every rank, plus a SEND that the simulation lacks
    real = pd.DataFrame([
        row(0, 0, "F", 0, 0.0, 1.0), row(1, 0, "F", 0, 0.0, 1.4),
        row(2, 1, "F", 0, 1.5, 2.7), row(3, 1, "F", 0, 1.5, 2.7),
        row(2, 1, "B", 0, 3.0, 5.5), row(3, 1, "B", 0, 3.0, 5.5),
        row(0, 0, "B", 0, 5.5, 8.0), row(1, 0, "B", 0, 5.5, 8.0),
        row(0, 0, "SEND_F", 0, 1.0, 1.1, stream="pp"),
    ], columns=TRACE_COLUMNS)
    result = compare_traces(sim, real)
    per_kind = result.per_kind.set_index("kind")
    assert per_kind.loc["F", "n"] == 2
    assert per_kind.loc["F", "real_mean_s"] == pytest.approx(1.2)
    assert per_kind.loc["F", "rel_err"] == pytest.approx((1.0 - 1.2) / 1.2)
    assert per_kind.loc["B", "rel_err"] == pytest.approx((2.0 - 2.5) / 2.5)
    assert result.sim_step_s == pytest.approx(6.0) and result.real_step_s == pytest.approx(8.0)
    assert result.step_rel_err == pytest.approx(-0.25)
    assert (result.unmatched_sim, result.unmatched_real) == (0, 1)
    assert list(result.per_kind["kind"]) == ["F", "B"]


def test_v_placement_pp_rank_and_render():
    # V placement: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2; chunk 0 gives the pp rank
    sim = pd.DataFrame([row(0, 0, "F", 0, 0, 1), row(1, 1, "F", 0, 1, 2), row(1, 2, "F", 0, 2, 3, chunk=1),
                        row(0, 3, "F", 0, 3, 4, chunk=1)], columns=TRACE_COLUMNS)
    real = sim.copy()
    real["rank"] = real["rank"] + 4  # other global ranks, same pipeline positions
    real["end_s"] = real["start_s"] + 2.0
    result = compare_traces(sim, real)
    assert len(result.per_action) == 4 and result.unmatched_sim == result.unmatched_real == 0
    assert list(result.per_action["rel_err"]) == pytest.approx([-0.5] * 4)
    assert sorted(result.per_action["pp_rank"]) == [0, 0, 1, 1]
    from rich.console import Console
    console = Console(record=True, width=100)
    console.print(result.render())
    assert "step" in console.export_text()


def test_missing_column_is_named():
    with pytest.raises(ValueError, match="peer"):
        compare_traces(pd.DataFrame(columns=TRACE_COLUMNS[:-1]), pd.DataFrame(columns=TRACE_COLUMNS))


def test_a_trace_whose_step_takes_no_time_is_refused_not_divided_by():
    from sim3d.report.compare import UnusableTrace
    sim = pd.DataFrame([row(0, 0, "F", 0, 0.0, 1.0), row(0, 0, "B", 0, 1.0, 3.0)], columns=TRACE_COLUMNS)
    frozen = pd.DataFrame([row(0, 0, "F", 0, 0.0, 0.0), row(0, 0, "B", 0, 0.0, 0.0)], columns=TRACE_COLUMNS)
    with pytest.raises(UnusableTrace, match="executed trace's step lasts 0 s"):
        compare_traces(sim, frozen)
    with pytest.raises(UnusableTrace, match="simulated trace's step lasts 0 s"):
        compare_traces(frozen, sim)


def test_a_trace_with_a_kind_no_run_writes_is_refused_by_row():
    from sim3d.report.compare import UnusableTrace
    sim = pd.DataFrame([row(0, 0, "F", 0, 0.0, 1.0), row(0, 0, "B", 0, 1.0, 3.0)], columns=TRACE_COLUMNS)
    odd = pd.DataFrame([row(0, 0, "F", 0, 0.0, 1.0), row(0, 0, "ZZZ", 0, 1.0, 3.0)], columns=TRACE_COLUMNS)
    with pytest.raises(UnusableTrace, match="executed trace's data row 2: kind='ZZZ' is none of F, B"):
        compare_traces(sim, odd)


@pytest.mark.parametrize("edit, message", [
    (lambda lines: lines[:3] + [lines[3] + ",F"] + lines[4:], "data row 3 has 11 fields, the header 10"),
    (lambda lines: lines[:2] + ["x" + lines[2][1:]] + lines[3:], "data row 2: rank='x', expected a whole number"),
    (lambda lines: lines[:1] + [",".join(lines[1].split(",")[:6] + [""] + lines[1].split(",")[7:])] + lines[2:],
     "data row 1: start_s='', expected a number"),
])
def test_a_broken_trace_csv_is_refused_naming_its_row_and_field(tmp_path, edit, message):
    trace = pd.DataFrame([row(0, 0, kind, mb, 3.0 * mb + (kind == "B"), 3.0 * mb + (1 if kind == "F" else 3))
                          for mb in range(3) for kind in ("F", "B")], columns=TRACE_COLUMNS)
    path = write_trace_csv(trace, tmp_path / "t.csv")
    lines = path.read_text().splitlines()
    path.write_text("\n".join(edit(lines)) + "\n")
    with pytest.raises(ValueError, match=message):
        read_trace_csv(path)

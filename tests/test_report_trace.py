"""Trace table, its CSV / Chrome JSON forms, bubbles, and the Gantt chart."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
import subprocess
import sys

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]

from sim3d.report.trace import action_token, bubble_by_rank, write_chrome_trace
from sim3d.trace import TRACE_COLUMNS, TraceRow, check_trace, empty_trace, read_trace_csv, write_trace_csv
from sim3d.schedule import build
from sim3d.schedule.evaluate import evaluate, uniform_costs


def unit_trace(name="1f1b", pp=4, m=8, vpp=1, tf=1.0, tb=2.0):
    from sim3d.report.gantt import timeline_to_trace
    schedule = build(name, pp, m, vpp)
    return timeline_to_trace(schedule, evaluate(schedule, uniform_costs(tf, tb)))


def with_comm(df: pd.DataFrame, pp: int) -> pd.DataFrame:
    """Add P2P rows (SEND on the producer, RECV on the consumer) and one DP bucket per rank."""
    rows = []
    for r in df.itertuples():
        if r.kind == "F" and r.rank < pp - 1:
            rows.append(TraceRow(r.rank, r.stage, 0, r.microbatch, "SEND_F", "pp", r.end_s, r.end_s + 1e-4, 1 << 20,
                                 r.rank + 1))
            rows.append(TraceRow(r.rank + 1, r.stage + 1, 0, r.microbatch, "RECV_F", "pp", r.end_s, r.end_s + 1e-4,
                                 1 << 20, r.rank))
        if r.kind == "B" and r.rank > 0:
            rows.append(TraceRow(r.rank, r.stage, 0, r.microbatch, "SEND_B", "pp", r.end_s, r.end_s, 1 << 20,
                                 r.rank - 1))
            rows.append(TraceRow(r.rank - 1, r.stage - 1, 0, r.microbatch, "RECV_B", "pp", r.end_s, r.end_s + 2e-4,
                                 1 << 20, r.rank))
    end = df["end_s"].max()
    for rank in sorted(df["rank"].unique()):
        rows.append(TraceRow(rank, rank, 0, 0, "DP_REDUCE", "dp", end, end + 0.5, 3 << 33, -1))  # > 2**32 bytes
    comm = pd.DataFrame(rows, columns=list(TRACE_COLUMNS))
    return pd.concat([df, comm], ignore_index=True)


# ---- table and CSV ------------------------------------------------------------------------

def test_check_trace_names_missing_and_extra_columns():
    df = unit_trace().drop(columns=["peer"])
    with pytest.raises(ValueError, match="missing column.*peer"):
        check_trace(df)
    df = unit_trace().assign(colour="red")
    with pytest.raises(ValueError, match="unexpected column.*colour"):
        check_trace(df)
    shuffled = unit_trace()[list(reversed(TRACE_COLUMNS))]
    assert tuple(check_trace(shuffled).columns) == TRACE_COLUMNS


@pytest.fixture(params=["arrow", "pandas"])
def csv_writer(request, monkeypatch):
    """write_trace_csv uses pyarrow's writer where installed, pandas' otherwise: both must round-trip."""
    import sim3d.trace
    if request.param == "arrow" and not sim3d.trace.parquet_available():
        pytest.skip("pyarrow not installed")
    monkeypatch.setattr(sim3d.trace, "parquet_available", lambda: request.param == "arrow")
    return request.param


def test_csv_round_trip_keeps_values_and_dtypes(tmp_path, csv_writer):
    df = with_comm(unit_trace(tf=1e-3 / 3, tb=2e-3 / 3), pp=4)  # non-terminating binary fractions
    path = write_trace_csv(df, tmp_path / "sub" / "trace.csv")
    back = read_trace_csv(path)
    assert tuple(back.columns) == TRACE_COLUMNS
    for c in ("rank", "stage", "chunk", "microbatch", "bytes", "peer"):
        assert back[c].dtype == "int64", c
    assert back["start_s"].dtype == "float64" and back["end_s"].dtype == "float64"
    pd.testing.assert_frame_equal(back, check_trace(df).reset_index(drop=True), check_dtype=False)
    assert (back["start_s"].to_numpy() == df["start_s"].to_numpy()).all()  # bit-exact
    assert back["bytes"].max() == 3 << 33


def test_empty_trace_round_trip(tmp_path, csv_writer):
    empty = empty_trace()
    assert tuple(empty.columns) == TRACE_COLUMNS and len(empty) == 0
    back = read_trace_csv(write_trace_csv(empty, tmp_path / "e.csv"))
    assert len(back) == 0 and back["rank"].dtype == "int64" and back["end_s"].dtype == "float64"


def test_action_tokens():
    assert action_token("F", 0, 3, -1) == "F3"
    assert action_token("B", 1, 2, -1) == "B2.1"
    assert action_token("SEND_F", 0, 3, 2) == "SEND_F3@2"
    assert action_token("SEND_B", 1, 3, 2) == "SEND_B3.1@2"
    assert action_token("DP_REDUCE", 0, 0, -1) == "DP_REDUCE#0"  # bucket in the microbatch column
    assert action_token("OPT_STEP", 0, -1, -1) == "OPT_STEP"
    assert action_token("TP_ALLREDUCE", 0, 4, -1) == "TP_ALLREDUCE4"


# ---- Chrome trace -----------------------------------------------------------------------------

def test_chrome_trace_structure_units_and_flows(tmp_path):
    pp = 4
    df = with_comm(unit_trace(tf=1e-3, tb=2e-3), pp)
    labels = {r: f"pp{r} tp0 dp0" for r in range(pp)}
    path = write_chrome_trace(df, tmp_path / "t.json", rank_labels=labels)
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ms"
    events = doc["traceEvents"]

    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {r: f"rank {r} (pp{r} tp0 dp0)" for r in range(pp)}
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    assert sort == {r: r for r in range(pp)}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[(0, 0)] == "compute" and threads[(0, 4)] == "pp" and threads[(0, 5)] == "dp"

    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(df)
    # 1F1B, tF = 1 ms: rank 1 runs F0 from 1 ms to 2 ms -> ts 1000 us, dur 1000 us.
    f0 = next(e for e in xs if e["pid"] == 1 and e["name"] == "F0")
    assert f0["ts"] == pytest.approx(1000.0) and f0["dur"] == pytest.approx(1000.0)
    assert f0["cat"] == "F" and f0["tid"] == 0
    assert f0["args"] == {"stage": 1, "chunk": 0, "microbatch": 0, "bytes": 0, "peer": -1}
    assert any(e["name"] == "SEND_F3@2" and e["pid"] == 1 and e["tid"] == 4 for e in xs)
    assert any(e["name"] == "DP_REDUCE#0" and e["args"]["bytes"] == 3 << 33 for e in xs)

    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    n_sends = int(df["kind"].isin(["SEND_F", "SEND_B"]).sum())
    assert len(starts) == len(finishes) == n_sends == 2 * 8 * (pp - 1)
    for fid, s in starts.items():
        f = finishes[fid]
        assert f["bp"] == "e" and s["name"] == f["name"]
        # The start sits inside a SEND slice, the finish inside the RECV slice on the peer.
        send = next(e for e in xs if e["pid"] == s["pid"] and e["tid"] == s["tid"]
                    and e["ts"] <= s["ts"] <= e["ts"] + e["dur"] and e["cat"].startswith("SEND"))
        recv = next(e for e in xs if e["pid"] == f["pid"] and e["tid"] == f["tid"]
                    and e["ts"] <= f["ts"] <= e["ts"] + e["dur"] and e["cat"].startswith("RECV"))
        assert recv["pid"] == send["args"]["peer"] and send["pid"] == recv["args"]["peer"]
        assert recv["args"]["microbatch"] == send["args"]["microbatch"]
        assert recv["cat"] == send["cat"].replace("SEND", "RECV")


def test_flows_skip_unmatched_sends_and_pair_in_order(tmp_path):
    rows = [  # two messages of one (src, dst, direction, mb) channel, one send without receive
        TraceRow(0, 0, 0, 5, "SEND_F", "pp", 0.0, 0.1, 8, 1), TraceRow(0, 0, 1, 5, "SEND_F", "pp", 1.0, 1.1, 8, 1),
        TraceRow(1, 1, 0, 5, "RECV_F", "pp", 0.2, 0.3, 8, 0), TraceRow(1, 1, 1, 5, "RECV_F", "pp", 1.2, 1.3, 8, 0),
        TraceRow(2, 2, 0, 6, "SEND_F", "pp", 0.0, 0.0, 8, 3),
    ]
    df = pd.DataFrame(rows, columns=list(TRACE_COLUMNS))
    events = json.loads(write_chrome_trace(df, tmp_path / "f.json").read_text())["traceEvents"]
    starts = sorted((e for e in events if e["ph"] == "s"), key=lambda e: e["ts"])
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == 2 and len(finishes) == 2
    assert [finishes[s["id"]]["ts"] for s in starts] == pytest.approx([0.25e6, 1.25e6])
    assert any(e["ph"] == "X" and e["name"] == "SEND_F6@3" and e["dur"] == 0 for e in events)


# ---- bubbles ----------------------------------------------------------------------------------

@pytest.mark.parametrize("pp,m", [(4, 8), (2, 3), (8, 8)])
def test_bubble_by_rank_matches_1f1b_closed_form(pp, m):
    bubbles = bubble_by_rank(unit_trace("1f1b", pp, m))
    assert list(bubbles.index) == list(range(pp))
    # Uniform 1F1B: every rank idles (p-1)(tF+tB) of a (m+p-1)(tF+tB) step.
    assert bubbles.to_numpy() == pytest.approx([(pp - 1) / (m + pp - 1)] * pp)


def test_bubble_by_rank_interleaved_closed_form():
    v, pp, m = 2, 4, 8
    bubbles = bubble_by_rank(unit_trace("interleaved-1f1b", pp, m, v))
    assert bubbles.to_numpy() == pytest.approx([(pp - 1) / (v * m + pp - 1)] * pp)


def test_bubble_counts_overlaps_once_and_uses_global_span():
    rows = [TraceRow(0, 0, 0, 0, "F", "compute", 0.0, 4.0, 0, -1),
            TraceRow(0, 0, 0, 1, "F", "compute", 1.0, 2.0, 0, -1),
            TraceRow(0, 0, 0, 2, "F", "compute", 3.0, 6.0, 0, -1),
            TraceRow(0, 0, 0, 3, "F", "compute", 8.0, 9.0, 0, -1),
            TraceRow(1, 1, 0, 0, "F", "compute", 2.0, 3.0, 0, -1),
            TraceRow(1, 1, 0, -1, "DP_REDUCE", "dp", 0.0, 10.0, 0, -1),
            TraceRow(2, 2, 0, 0, "RECV_F", "pp", 0.0, 1.0, 0, 1)]
    bubbles = bubble_by_rank(pd.DataFrame(rows, columns=list(TRACE_COLUMNS)))
    # span [0, 10]; rank 0 busy = [0, 6] + [8, 9] = 7; rank 1 busy 1; rank 2 has no compute.
    assert bubbles.to_dict() == pytest.approx({0: 0.3, 1: 0.9, 2: 1.0})


# ---- Gantt ---------------------------------------------------------------------------------

def test_timeline_to_trace_rows_and_stages():
    from sim3d.report.gantt import timeline_to_trace
    schedule = build("interleaved-1f1b", 4, 8, 2)
    df = timeline_to_trace(schedule, evaluate(schedule, uniform_costs()))
    assert tuple(df.columns) == TRACE_COLUMNS
    assert len(df) == sum(a.is_compute for actions in schedule.ranks for a in actions) == 4 * 8 * 2 * 2
    assert set(df["stream"]) == {"compute"} and (df["bytes"] == 0).all() and (df["peer"] == -1).all()
    row = df[(df["rank"] == 1) & (df["chunk"] == 1)].iloc[0]
    assert row["stage"] == schedule.stages.stage(1, 1) == 5


def test_gantt_writes_every_format(tmp_path):
    from sim3d.report.gantt import plot_gantt
    df = with_comm(unit_trace(tf=1e-3, tb=2e-3), pp=4)
    paths = [tmp_path / "g.png", tmp_path / "g.pdf", tmp_path / "nested" / "g.svg"]
    written = plot_gantt(df, paths, "1F1B pp=4 m=8", rank_labels={0: "pp0"})
    assert written == paths
    assert all(p.stat().st_size > 1000 for p in paths)
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert paths[1].read_bytes()[:5] == b"%PDF-"
    assert b"<svg" in paths[2].read_bytes()[:2000]


def test_gantt_microbatch_colours_split_backward_and_many_ranks(tmp_path):
    from sim3d.report.gantt import plot_gantt
    zb = unit_trace("zb-h1", 4, 8)
    plot_gantt(zb, [tmp_path / "zb.png"], "ZB-H1", color_by="microbatch")
    big = pd.concat([unit_trace("1f1b", 4, 4).assign(rank=lambda d, k=k: d["rank"] + 4 * k) for k in range(20)],
                    ignore_index=True)
    plot_gantt(big, [tmp_path / "big.svg"], "80 ranks", max_ranks=16)
    svg = (tmp_path / "big.svg").read_text()  # 20 replicas of a 4-stage pipeline: one row per stage
    assert "one rank per pipeline stage of 80" in svg and "rank 3" in svg and "rank 79" not in svg
    deep = unit_trace("1f1b", 40, 1)  # 40 stages: more than fit, first and last rows kept
    plot_gantt(deep, [tmp_path / "deep.svg"], "40 stages", max_ranks=16)
    svg = (tmp_path / "deep.svg").read_text()
    assert "showing 16 of 40 ranks" in svg and "rank 39" in svg and "rank 20" not in svg
    with pytest.raises(ValueError, match="color_by"):
        plot_gantt(zb, [tmp_path / "x.png"], "bad", color_by="stage")


def test_importing_sim3d_and_trace_does_not_pull_matplotlib_or_torch():
    code = ("import sys, sim3d, sim3d.report.trace, sim3d.schedule; "
            "bad = [m for m in ('matplotlib', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("scenario", sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml")))
def test_perfetto_slices_on_one_thread_never_overlap_and_flows_land_on_slices(tmp_path, scenario):
    """Perfetto drops slices that overlap on one thread without nesting: the pipeline stream's
    sends and receives used to overlap there (120 times for gpt3). Every shipped scenario."""
    import json
    import sim3d
    from sim3d.report.trace import write_chrome_trace
    result = sim3d.simulate(ROOT / "scenarios" / scenario)
    path = write_chrome_trace(result.trace, tmp_path / "trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    slices = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    named = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert set(slices) <= named
    for spans in slices.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert start >= end - 1e-6
    flows = [e for e in events if e["ph"] in ("s", "f")]
    assert len(flows) == 2 * (result.trace.kind.str.startswith("SEND")).sum()  # none without a pipeline
    for e in flows:  # every arrow end sits inside a slice of its own thread
        assert any(a - 1e-6 <= e["ts"] <= b + 1e-6 for a, b in slices[(e["pid"], e["tid"])])


def test_gantt_of_every_gpu_shows_one_rank_per_stage(tmp_path, monkeypatch):
    """At full fidelity the Gantt draws one row per pipeline stage (it drew the first and last
    32 GPUs: two stages); `ranks` picks rows explicitly."""
    import sim3d
    from sim3d.report import gantt
    result = sim3d.simulate(ROOT / "scenarios" / "mesh-32.yaml", full_fidelity=True)
    drawn = []
    real = gantt._pick_ranks
    monkeypatch.setattr(gantt, "_pick_ranks", lambda ranks, n: drawn.append(ranks) or real(ranks, n))
    gantt.plot_gantt(result.trace, [tmp_path / "g.png"], title="t", max_ranks=8)
    stages = result.trace[result.trace.stream == "compute"].groupby("rank")["stage"].min()
    assert len(drawn[0]) == result.scenario.pp == len({stages[r] for r in drawn[0]})
    gantt.plot_gantt(result.trace, [tmp_path / "h.png"], title="t", ranks=[0, result.sim.ranks[-1]])
    with pytest.raises(ValueError, match="not in the trace"):
        gantt.plot_gantt(result.trace, [tmp_path / "i.png"], title="t", ranks=[10**6])
    with pytest.raises(ValueError, match="picks no rank"):
        gantt.plot_gantt(result.trace, [tmp_path / "j.png"], title="t", ranks=[])
    # a TP peer folded into its twin is drawn as that twin when asked for by the CLI's outputs
    from sim3d.report.outputs import write_run_outputs
    twin = next(iter(result.sim.represented))
    written = write_run_outputs(result, tmp_path, plots=True, trace_format="none", gantt_ranks=[0, twin])
    assert tmp_path / "gantt.png" in written


def test_unit_cost_gantt_axis_says_units(tmp_path, monkeypatch):
    """`sim3d schedule --gantt` times are in units of one forward, not seconds."""
    import matplotlib.axes
    from typer.testing import CliRunner
    from sim3d.cli.app import app
    labels = []
    real = matplotlib.axes.Axes.set_xlabel
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xlabel", lambda self, text, *a, **k: labels.append(text)
                        or real(self, text, *a, **k))
    result = CliRunner().invoke(app, ["schedule", "1f1b", "--pp", "4", "-m", "8", "--gantt", str(tmp_path / "g.png")])
    assert result.exit_code == 0, result.output
    assert labels == ["time (units of one forward of a rank's layers)"]


def test_parquet_trace_round_trips_and_compares(tmp_path):
    """With pyarrow (in the dev extra) a run also writes trace.parquet, the same table with
    its dtypes, which `sim3d compare` reads like the CSV."""
    pytest.importorskip("pyarrow")
    from typer.testing import CliRunner
    from sim3d.cli.app import app
    from sim3d.trace import read_trace, read_trace_csv
    runner = CliRunner()
    result = runner.invoke(app, ["run", str(ROOT / "scenarios" / "tiny.yaml"), "--no-plots", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    parquet, csv = read_trace(tmp_path / "trace.parquet"), read_trace_csv(tmp_path / "trace.csv")
    pd.testing.assert_frame_equal(parquet, csv)
    result = runner.invoke(app, ["compare", str(tmp_path / "trace.parquet"), str(tmp_path / "trace.csv"), "--json"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("size", ["column", "screen"])
def test_gantt_text_stays_inside_the_figure(monkeypatch, size):
    """Margins are measured, not found by a layout engine: every text (title, legend, row
    names, bubble column) must still land inside the figure. A long title and a seven-entry
    legend overflowed an IEEE column before the title was wrapped and the legend's columns
    fitted to the width."""
    from sim3d.report import gantt
    kept = []
    monkeypatch.setattr(gantt, "save", lambda fig, paths, dpi: kept.append(fig) or [])
    trace = with_comm(unit_trace("interleaved-1f1b", 4, 8, vpp=2, tf=1e-3, tb=2e-3), pp=4)
    long_title = "gpt3-175b-512-interleaved: interleaved-1f1b, tp8 pp8 dp8, 128 micro-batches, step 34.56 s"
    gantt.plot_gantt(trace, ["unused.png"], long_title, rank_labels={r: f"pp{r} tp0 dp0" for r in range(4)}, size=size)
    fig = kept[0]
    fig.draw_without_rendering()  # legend entries are positioned at draw time
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    texts = [t for ax in fig.axes for t in (*ax.texts, ax.title)] + [t for leg in fig.legends for t in leg.get_texts()]
    assert len(texts) > 10
    for text in texts:
        box = text.get_window_extent(renderer)
        assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1 and page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, \
            (text.get_text(), box, page)
    ax = fig.axes[0]  # the boxes' area sits inside the page, with its labels outside it
    assert 0 < ax.get_position().x0 < ax.get_position().x1 < 1


def test_fit_text_breaks_at_spaces_within_the_width():
    from sim3d.report.figure import fit_text, new_figure, text_inches
    fig = new_figure(3.5, 2)
    text = "one two three four five six seven eight nine ten eleven twelve\nkept break"
    wrapped = fit_text(fig, text, 11, 1.5)
    assert wrapped.replace("\n", " ") == text.replace("\n", " ") and wrapped.endswith("\nkept break")
    assert all(text_inches(fig, line, 11)[0] <= 1.5 for line in wrapped.split("\n") if " " in line)
    assert len(wrapped.split("\n")) >= 4


def test_bulk_slices_equal_the_row_by_row_ones(monkeypatch):
    """trace.json's slices are formatted by Arrow where pyarrow is installed; they must parse
    to exactly the events the row-by-row formatter (and `action_token`) gives, over every
    token rule: buckets with and without a chunk, OPT_STEP's chunk -1, peers, no micro-batch."""
    import sim3d
    from sim3d.report import trace as report_trace
    from sim3d.trace import rows_to_frame
    pytest.importorskip("pyarrow")
    rows = sim3d.simulate(ROOT / "scenarios" / "mesh-32.yaml", full_fidelity=True).sim.rows + [
        TraceRow(0, 0, 1, 3, "DP_REDUCE", "dp", 0.5, 0.6, 1 << 40, -1),
        TraceRow(0, 0, 0, 2, "PARAM_GATHER", "dp", 0.5, 0.6, 9, -1),
        TraceRow(0, 0, 1, -1, "DP_REDUCE", "dp", 0.7, 0.8, 9, -1),
        TraceRow(0, 0, -1, -1, "OPT_STEP", "compute", 0.9, 1.0, 0, -1),
        TraceRow(1, 5, 1, 7, "SEND_B", "pp", 0.25, 0.26, 123, 0),
        TraceRow(1, 5, 1, 7, "B", "compute", 1e-7, 3e-7, 0, -1)]
    trace = rows_to_frame(rows)
    fast = report_trace.chrome_trace_events(trace)
    monkeypatch.setattr(report_trace, "slice_texts", lambda *args: None)
    slow = report_trace.chrome_trace_events(trace)
    assert len(fast) == len(slow) > len(rows)
    normal = lambda events: sorted(json.dumps({k: (float(v) if k in ("ts", "dur") else v) for k, v in e.items()},  # noqa: E731
                                              sort_keys=True) for e in events)
    assert normal(fast) == normal(slow)
    names = {e["name"] for e in fast if e["ph"] == "X"}
    assert {"DP_REDUCE#3.1", "PARAM_GATHER#2", "DP_REDUCE", "OPT_STEP", "SEND_B7.1@0", "B7.1"} <= names


def test_csv_labels_that_need_quotes_survive_and_plain_ones_are_unquoted(tmp_path, csv_writer):
    df = with_comm(unit_trace(tf=1e-3, tb=2e-3), pp=4)
    plain = write_trace_csv(df, tmp_path / "plain.csv").read_text()
    assert plain.startswith("rank,stage,chunk,") and '"' not in plain  # as pandas writes it, whichever writer
    df.loc[0, "kind"] = 'odd,"kind\nwith a break'
    back = read_trace_csv(write_trace_csv(df, tmp_path / "odd.csv"))
    assert back.loc[0, "kind"] == 'odd,"kind\nwith a break' and len(back) == len(df)


def test_bulk_slices_span_several_blocks(monkeypatch):
    """Arrow formats the slices in blocks (bounded memory); events must not depend on where
    the blocks are cut."""
    import sim3d
    from sim3d.report import trace as report_trace
    from sim3d.report import trace_slices
    pytest.importorskip("pyarrow")
    trace = sim3d.simulate(ROOT / "scenarios" / "mesh-32.yaml").trace
    whole = report_trace.chrome_trace_events(trace)
    monkeypatch.setattr(trace_slices, "_ROWS_PER_BLOCK", 7)
    assert report_trace.chrome_trace_events(trace) == whole and len(whole) > 7


def test_gantt_bubbles_from_rows_equal_the_closed_form():
    """The chart's bubble column comes from the numpy core (bubbles.py), fed engine rows."""
    from sim3d.report.bubbles import bubble_fractions
    from sim3d.trace import trace_columns
    pp, m = 4, 8
    rows = list(unit_trace("1f1b", pp, m).itertuples(index=False, name=None))
    fractions = bubble_fractions(trace_columns(rows))
    assert fractions == pytest.approx({r: (pp - 1) / (m + pp - 1) for r in range(pp)})


def test_link_plot_shows_each_kinds_busiest_and_totals(tmp_path, monkeypatch):
    """The left panel keeps the busiest rows of every kind (links arrive busiest first), the
    right panel's title sums each kind's bytes; columns as a dict, as the plotting process
    receives them."""
    from sim3d.report import links_plot
    drawn = {}
    monkeypatch.setattr(links_plot, "save", lambda fig, paths, dpi: drawn.setdefault("fig", fig) and paths)
    links = {"src": ["gpu0", "gpu1", "leaf0", "gpu2", "leaf1", "gpu3"], "dst": ["sw"] * 3 + ["sw", "spine", "sw"],
             "kind": ["nvlink", "nvlink", "uplink", "nvlink", "uplink", "nvlink"],
             "bytes": [4e12, 3e12, 2e12, 1e12, 1e12, 0.5e12], "busy_fraction": [0.4, 0.3, 0.2, 0.1, 0.05, 0.01]}
    links_plot.plot_links(links, tmp_path / "l.png", top=4)
    left, right = drawn["fig"].axes
    names = [text for text in left.texts if text.get_horizontalalignment() == "right"]  # beside the bars
    shown = [text.get_text() for text in sorted(names, key=lambda text: text.get_position()[1])]
    # two per kind, the least busy at the bottom
    assert shown == ["leaf1 → spine", "leaf0 → sw", "gpu1 → sw", "gpu0 → sw"]
    assert right.get_title() == "by kind of link; TB moved: 8.5, 3.0"


def test_the_plotting_process_imports_none_of_the_simulator():
    """`sim3d run` forks its plotting process before it imports the simulator, pandas among
    it: the plots and what they are handed must need none of it, or both processes import it
    (a fifth of a second on the run's critical path for pandas alone)."""
    code = ("import sys, importlib; from sim3d.report.plot_process import PLOT_MODULES\n"
            "[importlib.import_module(m) for m in PLOT_MODULES]\n"
            "print(sorted(m for m in ('pandas', 'networkx', 'simpy', 'pydantic', 'sim3d.model', 'sim3d.api')"
            " if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_memory_plot_of_plain_rows_is_the_reports(tmp_path):
    """The plotting process gets the memory report as plain rows (no memory model to
    import); the picture must be the same."""
    import pickle
    import sim3d
    from sim3d.report.memory_plot import plain_rows, plot_memory
    report = sim3d.simulate(ROOT / "scenarios" / "gpt3.yaml").memory
    rows, hbm_gib = pickle.loads(pickle.dumps(plain_rows(report)))
    a = plot_memory(report, tmp_path / "report.png", "t")
    b = plot_memory(rows, tmp_path / "plain.png", "t", hbm_gib=hbm_gib)
    assert a.read_bytes() == b.read_bytes()


def test_a_stragglers_rank_is_always_drawn(tmp_path, monkeypatch):
    """The default Gantt of a straggler run keeps the straggler's row (a TP peer, which one row
    per stage would leave out), with a gap row wherever ranks were left out around it."""
    import sim3d
    from sim3d.report import gantt
    result = sim3d.simulate(ROOT / "scenarios" / "mesh-32.yaml", sets=["straggler.rank=1", "straggler.slowdown=1.5"])
    assert result.full_fidelity and 1 in result.sim.ranks
    seen = []
    real = gantt._gaps_before
    monkeypatch.setattr(gantt, "_gaps_before", lambda shown, order: seen.append(shown) or real(shown, order))
    gantt.plot_gantt(result.trace, [tmp_path / "g.png"], title="t", max_ranks=8)
    gantt.plot_gantt(result.trace, [tmp_path / "h.png"], title="t", max_ranks=8, always=[1])
    without, with_straggler = seen
    assert 1 not in without and 1 in with_straggler
    assert set(with_straggler) - set(without) == {1}
    assert real([0, 5, 9], list(range(10))) == {5: 4, 9: 3}


def test_the_straggler_short_form_sets_the_scenarios_one_straggler():
    from sim3d.scenario import ScenarioError, scenario_from_dict
    raw = {"name": "s", "model": {"layers": 4, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 64},
           "parallel": {"tp": 2, "pp": 2, "dp": 2}, "training": {"micro_batch": 1, "global_batch": 8},
           "cluster": {"gpu": "a100-80gb", "nodes": 1, "gpus_per_node": 8}}
    s = scenario_from_dict(raw, ["straggler.slowdown=1.3"])
    assert [(f.straggler.rank, f.straggler.slowdown) for f in s.faults] == [(0, 1.3)]
    s = scenario_from_dict({**raw, "faults": [{"straggler": {"rank": 5, "slowdown": 2.0}}]}, ["straggler.slowdown=1.1"])
    assert [(f.straggler.rank, f.straggler.slowdown) for f in s.faults] == [(5, 1.1)]
    two = {**raw, "faults": [{"straggler": {"rank": 1, "slowdown": 2.0}}, {"straggler": {"rank": 2, "slowdown": 2.0}}]}
    with pytest.raises(ScenarioError, match="2 stragglers"):
        scenario_from_dict(two, ["straggler.rank=3"])
    with pytest.raises(ScenarioError, match="a rank and a slowdown"):
        scenario_from_dict(raw, ["straggler.speed=3"])

"""What the trace viewers are handed: Perfetto's link counters and the Gantt's chosen ranks."""

from __future__ import annotations

import json
from pathlib import Path

from sim3d.report.gantt import timeline_to_trace
from sim3d.report.trace import write_chrome_trace
from sim3d.schedule import build
from sim3d.schedule.evaluate import evaluate, uniform_costs
from sim3d.trace import TRACE_COLUMNS

ROOT = Path(__file__).resolve().parents[1]


def unit_trace(pp: int, m: int, tf: float, tb: float):
    schedule = build("1f1b", pp, m, 1)
    return timeline_to_trace(schedule, evaluate(schedule, uniform_costs(tf, tb)))


def test_the_link_counters_live_in_a_process_of_their_own(tmp_path):
    """Perfetto's JSON importer folds a negative pid into pid 0: the link counters would land on
    rank 0's process. Their process has a pid no rank has, and sorts above the ranks."""
    df = unit_trace(pp=2, m=2, tf=1e-3, tb=2e-3)
    path = write_chrome_trace(df, tmp_path / "t.json", link_timelines={"gpu0>switch": [(0.0, 0.5), (1.0, 0.0)]})
    events = json.loads(path.read_text())["traceEvents"]
    rank_pids = {e["pid"] for e in events if e.get("ph") == "X"}
    counters = {e["pid"] for e in events if e.get("ph") == "C"}
    assert len(counters) == 1 and min(counters) >= 0 and counters.isdisjoint(rank_pids)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names[next(iter(counters))] == "links (busy %)"
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    assert sort[next(iter(counters))] < min(sort[p] for p in rank_pids)


def test_gantt_ranks_draws_exactly_the_ranks_asked_for_even_when_folded(tmp_path):
    """At full fidelity TP peers fold into TP rank 0 (`represented`); `--gantt-ranks 1,8,65`
    drew ranks 0 and 64 under their own names. A folded rank ran exactly as its twin, so it is
    drawn under its own name with its twin's rows."""
    import sim3d
    from sim3d.report.outputs import write_run_outputs

    class Capture:
        def __init__(self):
            self.calls = []

        def submit(self, work, *args):
            self.calls.append((work.__name__, args))

        def wait(self, *args, **kwargs):
            return []

        def close(self):
            pass

    result = sim3d.simulate(ROOT / "scenarios" / "mesh-32.yaml", full_fidelity=True)
    asked = [1, 3, 9]
    assert set(asked) & set(result.sim.represented)  # some of them were folded, not replayed
    capture = Capture()
    try:
        write_run_outputs(result, tmp_path, plots=True, trace_format="none", gantt_ranks=asked, plotter=capture)
    except Exception:  # the capture draws nothing; only what was handed to the Gantt matters here
        pass
    (_, (paths, columns, labels, title, options)), = [c for c in capture.calls if c[0] == "draw_gantt"]
    assert options["ranks"] == asked and all(r in labels for r in asked)
    rows = list(zip(*(columns[name].tolist() for name in TRACE_COLUMNS)))
    drawn = {r: [row[1:] for row in rows if row[0] == r] for r in asked}
    for r in asked:
        twin = result.sim.represented.get(r, r)
        assert drawn[r] and drawn[r] == [row[1:] for row in result.sim.rows if row[0] == twin]

"""`sim3d schedule --compare`: several schedules in one time unit (one forward of a rank's
layers = 1), one shared time axis, their bubbles as bars (issue 34 item 4)."""

import json

import pytest
from typer.testing import CliRunner

from sim3d.cli.app import app
from sim3d.report.schedule_compare import compare_figure, compare_schedules

NAMES = ("1f1b", "interleaved-1f1b", "zb-h1", "zbv")
LAYOUTS = [("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1), ("zbv", 2)]
cli = CliRunner()


def closed_forms(p: int, m: int, v: int = 2) -> dict[str, tuple[float, float]]:
    """(step, bubble) per schedule, uniform stages, F=1, B=2 (BI=BW=1) per rank's share of the
    layers (shared/reference/schedules.md section 7; a chunk's pass costs 1/v of it)."""
    return {"1f1b": (3 * (m + p - 1), (p - 1) / (m + p - 1)),
            "interleaved-1f1b": (3 * m + 3 * (p - 1) / v, (p - 1) / (v * m + p - 1)),
            "zb-h1": (3 * m + (p - 1), (p - 1) / (3 * m + p - 1)),  # m(tF+tI+tW) + (p-1)(tF+tI-tW)
            "zbv": ((6 * m + p - 1) / 2, (p - 1) / (6 * m + p - 1))}


@pytest.mark.parametrize("p, m", [(2, 4), (3, 6), (4, 8), (8, 16)])
def test_one_unit_gives_the_closed_forms(p, m):
    expected = closed_forms(p, m)
    for c in compare_schedules(LAYOUTS, p, m):
        step, bubble = expected[c.name]
        assert c.timeline.step_time == pytest.approx(step), c.name
        assert c.timeline.bubble_fraction == pytest.approx(bubble), c.name
    # in one unit interleaving is faster than 1F1B, which each schedule's own axis hid
    steps = {c.name: c.timeline.step_time for c in compare_schedules(LAYOUTS, p, m)}
    assert steps["interleaved-1f1b"] < steps["1f1b"]


def test_figure_has_one_gantt_per_schedule_on_one_axis_and_bubble_bars():
    p, m = 4, 8
    compared = compare_schedules(LAYOUTS, p, m)
    fig = compare_figure(compared)
    gantts = [ax for ax in fig.axes if ax.get_label().startswith("gantt ")]
    assert [ax.get_label() for ax in gantts] == [f"gantt {n}" for n in NAMES]
    assert len({ax.get_xlim() for ax in gantts}) == 1  # one time axis for all
    assert gantts[0].get_xlim()[1] >= max(c.timeline.step_time for c in compared)
    (bars,) = [ax for ax in fig.axes if ax.get_label() == "bubble"]
    heights = [patch.get_height() for patch in bars.patches]
    assert heights == pytest.approx([100 * closed_forms(p, m)[n][1] for n in NAMES])
    assert [t.get_text() for t in bars.get_xticklabels()] == list(NAMES)
    (memory,) = [ax for ax in fig.axes if ax.get_label() == "peak in-flight"]
    # per rank, in micro-batches of a rank's layers: 1F1B holds p - r; interleaving (schedules.md:
    # 2(p-1-r)+(v-1)p+1 chunk-activations of 1/v each) holds more; ZB-H1 holds p on every rank
    peaks = {line.get_label(): list(line.get_ydata()) for line in memory.get_lines()}
    assert peaks["1f1b"] == [4, 3, 2, 1] and peaks["zb-h1"] == [4, 4, 4, 4]
    assert peaks["interleaved-1f1b"] == [(2 * (p - 1 - r) + p + 1) / 2 for r in range(p)]


def test_cli_compare_prints_the_table_and_writes_the_figure(tmp_path):
    result = cli.invoke(app, ["schedule", "--compare", ",".join(NAMES), "--pp", "4", "-m", "8",
                              "--out", str(tmp_path / "compare.svg")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "compare.svg").read_text().lstrip().startswith("<?xml")
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in result.stdout.splitlines() if line.startswith("│")}
    assert rows["1f1b"] == ["1", "33", "27.3%", "4"]
    assert rows["interleaved-1f1b"] == ["2", "28.5", "15.8%", "5.5"]
    assert rows["zbv"] == ["2", "25.5", "5.9%", "4"]
    as_json = cli.invoke(app, ["schedule", "--compare", "1f1b,zb-h1", "--pp", "4", "-m", "8", "--json"])
    parsed = json.loads(as_json.stdout)
    assert [s["schedule"] for s in parsed["schedules"]] == ["1f1b", "zb-h1"] and parsed["figure"] is None
    assert parsed["schedules"][1]["bubble_fraction"] == pytest.approx(3 / 27)
    assert parsed["schedules"][1]["peak_inflight"] == [4, 4, 4, 4]


@pytest.mark.parametrize("args, message", [
    (["--compare", "1f1b,interleaved-1f1b", "-m", "6"],
     "--compare interleaved-1f1b (pp=4, m=6, vpp=2): training.global_batch: interleaved-1f1b needs "
     "num_microbatches % pp == 0"),
    (["--compare", "1f1b,zbv", "--vpp", "2", "-m", "8"], "--compare 1f1b (pp=4, m=8, vpp=2): parallel.vpp: schedule "
     "1f1b runs one chunk per rank"),
    (["--compare", "zbv,dualpipev", "-m", "4"], "dualpipev needs at least 2*pp=8 micro-batches"),
    (["--compare", "1f1b,zbx", "-m", "8"], "did you mean zbv"),
    (["--compare", "1f1b,1f1b", "-m", "8"], "named twice"),
    (["1f1b", "--compare", "zbv", "-m", "8"], "drop NAME"),
    (["1f1b", "-m", "8"], "--out is the --compare figure"),
])
def test_a_schedule_that_cannot_take_the_layout_is_refused_before_drawing(tmp_path, args, message):
    figure = tmp_path / "compare.png"
    result = cli.invoke(app, ["schedule", "--pp", "4", *args, "--out", str(figure)], catch_exceptions=False)
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not figure.exists()

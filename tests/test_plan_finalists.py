"""The planner's finalists: simulated whatever worker they land on, and the same from one
run to the next."""

from pathlib import Path

import pandas as pd

from sim3d.scenario.load import load_scenario
from sim3d.studies import plan as planner, tier_one
from sim3d.studies.space import Layout, Space, parse_choices

ROOT = Path(__file__).resolve().parents[1]
LLAMA_8B = ROOT / "scenarios" / "llama3.1-8b.yaml"


def _layout(**changes) -> Layout:
    base = dict(tp=1, pp=1, dp=8, cp=1, ep=1, vpp=1, micro_batch=1, schedule="1f1b", recompute="none",
                sequence_parallel=False, zero=2, tp_comm_overlap=False, order="tp-cp-ep-dp-pp")
    layout = {**base, **changes}
    return Layout(**layout, dp_shard=layout["dp"] * layout["cp"])  # sharded over every data-parallel rank


def test_a_finalist_simulates_in_a_worker_that_priced_the_space_with_headroom():
    """Tier one prices the space with the card shrunk by the headroom; tier two reads each
    finalist from the scenario file, whose card is whole. A worker that did both built its
    graph from the first and must still simulate the second (it raised 'a different cluster'
    and dropped the finalist, which was the second best of this search)."""
    base = load_scenario(LLAMA_8B, planner.headroom_sets(LLAMA_8B, 0.05))
    space = Space(base, 8, parse_choices([], []))
    key = tier_one.space_key(space)
    tier_one.WORKER.clear()
    tier_one.price_batch((key, space.base, space.gpus, space.choices, [_layout()]))
    finalist = _layout(dp=4, cp=2, micro_batch=2)
    summary = planner._tier_two((key, space.base, space.gpus, space.choices, str(LLAMA_8B),
                                 space.overrides(finalist), finalist))
    assert summary["error"] == "" and summary["step_time_s"] > 0


def test_equal_estimates_rank_in_layout_order_not_in_the_order_workers_finish():
    space = Space(load_scenario(LLAMA_8B), 8, parse_choices([], []))
    layouts = [_layout(order="tp-cp-ep-pp-dp"), _layout(), _layout(zero=1)]
    rows = tier_one.price_batch((tier_one.space_key(space), space.base, space.gpus, space.choices, layouts))
    forward = tier_one.price(space, [], priced=rows)
    backward = tier_one.price(space, [], priced=rows[::-1])
    pd.testing.assert_frame_equal(forward, backward)

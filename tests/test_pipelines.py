"""Placement.pipelines: every rank in exactly one pipeline, each a pp group in stage order."""

import pytest

from sim3d.cluster.placement import Placement


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "dp-tp-cp-ep-pp", "pp-dp-cp-ep-tp"])
def test_pipelines_partition_the_ranks_into_pp_groups(order):
    placement = Placement(tp=2, pp=4, dp=2, cp=2, ep=1, order=order)
    pipes = placement.pipelines()
    assert len(pipes) == 2 * 2 * 2
    assert sorted(r for pipe in pipes for r in pipe) == list(range(placement.world_size))
    for coords, pipe in zip(placement.pipeline_coords(), pipes):
        assert [placement.coords(r)["pp"] for r in pipe] == [0, 1, 2, 3]
        assert all({k: placement.coords(r)[k] for k in ("tp", "dp", "cp")} == coords for r in pipe)
        assert sorted(placement.group("pp", pipe[0])) == sorted(pipe)

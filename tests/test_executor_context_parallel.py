"""Context parallelism in the executor: load-balanced sequence chunks and causal ring attention
over the cp ranks, gradients averaged over dp x cp; `--check` passes at cp 2 and fails when the
ring does not turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d.executor import execute
from sim3d.executor.reference import CHECK_RTOL

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "scenarios" / "tiny.yaml")
LLAMA = ["model.activation=swiglu", "model.kv_heads=2", "training.attention_backend=flash"]


def layout(tp=1, cp=1, dp=1, *extra):
    return [f"parallel.tp={tp}", f"parallel.cp={cp}", f"parallel.dp={dp}", f"cluster.gpus_per_node={tp * cp * dp}",
            *extra]


CASES = {
    "cp2-gpt-learned-positions": layout(1, 2, 1),
    "cp2-dp2-distributed-optimizer": layout(1, 2, 2, "parallel.distributed_optimizer=true"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cp2_matches_the_reference_to_float64_precision(name):
    r = execute(TINY, steps=2, check=True, overrides=CASES[name])
    assert r.passed and r.check["max_rel"] <= CHECK_RTOL, r.summary()
    assert r.numerics["attention"] == "ring over 2 cp ranks"


def test_cp2_tp2_sequence_parallel_llama_in_bf16_passes_the_check():
    r = execute(TINY, steps=2, check=True, overrides=layout(2, 2, 1, "parallel.sequence_parallel=true",
                                                            "training.precision=bf16", *LLAMA))
    assert r.passed, r.summary()
    assert r.numerics["dtype"] == "bfloat16"


def test_a_ring_that_does_not_turn_fails_the_check():
    r = execute(TINY, steps=2, check=True, overrides=layout(1, 2, 1), sabotage="cp_ring")
    assert not r.passed and r.check["max_rel"] > 1e-4


def test_chunks_are_load_balanced_for_the_causal_mask():
    """Megatron's split: rank r keeps chunks r and 2cp-1-r of 2cp, so every rank's queries see
    the same number of keys."""
    import torch
    from sim3d.executor.context_parallel import CPContext
    cp = [CPContext(size=4, rank=r) for r in range(4)]
    assert cp[0].positions(16).tolist() == [0, 1, 14, 15] and cp[1].positions(16).tolist() == [2, 3, 12, 13]
    assert sorted(torch.cat([c.positions(16) for c in cp]).tolist()) == list(range(16))
    assert len({int((c.positions(16) + 1).sum()) for c in cp}) == 1  # keys visible to each rank's queries


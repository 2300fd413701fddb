"""The bytes the 2021-22 Megatron stack's unfused attention moves over its s x s scores,
counted by hand from the kernels it launched: Megatron's causal softmax
(megatron/fused_kernels/scaled_upper_triang_masked_softmax.h: row i reads i + 1 scores and
writes the whole row, forward and backward) and torch's fused dropout (a 1-byte mask)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d.costs.compute import memory_bytes
from sim3d.model.ops import layer_ops
from sim3d.scenario import load_scenario

GPT3 = Path(__file__).resolve().parents[1] / "scenarios" / "gpt3.yaml"


def _core(*sets: str) -> tuple:
    s = load_scenario(GPT3, list(sets))
    return {op.name: op for op in layer_ops(s)}, s


def test_causal_softmax_reads_the_lower_triangle_and_writes_whole_rows():
    ops, s = _core()
    seq, heads = s.model.seq_len, s.model.heads // s.parallel.tp
    elements = heads * s.training.micro_batch * seq * seq  # 12 heads x 2048 x 2048 per rank
    triangle = seq * (seq + 1) / 2 * heads * s.training.micro_batch  # scores on and below the diagonal
    forward, backward = memory_bytes(ops["attn_softmax"])
    assert forward == pytest.approx(2 * triangle + 2 * elements)      # read the triangle, write all
    assert backward == pytest.approx(2 * 2 * triangle + 2 * elements)  # read y and dy there, write dx
    assert forward / elements == pytest.approx(3.0, rel=1e-3) and backward / elements == pytest.approx(4.0, rel=1e-3)


def test_dropout_moves_its_mask_both_ways():
    ops, s = _core()
    elements = s.model.heads // s.parallel.tp * s.training.micro_batch * s.model.seq_len ** 2
    assert memory_bytes(ops["attn_dropout"]) == pytest.approx((5 * elements, 5 * elements))  # 2 + 2 + 1 byte


def test_past_the_kernels_sequence_limit_the_softmax_reads_every_score():
    ops, s = _core("model.seq_len=8192")
    elements = s.model.heads // s.parallel.tp * s.training.micro_batch * 8192 ** 2
    assert memory_bytes(ops["attn_softmax"]) == pytest.approx((4 * elements, 6 * elements))


def test_pytorch_stacks_do_not_run_megatrons_causal_kernel():
    ops, s = _core("training.kernels.stack=eager")
    elements = s.model.heads // s.parallel.tp * s.training.micro_batch * s.model.seq_len ** 2
    assert memory_bytes(ops["attn_softmax"]) == pytest.approx((4 * elements, 6 * elements))

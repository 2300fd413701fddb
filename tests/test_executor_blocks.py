"""The executor's block is the one sim3d prices (GPT: biases, LayerNorm, learned positions;
LLaMA: SwiGLU, RMSNorm, rotary, no biases; GQA) and its attention runs the kernel the scenario
names (SDPA for flash / fused, materialised scores for unfused), with the same math as the
single-process reference."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sim3d.executor import execute
from sim3d.executor.gpt import GPTChunk, GPTConfig, token_batch
from sim3d.executor.reference import CHECK_RTOL
from sim3d.executor.tensor_parallel import TPContext
from sim3d.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "scenarios" / "tiny.yaml")
LLAMA = ["model.activation=swiglu", "model.kv_heads=2", "training.attention_backend=flash"]


def test_llama_block_with_sdpa_matches_the_reference_to_float64_precision():
    """fp32 scenarios check in float64 at 1e-9: the SwiGLU / GQA / RMSNorm / rotary block and
    SDPA sharded over tp 2 are the reference's math, not merely close to it."""
    r = execute(TINY, steps=2, check=True, overrides=["parallel.tp=2", "cluster.gpus_per_node=2", *LLAMA])
    assert r.passed and r.check["max_rel"] <= CHECK_RTOL, r.summary()
    assert r.numerics["precision"] == "float64" and r.numerics["attention"] == "sdpa"


def _model(overrides, dtype=torch.float64):
    cfg = GPTConfig.of(load_scenario(TINY, overrides=overrides))
    return cfg, GPTChunk(cfg, (cfg.layers,), 0, TPContext(), seed=0, dtype=dtype)


@pytest.mark.parametrize("block", [[], ["model.activation=swiglu", "model.kv_heads=2"],
                                   ["model.activation=squared-relu"]])
def test_sdpa_and_unfused_attention_compute_the_same_loss(block):
    losses = []
    for backend in ("unfused", "flash"):
        cfg, model = _model([*block, f"training.attention_backend={backend}"])
        tokens = token_batch(0, 0, 2, cfg)
        losses.append(float(model(tokens[:, :-1], tokens[:, 1:]).detach()))
    assert losses[0] == pytest.approx(losses[1], rel=1e-12)


def test_the_block_is_the_one_sim3d_prices():
    """GPT: biases, LayerNorm, learned positions; LLaMA (swiglu): RMSNorm, rotary, no biases
    (sim3d.model.params counts the same; GPT's LM head, tied there, is the executor's own)."""
    from sim3d.model.params import model_params
    for block in ([], ["model.activation=swiglu", "model.kv_heads=2"]):
        s = load_scenario(TINY, overrides=block)
        cfg, model = _model(block)
        names = {p.global_name for p in model.parameters()}
        assert ("embed.pos" in names) == ("layers.0.attn.q.bias" in names) == ("layers.0.ln1.bias" in names) == \
            (not block)
        untied_head = 0 if block else cfg.vocab * cfg.hidden
        assert sum(p.numel() for p in model.parameters()) == model_params(s) + untied_head
        assert type(model.blocks[0].ln1).__name__ == ("RMSNorm" if block else "LayerNorm")


def test_rotary_scores_depend_on_the_distance_only():
    from sim3d.executor.attention import rotary
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8, generator=gen, dtype=torch.float64), torch.randn(1, 1, 1, 8, generator=gen,
                                                                                    dtype=torch.float64)

    def score(i, j):
        return float((rotary(q, torch.tensor([i])) * rotary(k, torch.tensor([j]))).sum())
    assert score(5, 2) == pytest.approx(score(13, 10), rel=1e-12)
    assert score(5, 2) != pytest.approx(score(5, 3), rel=1e-3)



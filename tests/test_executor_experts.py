"""Experts in the executor: routing, all-to-all dispatch over ep ranks, experts split over TP
(etp = tp) or whole (etp 1); `--check` against the float64 reference, and the MoE layer
against a token-by-token loop written here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sim3d.executor import ExecutorRefusal, execute
from sim3d.executor.reference import CHECK_RTOL

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "scenarios" / "tiny.yaml")
MOE = 'model.moe={"experts": 4, "top_k": 2}'


def layout(tp=1, pp=1, dp=1, *extra):
    return [f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", f"cluster.gpus_per_node={tp * pp * dp}",
            MOE, "parallel.ep=2", *extra]


CASES = {
    "ep2": layout(1, 1, 2),
    "ep2-tp2-experts-split-over-tp": layout(2, 1, 2, "parallel.sequence_parallel=true"),
    "ep2-tp2-etp1": layout(2, 1, 2, "parallel.sequence_parallel=true", "parallel.etp=1"),
    "ep2-pp2-every-other-layer": layout(1, 2, 2, "model.moe.every=2"),
    "ep2-top1": layout(1, 1, 2, 'model.moe={"experts": 4, "top_k": 1}'),
    # split experts whose TP peers exchange rows, with ranks that receive none
    "ep4-tp2-cp2-top1": layout(2, 1, 2, 'model.moe={"experts": 4, "top_k": 1}', "parallel.ep=4", "parallel.cp=2",
                                "parallel.sequence_parallel=true", "cluster.gpus_per_node=8"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_experts_match_the_reference_to_float64_precision(name):
    r = execute(TINY, steps=2, check=True, overrides=CASES[name])
    assert r.passed and r.check["max_rel"] <= CHECK_RTOL, r.summary()
    assert r.numerics["routing"] == "topk"


def test_experts_in_bf16_with_tp2_pp2_pass_the_check_with_balanced_routing():
    r = execute(TINY, steps=2, check=True, routing="balanced",
                overrides=layout(2, 2, 2, "parallel.sequence_parallel=true", "training.precision=bf16",
                                 "model.activation=swiglu"))
    assert r.passed, r.summary()
    assert (r.numerics["dtype"], r.numerics["routing"]) == ("bfloat16", "balanced")


def test_expert_gradients_that_are_not_reduced_fail_the_check():
    r = execute(TINY, steps=2, check=True, overrides=CASES["ep2-tp2-etp1"], sabotage="dp_reduce")
    assert not r.passed and r.check["max_rel"] > 1e-3


@pytest.mark.parametrize("extra,routing,message", [
    (['model.moe.capacity_factor=1.0'], "topk", "dropless"),
    (['model.moe.shared_expert_ffn=16'], "topk", "routed experts only"),
    (["parallel.tp=2", "cluster.gpus_per_node=4"], "topk", "sequence_parallel true"),
    (["parallel.distributed_optimizer=true"], "topk", "dense parameters only"),
    (["training.precision=bf16"], "topk", "use --routing balanced"),
    ([], "random", "expected topk or balanced"),
    (["model.moe=null", "parallel.ep=1"], "balanced", "the model has no experts"),
])
def test_expert_layouts_the_executor_does_not_implement_are_refused(extra, routing, message):
    with pytest.raises(ExecutorRefusal, match=message):
        execute(TINY, steps=1, check=True, routing=routing, overrides=layout(1, 1, 2) + extra)


def _layer(routing: str, activation: str = "gelu"):
    from sim3d.executor.experts import EPContext, MoE
    from sim3d.executor.gpt import GPTConfig, _Builder
    from sim3d.executor.tensor_parallel import TPContext
    cfg = GPTConfig(layers=1, hidden=8, heads=2, kv_heads=2, ffn=16, vocab=32, seq_len=6, activation=activation,
                    experts=4, top_k=2, expert_ffn=12, routing=routing)
    return MoE(_Builder(7, TPContext(), torch.float64, "cpu"), "moe", cfg, EPContext()), cfg


@pytest.mark.parametrize("routing,activation", [("topk", "gelu"), ("balanced", "swiglu")])
def test_the_moe_layer_is_a_weighted_sum_of_each_tokens_chosen_experts(routing, activation):
    """Sorting by expert, dispatching and putting back, against one token at a time: each
    token's output is the softmax-weighted sum of its k chosen experts' outputs."""
    layer, cfg = _layer(routing, activation)
    x = torch.randn(cfg.seq_len, 3, cfg.hidden, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = layer(x)
    tokens = x.reshape(-1, cfg.hidden)
    want = torch.zeros_like(tokens)
    for t, token in enumerate(tokens):
        scores = layer.router @ token
        position = t // x.shape[1]
        chosen = (scores.topk(cfg.top_k).indices.tolist() if routing == "topk"
                  else [(position * cfg.top_k + j) % cfg.experts for j in range(cfg.top_k)])
        weights = torch.softmax(scores[chosen], dim=0)
        for w, e in zip(weights, chosen):
            want[t] += w * layer.experts[e](token.unsqueeze(0))[0]
    assert torch.allclose(got.reshape(-1, cfg.hidden), want, rtol=1e-12, atol=1e-14)


def test_balanced_routing_gives_every_expert_the_same_load():
    layer, cfg = _layer("balanced")
    x = torch.randn(cfg.seq_len, 2, cfg.hidden, dtype=torch.float64)
    chosen = layer._route(torch.zeros(cfg.seq_len * 2, cfg.experts, dtype=torch.float64), x.shape)
    assert torch.bincount(chosen.reshape(-1), minlength=cfg.experts).tolist() == [6, 6, 6, 6]
    assert all(len(set(row)) == cfg.top_k for row in chosen.tolist())  # k different experts per token


def test_the_router_learns_at_top_1():
    """A softmax over the one chosen score is 1: the router would get no gradient. At top-1 the
    weight is the chosen expert's probability among all experts, so it does."""
    from sim3d.executor.experts import EPContext, MoE
    from sim3d.executor.gpt import GPTConfig, _Builder
    from sim3d.executor.tensor_parallel import TPContext
    for k in (1, 2):
        cfg = GPTConfig(layers=1, hidden=8, heads=2, kv_heads=2, ffn=16, vocab=32, seq_len=6, experts=4, top_k=k,
                        expert_ffn=12)
        layer = MoE(_Builder(7, TPContext(), torch.float64, "cpu"), "moe", cfg, EPContext())
        layer(torch.randn(cfg.seq_len, 2, cfg.hidden, dtype=torch.float64)).square().sum().backward()
        assert layer.router.grad.abs().max() > 1e-6, k


def test_balanced_routing_with_a_capacity_factor_of_one_or_more_runs_dropless():
    r = execute(TINY, steps=1, check=True, routing="balanced",
                overrides=layout(1, 1, 2, 'model.moe={"experts": 4, "top_k": 2, "capacity_factor": 1.25}'))
    assert r.passed, r.summary()

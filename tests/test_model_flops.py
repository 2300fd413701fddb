"""FLOP counts of sim3d.model against closed forms from the papers (independent checks:
the library only sums its op lists)."""

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim3d.model import (embedding_ops, hardware_flops_per_step, head_forward_flops, head_ops,
                         layer_forward_flops, layer_ops, model_flops_per_step, stage_flops)
from sim3d.scenario.load import load_scenario, scenario_from_dict


def make(layers=4, hidden=256, heads=8, seq=128, vocab=1024, mb=1, gb=4, tp=1, pp=1, cp=1, ep=1,
         kv_heads=None, ffn=None, activation="gelu", sp=False, recompute="none", precision="bf16",
         moe=None, schedule="1f1b", vpp=1, dp=1, gpu="a100-80gb", backend="unfused", dropout=0.1):
    """The papers' closed forms describe Megatron's unfused attention: that is the default here."""
    n = tp * pp * cp * dp
    return scenario_from_dict(dict(
        name="t", model=dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn_hidden=ffn,
                             vocab=vocab, seq_len=seq, activation=activation, moe=moe,
                             hidden_dropout=dropout, attention_dropout=dropout),
        parallel=dict(tp=tp, pp=pp, cp=cp, ep=ep, dp=dp, vpp=vpp, sequence_parallel=sp),
        training=dict(micro_batch=mb, global_batch=gb, recompute=recompute, precision=precision,
                      attention_backend=backend),
        schedule=schedule, cluster=dict(gpu=gpu, nodes=1, gpus_per_node=n)))


sizes = st.fixed_dictionaries(dict(
    layers=st.integers(1, 96), heads=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 96]),
    head_dim=st.sampled_from([32, 64, 128]), seq=st.sampled_from([64, 512, 2048, 4096, 8192]),
    mb=st.integers(1, 8), vocab=st.sampled_from([1024, 32000, 50304, 51200, 128000])))


@given(sizes)
@settings(max_examples=60, deadline=None)
def test_gpt_layer_forward_flops_closed_form(z):
    h, b, s = z["heads"] * z["head_dim"], z["mb"], z["seq"]
    sc = make(layers=z["layers"], hidden=h, heads=z["heads"], seq=s, vocab=z["vocab"], mb=b, gb=b)
    assert layer_forward_flops(sc) == 24 * b * s * h**2 + 4 * b * s**2 * h
    assert head_forward_flops(sc) == 2 * b * s * h * z["vocab"]


@given(sizes, st.sampled_from([1, 2, 4, 8]), st.integers(64, 8192))
@settings(max_examples=60, deadline=None)
def test_gqa_and_swiglu_closed_forms(z, groups, ffn):
    heads = z["heads"]
    kv = max(1, heads // groups)
    h, hd, b, s = heads * z["head_dim"], z["head_dim"], z["mb"], z["seq"]
    sc = make(hidden=h, heads=heads, kv_heads=kv, ffn=ffn, seq=s, mb=b, gb=b, activation="swiglu")
    ops = {op.name: op for op in layer_ops(sc)}
    assert ops["qkv"].fwd_flops == 2 * b * s * h * (h + 2 * kv * hd)
    mlp = sum(ops[n].fwd_flops for n in ("mlp_up", "mlp_act", "mlp_down"))
    assert mlp == 6 * b * s * h * ffn
    attention = 2 * b * s * h * (h + 2 * kv * hd) + 4 * b * s**2 * h + 2 * b * s * h**2
    assert layer_forward_flops(sc) == attention + 6 * b * s * h * ffn
    # the same model with gelu: two GEMMs h -> ffn -> h
    gelu = make(hidden=h, heads=heads, kv_heads=kv, ffn=ffn, seq=s, mb=b, gb=b, activation="gelu")
    assert layer_forward_flops(gelu) == attention + 4 * b * s * h * ffn


def narayanan_model(B, s, l, h, V):
    return 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))


def narayanan_hw_full(B, s, l, h, V):
    return 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))


def test_gpt3_175b_step_flops_match_narayanan_eq3():
    sc = load_scenario("scenarios/gpt3.yaml")
    B, s, l, h, V = 1536, 2048, 96, 12288, 51200
    assert model_flops_per_step(sc) == pytest.approx(narayanan_model(B, s, l, h, V), rel=1e-12)
    assert sc.training.recompute == "full"
    assert hardware_flops_per_step(sc) == pytest.approx(narayanan_hw_full(B, s, l, h, V), rel=1e-12)
    # sanity: 6 * 175e9 params * 1536*2048 tokens = 3.3e18, plus attention
    assert 3.3e18 < model_flops_per_step(sc) < 3.6e18


@given(sizes, st.integers(1, 16), st.sampled_from(["none", "selective", "full"]))
@settings(max_examples=60, deadline=None)
def test_step_flops_random_sizes(z, batches, recompute):
    h, b, s, l, V = z["heads"] * z["head_dim"], z["mb"], z["seq"], z["layers"], z["vocab"]
    B = b * batches
    sc = make(layers=l, hidden=h, heads=z["heads"], seq=s, vocab=V, mb=b, gb=B, recompute=recompute)
    assert model_flops_per_step(sc) == pytest.approx(narayanan_model(B, s, l, h, V), rel=1e-12)
    hw = hardware_flops_per_step(sc)
    if recompute == "full":
        assert hw == pytest.approx(narayanan_hw_full(B, s, l, h, V), rel=1e-12)
    elif recompute == "selective":  # one extra forward of QK^T and AV per layer
        assert hw == pytest.approx(narayanan_model(B, s, l, h, V) + 4 * B * s**2 * h * l, rel=1e-12)
    else:
        assert hw == pytest.approx(model_flops_per_step(sc), rel=1e-12)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("cp", [1, 2])
@pytest.mark.parametrize("kv", [16, 8])
def test_per_rank_flops_times_shards_equal_unsharded(tp, sp, cp, kv):
    kw = dict(layers=4, hidden=1024, heads=16, kv_heads=kv, seq=256, vocab=8192, mb=2, gb=2)
    ref = make(**kw)
    sharded = make(**kw, tp=tp, cp=cp, sp=sp)
    for a, b in zip(layer_ops(ref), layer_ops(sharded)):
        assert a.name == b.name
        assert b.flops * tp * cp == pytest.approx(a.flops, rel=1e-12), a.name
    for ref_ops, ops in ((head_ops(ref), head_ops(sharded)), (embedding_ops(ref), embedding_ops(sharded))):
        assert sum(o.flops for o in ops) * tp * cp == pytest.approx(sum(o.flops for o in ref_ops), rel=1e-12)
    assert stage_flops(sharded, 0) * tp * cp == pytest.approx(stage_flops(ref, 0), rel=1e-12)


def test_backward_is_twice_forward_and_split_by_weights():
    ops = {o.name: o for o in layer_ops(make())}
    for o in ops.values():
        assert o.bwd_input_flops + o.bwd_weight_flops == 2 * o.fwd_flops
    assert ops["qkv"].bwd_weight_flops == ops["qkv"].fwd_flops  # GEMM with a weight
    assert ops["attn_qk"].bwd_weight_flops == 0 and ops["attn_av"].bwd_weight_flops == 0  # no weights
    assert ops["attn_qk"].recompute_selective and not ops["qkv"].recompute_selective


def _comms(sc):
    return {o.name: (o.comm, o.bwd_comm, o.comm_bytes, o.group) for o in layer_ops(sc) if o.comm or o.bwd_comm}


def test_tp_collectives_without_and_with_sequence_parallel():
    b, s, h = 2, 256, 1024
    full = b * s * h * 2
    assert _comms(make(hidden=h, heads=16, seq=s, mb=b, gb=b)) == {}  # tp=1: none
    no_sp = _comms(make(hidden=h, heads=16, seq=s, mb=b, gb=b, tp=4))
    assert no_sp == {"input_norm": (None, "all-reduce", full, "tp"), "out_proj": ("all-reduce", None, full, "tp"),
                     "post_norm": (None, "all-reduce", full, "tp"), "mlp_down": ("all-reduce", None, full, "tp")}
    sp = _comms(make(hidden=h, heads=16, seq=s, mb=b, gb=b, tp=4, sp=True))
    assert sp == {"input_norm": ("all-gather", "reduce-scatter", full, "tp"),
                  "out_proj": ("reduce-scatter", "all-gather", full, "tp"),
                  "post_norm": ("all-gather", "reduce-scatter", full, "tp"),
                  "mlp_down": ("reduce-scatter", "all-gather", full, "tp")}


def test_context_parallel_ring_bytes():
    b, s, h, heads, kv, tp, cp = 1, 4096, 2048, 16, 4, 2, 4
    sc = make(hidden=h, heads=heads, kv_heads=kv, seq=s, mb=b, gb=b, tp=tp, cp=cp)
    qkv = next(o for o in layer_ops(sc) if o.name == "qkv")
    kv_chunk = 2 * b * (s // cp) * kv * (h // heads) // tp * 2  # K and V of the local chunk, bf16
    assert (qkv.comm, qkv.group, qkv.comm_bytes) == ("ring", "cp", kv_chunk * (cp - 1))
    assert qkv.bwd_comm_bytes == 2 * qkv.comm_bytes


def test_moe_layer_flops_and_all_to_all():
    b, s, h, ffn, E, k = 2, 512, 1024, 4096, 8, 2
    moe = dict(experts=E, top_k=k, expert_ffn_hidden=ffn)
    ref = make(hidden=h, heads=16, seq=s, mb=b, gb=b, moe=moe, layers=2)
    ops = {o.name: o for o in layer_ops(ref, moe_layer=True)}
    assert ops["router"].fwd_flops == 2 * b * s * h * E
    experts = sum(ops[n].fwd_flops for n in ("expert_up", "expert_act", "expert_down"))
    assert experts == k * 4 * b * s * h * ffn  # top_k gelu MLPs per token
    assert layer_forward_flops(ref, moe_layer=True) == 8 * b * s * h**2 + 4 * b * s**2 * h + 2 * b * s * h * E + experts
    # ep=4 (EP folds into DP): every rank still processes b*s*k token copies, and sends them
    ep = make(hidden=h, heads=16, seq=s, mb=b, gb=4 * b, moe=moe, layers=2, ep=4, dp=4)
    eops = {o.name: o for o in layer_ops(ep, moe_layer=True)}
    assert eops["expert_up"].fwd_flops == ops["expert_up"].fwd_flops
    assert (eops["moe_dispatch"].comm, eops["moe_dispatch"].group) == ("all-to-all", "ep")
    assert eops["moe_dispatch"].comm_bytes == b * s * k * h * 2
    # each rank holds E / ep experts: their GEMMs split its token copies and read every
    # local expert's weight once (ref: all 8 experts on one rank)
    assert (ops["expert_up"].gemm_groups, eops["expert_up"].gemm_groups) == (E, E // 4)
    tokens, ab = b * s * k, 2
    assert ops["expert_down"].fwd_bytes == ab * (tokens * ffn + E * ffn * h) + ab * tokens * h
    assert eops["expert_down"].fwd_bytes == ab * (tokens * ffn + E // 4 * ffn * h) + ab * tokens * h
    # capacity factor 1.25 bounds the busiest rank's work at 1.25x; model FLOPs stay useful work
    cf = make(hidden=h, heads=16, seq=s, mb=b, gb=4 * b, moe=dict(moe, capacity_factor=1.25), layers=2, ep=4, dp=4)
    cops = {o.name: o for o in layer_ops(cf, moe_layer=True)}
    assert cops["expert_up"].fwd_flops == pytest.approx(1.25 * eops["expert_up"].fwd_flops)
    assert model_flops_per_step(cf) == pytest.approx(model_flops_per_step(ep))
    # TP with SP: experts split over tp, tokens gathered within TP; the layer's norm and
    # residual keep the same bytes as in a dense layer
    tp = make(hidden=h, heads=16, seq=s, mb=b, gb=b, moe=moe, layers=2, tp=2, sp=True)
    dense_ops = {o.name: o for o in layer_ops(tp)}
    tops = {o.name: o for o in layer_ops(tp, moe_layer=True)}
    for name in ("post_norm", "mlp_residual"):
        assert tops[name].act_bytes == dense_ops[name].act_bytes
    assert tops["expert_up"].flops * 2 == ops["expert_up"].flops
    assert (tops["moe_tp_gather"].comm, tops["moe_tp_gather"].group) == ("all-gather", "tp")
    # moe.every=2: layers 0 and 2 are MoE, 1 and 3 dense
    every = make(hidden=h, heads=16, seq=s, mb=b, gb=b, moe=dict(moe, every=2), layers=4)
    dense = layer_forward_flops(every)
    want = 3 * (2 * dense + 2 * layer_forward_flops(every, moe_layer=True) + head_forward_flops(every))
    assert model_flops_per_step(every) == pytest.approx(want, rel=1e-12)  # one micro-batch per step


def test_shared_expert_flops_params_and_tp_collectives():
    """A DeepSeek-style shared expert (SwiGLU, ffn 128 wide, h 256) on every token of a micro-
    batch of 2 x 64: gate and up [128 x 256] @ [256 x 256], down [128 x 128] @ [128 x 256],
    hand-counted; 3 x 256 x 128 weights; with tp 2 and SP its input is all-gathered and its
    output reduce-scattered over TP (the full 128 x 256 bf16 activation)."""
    from sim3d.model.params import layer_params
    from sim3d.model.ops import Dims
    moe = dict(experts=4, top_k=2, expert_ffn_hidden=64)
    plain = make(hidden=256, heads=4, seq=64, mb=2, gb=2, moe=moe, layers=2, activation="swiglu")
    shared = make(hidden=256, heads=4, seq=64, mb=2, gb=2, moe=dict(moe, shared_expert_ffn=128), layers=2,
                  activation="swiglu")
    tokens = 2 * 64
    gemms = 2 * tokens * 256 * 256 + 2 * tokens * 128 * 256  # 3 x (2 x tokens x 256 x 128)
    assert layer_forward_flops(shared, moe_layer=True) - layer_forward_flops(plain, moe_layer=True) == gemms
    extra = layer_params(Dims.of(shared), True).dense - layer_params(Dims.of(plain), True).dense
    assert extra == 3 * 256 * 128
    assert layer_params(Dims.of(shared), True).expert == layer_params(Dims.of(plain), True).expert
    tp = make(hidden=256, heads=4, seq=64, mb=2, gb=2, moe=dict(moe, shared_expert_ffn=128), layers=2,
              activation="swiglu", tp=2, sp=True)
    ops = {o.name: o for o in layer_ops(tp, moe_layer=True)}
    assert (ops["shared_expert_gather"].comm, ops["shared_expert_gather"].comm_bytes) == ("all-gather", tokens * 256 * 2)
    assert (ops["shared_down"].comm, ops["shared_down"].comm_bytes) == ("reduce-scatter", tokens * 256 * 2)
    assert ops["shared_up"].fwd_flops == 2 * tokens * 256 * 128  # gate and up, each 64 of 128 columns per rank


def test_second_token_permutation_with_several_local_experts():
    """8 experts over ep 4: each rank holds 2, so the 2 x 64 x 2 = 256 token copies it receives
    (top-2 of a 2 x 64 micro-batch, balanced) are sorted by expert after the all-to-all and back
    before it: each pass reads and writes 256 x 256 bf16 values, 262,144 bytes, forward and
    backward. With ep 8 every rank holds one expert and nothing is sorted."""
    moe = dict(experts=8, top_k=2, expert_ffn_hidden=64)
    four = make(hidden=256, heads=4, seq=64, mb=2, gb=8, moe=moe, layers=2, ep=4, dp=4)
    ops = {o.name: o for o in layer_ops(four, moe_layer=True)}
    for name in ("moe_sort_by_expert", "moe_unsort_by_expert"):
        assert ops[name].fwd_bytes == 262_144
        assert ops[name].kernel_bytes == ((262_144,), (262_144,))
    eight = make(hidden=256, heads=4, seq=64, mb=2, gb=16, moe=moe, layers=2, ep=8, dp=8)
    assert not {"moe_sort_by_expert", "moe_unsort_by_expert"} & {o.name for o in layer_ops(eight, moe_layer=True)}


def test_fp8_halves_gemm_operands_and_the_linear_inputs_kept():
    """Transformer Engine keeps an FP8 copy of each linear's input for the backward: the QKV
    and FC1 inputs (s*b*h each) and the FC2 input (s*b*ffn) shrink by a byte per element; the
    projection's input is kept twice (bf16 by the attention, FP8 by the projection)."""
    bf16 = {o.name: o for o in layer_ops(make(precision="bf16"))}
    fp8 = {o.name: o for o in layer_ops(make(precision="fp8", gpu="h100-sxm"))}
    assert fp8["qkv"].fwd_bytes < bf16["qkv"].fwd_bytes
    assert fp8["qkv"].fwd_flops == bf16["qkv"].fwd_flops
    sbh, sbf = 128 * 1 * 256, 128 * 1 * 4 * 256  # make()'s seq, micro-batch, hidden, 4h MLP
    change = {"qkv": -sbh, "mlp_up": -sbh, "mlp_down": -sbf, "out_proj": +sbh}
    assert {n: fp8[n].act_bytes - bf16[n].act_bytes for n in bf16} == {n: change.get(n, 0) for n in bf16}
    fp32 = {o.name: o for o in layer_ops(make(precision="fp32"))}
    assert fp32["qkv"].act_bytes == 2 * bf16["qkv"].act_bytes


def test_import_sim3d_model_does_not_import_torch():
    code = "import sys, sim3d, sim3d.model; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)

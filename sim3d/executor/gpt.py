"""A small GPT written for sim3d's executor, tensor parallel the Megatron way, split into
pipeline chunks by global stage.

* Weights are created FULL on every rank from a per-tensor generator seeded by (seed, global
  parameter name) and then sliced, so a single-process model (tp=1, one chunk) and any
  sharded layout start from identical numbers. Every parameter carries `global_name`,
  `tp_dim` (the dimension it is split along, None when replicated) and
  `sequence_parallel` (replicated over TP but fed by sequence shards: its gradient is a
  partial sum that must be all-reduced over TP before the optimizer step).
* Column-parallel linears (q, k, v, fc1 / gate, up, LM head) are split on output rows,
  row-parallel linears (attention output, fc2) on input columns with the bias added once,
  after the reduction (Shoeybi et al. 2019). Heads are split across TP; grouped-query
  attention splits the kv heads too.
* The embedding is vocab-parallel (rows split over TP; tokens outside the slice give zero,
  the partial sums are all-reduced) plus a learned, replicated position embedding. The LM
  head is untied and vocab-parallel, and the loss is a vocab-parallel cross-entropy: the
  logits are never gathered.
* Layout [sequence, batch, hidden]; with sequence parallelism the residual stream, the
  layernorms and the pipeline messages hold [seq/tp, batch, hidden]. With context
  parallelism a rank holds its 1/cp of the sequence (context_parallel.py: two load-balanced
  chunks), attention runs as a ring over the cp ranks and positions are global.
* The block is the one sim3d prices (sim3d.model.ops.Dims): `activation: gelu` is GPT-2/3
  (biases, LayerNorm, learned positions), `swiglu` is LLaMA (gated MLP, RMSNorm, rotary
  positions, no biases), `squared-relu` is Nemotron-4 (relu(x)^2, LayerNorm, rotary, no
  biases). Attention runs the kernel `training.attention_backend` names (attention.py).
  `model.moe` replaces the MLP of every `every`-th layer with experts (experts.py).
* Weights are created in the run's compute dtype (bf16 / fp16 under mixed precision); the
  cross-entropy is computed in fp32 at least, as Megatron-Core's vocab-parallel loss casts
  its logits to float.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import attention_kernel, compute_dtype, core_attention, rotary, sdpa_backends
from .context_parallel import CPContext, ring_attention
from .experts import EPContext, MoE
from .tensor_parallel import (TPContext, enter_tp_region, exit_tp_region, reduce_from_tp,
                              reduce_scatter_seq, vocab_parallel_cross_entropy)

INIT_STD = 0.02


@dataclass(frozen=True)
class GPTConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    activation: str = "gelu"
    kv_channels: int | None = None  # head dim when it is not hidden / heads
    attention: str = "unfused"  # the kernel: "sdpa" | "unfused" (attention.py)
    sdpa_kernel: str = "default"  # the one SDPA runs on a GPU: training.kernels.attention
    # mixture of experts (experts.py): 0 experts is a dense model
    experts: int = 0
    top_k: int = 1
    expert_ffn: int = 0
    moe_every: int = 1
    expert_tp: int = 1
    routing: str = "topk"  # "topk" | "balanced"

    @classmethod
    def of(cls, scenario, routing: str = "topk") -> "GPTConfig":
        m, moe = scenario.model, scenario.model.moe
        experts = {} if moe is None else dict(
            experts=moe.experts, top_k=moe.top_k, expert_ffn=moe.expert_ffn_hidden or m.ffn, moe_every=moe.every,
            expert_tp=scenario.parallel.etp or scenario.tp, routing=routing)
        return cls(m.layers, m.hidden, m.heads, m.num_kv_heads, m.ffn, m.vocab, m.seq_len, m.activation,
                   m.kv_channels, attention_kernel(scenario.training.attention_backend),
                   scenario.training.kernels.attention, **experts)

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.heads

    @property
    def gpt_style(self) -> bool:
        """Biases, LayerNorm and learned positions (sim3d.model.ops.Dims.gpt_style)."""
        return self.activation == "gelu"

    @property
    def norm(self) -> str:
        return "rmsnorm" if self.activation == "swiglu" else "layernorm"


def full_tensor(seed: int, name: str, shape: tuple[int, ...], kind: str) -> torch.Tensor:
    """The full (unsharded) initial value of a parameter, in float64, from its own generator."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"{seed}/{name}".encode()))
    noise = torch.randn(shape, generator=gen, dtype=torch.float64) * INIT_STD
    return noise + 1.0 if kind == "norm_weight" else noise


def shard(full: torch.Tensor, tp_dim: int | None, tp: TPContext) -> torch.Tensor:
    """This rank's slice of a full tensor (the rule the check uses on the reference, too)."""
    if tp_dim is None or tp.size == 1:
        return full
    return full.chunk(tp.size, dim=tp_dim)[tp.rank]


class _Builder:
    def __init__(self, seed: int, tp: TPContext, dtype: torch.dtype, device, cp: CPContext | None = None,
                 ep: EPContext | None = None):
        self.seed, self.tp, self.dtype, self.device = seed, tp, dtype, device
        self.cp, self.ep = cp or CPContext(), ep or EPContext()

    def param(self, name: str, shape: tuple[int, ...], tp_dim: int | None = None, kind: str = "weight") -> nn.Parameter:
        value = shard(full_tensor(self.seed, name, shape, kind), tp_dim, self.tp)
        p = nn.Parameter(value.to(device=self.device, dtype=self.dtype).contiguous())
        p.global_name, p.tp_dim = name, tp_dim
        p.sequence_parallel = tp_dim is None and self.tp.sp
        return p


NORM_EPS = 1e-5  # Megatron's --norm-epsilon default


class LayerNorm(nn.Module):
    def __init__(self, b: _Builder, name: str, hidden: int):
        super().__init__()
        self.weight = b.param(f"{name}.weight", (hidden,), kind="norm_weight")
        self.bias = b.param(f"{name}.bias", (hidden,))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, eps=NORM_EPS)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (Zhang and Sennrich 2019, arXiv:1910.07467, eq. 4)."""

    def __init__(self, b: _Builder, name: str, hidden: int):
        super().__init__()
        self.weight = b.param(f"{name}.weight", (hidden,), kind="norm_weight")

    def forward(self, x):
        if hasattr(F, "rms_norm"):  # torch >= 2.4
            return F.rms_norm(x, x.shape[-1:], self.weight, eps=NORM_EPS)
        wide = x.to(compute_dtype(x.dtype))
        return (wide * torch.rsqrt(wide.square().mean(-1, keepdim=True) + NORM_EPS)).to(x.dtype) * self.weight


def make_norm(b: _Builder, name: str, cfg: GPTConfig) -> nn.Module:
    return (RMSNorm if cfg.norm == "rmsnorm" else LayerNorm)(b, name, cfg.hidden)


class ColumnLinear(nn.Module):
    """y = x A^T + b with A's rows (outputs) split over TP; x is already in the TP region."""

    def __init__(self, b: _Builder, name: str, inp: int, out: int, bias: bool = True):
        super().__init__()
        self.weight = b.param(f"{name}.weight", (out, inp), tp_dim=0)
        self.bias = b.param(f"{name}.bias", (out,), tp_dim=0) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowLinear(nn.Module):
    """y = reduce(x A_r^T) + b with A's columns (inputs) split over TP; bias after the reduction."""

    def __init__(self, b: _Builder, name: str, inp: int, out: int, bias: bool = True):
        super().__init__()
        self.tp = b.tp
        self.weight = b.param(f"{name}.weight", (out, inp), tp_dim=1)
        self.bias = b.param(f"{name}.bias", (out,)) if bias else None

    def forward(self, x):
        y = exit_tp_region(F.linear(x, self.weight), self.tp)
        return y + self.bias if self.bias is not None else y


class Attention(nn.Module):
    """Heads split over TP (grouped-query attention splits the kv heads too); rotary
    positions on q and k unless the model learns its positions."""

    def __init__(self, b: _Builder, name: str, cfg: GPTConfig):
        super().__init__()
        self.tp, self.cp, self.seq_len, hd, bias = b.tp, b.cp, cfg.seq_len, cfg.head_dim, cfg.gpt_style
        self.heads, self.kv_heads, self.head_dim = cfg.heads // b.tp.size, cfg.kv_heads // b.tp.size, hd
        self.kernel, self.rotary = cfg.attention, not cfg.gpt_style
        self.backends = (sdpa_backends(cfg.sdpa_kernel, torch.device(b.device).type, b.dtype)
                         if cfg.attention == "sdpa" and b.cp.size == 1 else None)
        self.q = ColumnLinear(b, f"{name}.q", cfg.hidden, cfg.heads * hd, bias)
        self.k = ColumnLinear(b, f"{name}.k", cfg.hidden, cfg.kv_heads * hd, bias)
        self.v = ColumnLinear(b, f"{name}.v", cfg.hidden, cfg.kv_heads * hd, bias)
        self.o = RowLinear(b, f"{name}.o", cfg.heads * hd, cfg.hidden, bias)

    def forward(self, x):
        x = enter_tp_region(x, self.tp)
        s, batch = x.shape[:2]
        q = self.q(x).view(s, batch, self.heads, self.head_dim)
        k = self.k(x).view(s, batch, self.kv_heads, self.head_dim)
        v = self.v(x).view(s, batch, self.kv_heads, self.head_dim)
        if self.rotary:  # at the global positions of this rank's tokens (context parallelism)
            positions = self.cp.positions(self.seq_len, device=x.device)
            q, k = rotary(q, positions), rotary(k, positions)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [s, b, n, hd] -> [b, n, s, hd]
        if self.cp.size > 1:
            ctx = ring_attention(q, k, v, self.cp)
        else:
            ctx = core_attention(q, k, v, self.kernel, self.backends)
        return self.o(ctx.permute(2, 0, 1, 3).reshape(s, batch, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, b: _Builder, name: str, cfg: GPTConfig):
        super().__init__()
        self.tp, self.activation, bias = b.tp, cfg.activation, cfg.gpt_style
        if self.activation == "swiglu":  # Shazeer 2020, arXiv:2002.05202, eq. 5 (FFN_SwiGLU)
            self.gate = ColumnLinear(b, f"{name}.gate", cfg.hidden, cfg.ffn, bias)
            self.up = ColumnLinear(b, f"{name}.up", cfg.hidden, cfg.ffn, bias)
        else:
            self.fc1 = ColumnLinear(b, f"{name}.fc1", cfg.hidden, cfg.ffn, bias)
        self.fc2 = RowLinear(b, f"{name}.fc2", cfg.ffn, cfg.hidden, bias)

    def forward(self, x):
        x = enter_tp_region(x, self.tp)
        if self.activation == "swiglu":
            h = F.silu(self.gate(x)) * self.up(x)
        elif self.activation == "squared-relu":  # Nemotron-4 (arXiv:2402.16819, section 2)
            h = F.relu(self.fc1(x)).square()
        else:
            h = F.gelu(self.fc1(x))
        return self.fc2(h)


class Block(nn.Module):
    def __init__(self, b: _Builder, index: int, cfg: GPTConfig):
        super().__init__()
        name = f"layers.{index}"
        self.ln1 = make_norm(b, f"{name}.ln1", cfg)
        self.attn = Attention(b, f"{name}.attn", cfg)
        self.ln2 = make_norm(b, f"{name}.ln2", cfg)
        moe = cfg.experts and index % cfg.moe_every == 0  # Megatron's moe_layer_freq (sim3d.model.ops.is_moe_layer)
        self.mlp = MoE(b, f"{name}.moe", cfg, b.ep) if moe else MLP(b, f"{name}.mlp", cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embedding(nn.Module):
    """Vocab-parallel word embedding (+ replicated learned positions, GPT style) -> [s(/tp), b, h]."""

    def __init__(self, b: _Builder, cfg: GPTConfig):
        super().__init__()
        self.tp, self.cp, self.seq_len = b.tp, b.cp, cfg.seq_len
        self.word = b.param("embed.word", (cfg.vocab, cfg.hidden), tp_dim=0)
        self.pos = b.param("embed.pos", (cfg.seq_len, cfg.hidden)) if cfg.gpt_style else None

    def forward(self, ids):  # ids [b, s/cp]: this cp rank's tokens
        ids = ids.t()
        rows = self.word.shape[0]
        start = self.tp.rank * rows
        outside = (ids < start) | (ids >= start + rows)
        local = F.embedding((ids - start).masked_fill(outside, 0), self.word)
        local = local.masked_fill(outside.unsqueeze(-1), 0.0)
        x = reduce_scatter_seq(local, self.tp) if self.tp.sp else reduce_from_tp(local, self.tp)
        if self.pos is None:
            return x
        pos = self.pos if self.cp.size == 1 else self.pos[self.cp.positions(self.seq_len, device=ids.device)]
        pos = pos.chunk(self.tp.size, dim=0)[self.tp.rank] if self.tp.sp else pos
        return x + pos.unsqueeze(1)


class Head(nn.Module):
    """Final norm, vocab-parallel LM head (untied) and vocab-parallel cross-entropy."""

    def __init__(self, b: _Builder, cfg: GPTConfig):
        super().__init__()
        self.tp = b.tp
        self.norm = make_norm(b, "final_norm", cfg)
        self.weight = b.param("head.weight", (cfg.vocab, cfg.hidden), tp_dim=0)

    def forward(self, x, targets):  # targets [b, s]; returns the mean loss over tokens
        logits = F.linear(enter_tp_region(self.norm(x), self.tp), self.weight)
        logits = logits.to(compute_dtype(logits.dtype))
        return vocab_parallel_cross_entropy(logits, targets.t(), self.tp).mean()


class GPTChunk(nn.Module):
    """The layers of one global pipeline stage; the first stage owns the embedding, the last
    the final norm, head and loss. forward(x, targets) returns the activation, or the mean
    loss on the last stage."""

    def __init__(self, cfg: GPTConfig, stage_layers: tuple[int, ...], stage: int, tp: TPContext,
                 seed: int, dtype=torch.float32, device="cpu", cp: CPContext | None = None,
                 ep: EPContext | None = None):
        super().__init__()
        if sum(stage_layers) != cfg.layers:
            raise ValueError(f"stage_layers {stage_layers} do not add up to {cfg.layers} layers")
        b = _Builder(seed, tp, dtype, device, cp, ep)
        self.stage, self.first, self.last = stage, stage == 0, stage == len(stage_layers) - 1
        start = sum(stage_layers[:stage])
        self.embed = Embedding(b, cfg) if self.first else None
        self.blocks = nn.ModuleList(Block(b, i, cfg) for i in range(start, start + stage_layers[stage]))
        self.head = Head(b, cfg) if self.last else None

    def forward(self, x, targets=None):
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x, targets) if self.head is not None else x


@torch.no_grad()
def sgd_step(params, lr: float) -> None:
    """Plain SGD, p <- p - lr * grad, shared by the executor and the reference (torch.optim is
    avoided on purpose: its first use imports torch._dynamo, seconds per process)."""
    for p in params:
        if p.grad is not None:
            p.add_(p.grad, alpha=-lr)


def activation_shape(cfg: GPTConfig, micro_batch: int, tp: TPContext, cp_size: int = 1) -> tuple[int, int, int]:
    """Shape of the tensor a stage sends to the next one (and of the gradient coming back)."""
    seq = cfg.seq_len // cp_size
    seq = seq // tp.size if tp.sp else seq
    return (seq, micro_batch, cfg.hidden)


def token_batch(seed: int, step: int, rows: int, cfg: GPTConfig) -> torch.Tensor:
    """Deterministic synthetic tokens [rows, seq_len + 1] for one optimizer step: each row is
    an arithmetic progression modulo vocab (random start and stride 1..3) with 10% of the
    tokens replaced by noise, so the loss can fall. Inputs are [:, :-1], targets [:, 1:]."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"data/{seed}/{step}".encode()))
    start = torch.randint(cfg.vocab, (rows, 1), generator=gen)
    stride = torch.randint(1, 4, (rows, 1), generator=gen)
    tokens = (start + stride * torch.arange(cfg.seq_len + 1)) % cfg.vocab
    noise = torch.rand(rows, cfg.seq_len + 1, generator=gen) < 0.1
    return torch.where(noise, torch.randint(cfg.vocab, tokens.shape, generator=gen), tokens)

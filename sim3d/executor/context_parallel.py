"""Context parallelism: the sequence split over cp ranks, and causal ring attention.

* Load-balanced chunking (Megatron-LM's `get_batch_on_this_cp_rank`, Transformer Engine's
  context parallelism): the sequence is cut into 2*cp chunks and cp rank r keeps chunks r and
  2*cp-1-r, so under the causal mask every rank has the same work. A rank's tokens, its
  learned or rotary positions and its loss all follow `CPContext.positions()`.
* Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers",
  arXiv:2310.01889; Megatron / TE's cp_comm_type "p2p"): the local K/V block travels around
  the cp ranks, one send / receive per step (posted before the step's block is computed, so
  the transfer overlaps it); each step attends the local queries to the visiting block with
  the causal mask of the global positions, and the partial results merge by their
  log-sum-exp (the online softmax of FlashAttention, Dao et al. 2022, section 3.1).
* Backward (FlashAttention-2's, Dao 2023, arXiv:2307.08691, algorithm 2, per block): with
  P = exp(S - lse) and D = rowsum(dO * O), dV = P^T dO, dS = P * (dO V^T - D),
  dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d). The K/V blocks go around the ring again, each
  with the accumulator of its own gradient, which after the last step takes one more hop home.
  That is 2x the forward's bytes, as sim3d.model.ops prices the ring (`_cp_ring`).

Blocks are computed in fp32 at least (the merge needs the log-sum-exp, which the public SDPA
call does not return), so the attention kernel of a cp > 1 run is "ring". Masked scores are
the dtype's lowest finite value, not -inf: a block that a query row cannot see at all then
gives a finite log-sum-exp whose weight in the merge is exactly zero (every row sees its own
position in the local block, merged first), where -inf would give NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .attention import compute_dtype


@dataclass
class CPContext:
    """This rank's context-parallel group. `ranks`: the group's global ranks in cp order
    (the ring: cp rank r sends to r+1). size 1 means no context parallelism."""

    size: int = 1
    rank: int = 0
    group: Any = None
    ranks: tuple = ()
    sabotage: str | None = None  # test hook: "cp_ring" attends to the local block only, so --check must fail

    def positions(self, seq_len: int, rank: int | None = None, device=None) -> torch.Tensor:
        """Global positions of cp rank `rank`'s tokens (this rank's by default), in local order."""
        if self.size == 1:
            return torch.arange(seq_len, device=device)
        r = self.rank if rank is None else rank
        chunk = seq_len // (2 * self.size)
        first = torch.arange(r * chunk, (r + 1) * chunk, device=device)
        return torch.cat([first, torch.arange((2 * self.size - 1 - r) * chunk, (2 * self.size - r) * chunk,
                                              device=device)])

    def local(self, tokens: torch.Tensor) -> torch.Tensor:
        """This rank's columns of a [batch, seq] tensor."""
        if self.size == 1:
            return tokens
        return tokens[:, self.positions(tokens.shape[1], device=tokens.device)]


def _pass_on(tensor: torch.Tensor, cp: CPContext):
    """Send `tensor` to the next cp rank and post the receive of the previous rank's; returns
    a function that waits for both and gives the received tensor."""
    buf = torch.empty_like(tensor)
    nxt, prev = cp.ranks[(cp.rank + 1) % cp.size], cp.ranks[(cp.rank - 1) % cp.size]
    tensor = tensor.contiguous()
    works = [dist.isend(tensor, dst=nxt, group=cp.group), dist.irecv(buf, src=prev, group=cp.group)]

    def wait() -> torch.Tensor:
        for work in works:
            work.wait()
        return buf
    return wait


def _scores(q, k, qpos, kpos):
    """Causally masked q k^T / sqrt(d) in q's (wide) type; k expanded to q's heads."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return s.masked_fill(kpos[None, :] > qpos[:, None], torch.finfo(s.dtype).min)


def _expand(t: torch.Tensor, groups: int, wide) -> torch.Tensor:
    t = t.to(wide)
    return t.repeat_interleave(groups, dim=1) if groups > 1 else t


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cp: CPContext):
        wide, seq_len = compute_dtype(q.dtype), q.shape[-2] * cp.size
        groups = q.shape[1] // k.shape[1]
        qw, qpos = q.to(wide), cp.positions(seq_len, device=q.device)
        kv, out, lse = torch.stack([k, v]), None, None
        for step in range(1 if cp.sabotage == "cp_ring" else cp.size):
            arriving = _pass_on(kv, cp) if step + 1 < cp.size and cp.sabotage != "cp_ring" else None
            kpos = cp.positions(seq_len, (cp.rank - step) % cp.size, device=q.device)
            s = _scores(qw, _expand(kv[0], groups, wide), qpos, kpos)
            block_lse = s.logsumexp(dim=-1)
            block_out = (s - block_lse.unsqueeze(-1)).exp() @ _expand(kv[1], groups, wide)
            if out is None:
                out, lse = block_out, block_lse
            else:
                merged = torch.logaddexp(lse, block_lse)
                out = out * (lse - merged).exp().unsqueeze(-1) + block_out * (block_lse - merged).exp().unsqueeze(-1)
                lse = merged
            if arriving is not None:
                kv = arriving()
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.cp = cp
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        cp = ctx.cp
        wide, seq_len, groups = out.dtype, q.shape[-2] * cp.size, q.shape[1] // k.shape[1]
        qw, dout = q.to(wide), dout.to(wide)
        qpos = cp.positions(seq_len, device=q.device)
        delta = (dout * out).sum(dim=-1, keepdim=True)  # D = rowsum(dO * O)
        dq = torch.zeros_like(qw)
        kv = torch.stack([k, v])
        dkv = torch.zeros(kv.shape, dtype=wide, device=kv.device)
        for step in range(cp.size):
            arriving = _pass_on(kv, cp) if step + 1 < cp.size else None
            kpos = cp.positions(seq_len, (cp.rank - step) % cp.size, device=q.device)
            kw, vw = _expand(kv[0], groups, wide), _expand(kv[1], groups, wide)
            p = (_scores(qw, kw, qpos, kpos) - lse.unsqueeze(-1)).exp()
            ds = p * (dout @ vw.transpose(-1, -2) - delta)
            dq += ds @ kw / math.sqrt(q.shape[-1])
            dk, dv = ds.transpose(-1, -2) @ qw / math.sqrt(q.shape[-1]), p.transpose(-1, -2) @ dout
            if groups > 1:  # each kv head's gradient is the sum over the query heads sharing it
                dk = dk.unflatten(1, (k.shape[1], groups)).sum(2)
                dv = dv.unflatten(1, (k.shape[1], groups)).sum(2)
            dkv = dkv + torch.stack([dk, dv])
            dkv = _pass_on(dkv, cp)()  # the accumulator follows its block; after the last step, home
            if arriving is not None:
                kv = arriving()
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cp: CPContext) -> torch.Tensor:
    """Causal attention of the local queries q [b, n, s/cp, d] over the whole sequence, whose
    keys and values k, v [b, n_kv, s/cp, d] are spread over the cp ranks."""
    return _RingAttention.apply(q, k, v, cp)

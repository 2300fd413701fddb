"""Mixture-of-experts layers for the executor's GPT, expert parallel as Megatron-Core lays
them out (sim3d.cluster.placement's expert grid: etp x ep x edp over a stage's ranks).

* A router (a replicated linear, hidden -> experts) scores every token; each token goes to
  `top_k` experts: the k highest scores (`routing="topk"`), or, with `routing="balanced"`,
  experts (position x k + j) mod E for j < k by the token's position in the sequence, so every
  expert gets the same load whatever the weights (benchmarks force balanced routing for the
  same reason: Megatron-LM's --moe-router-force-load-balancing). Either way the combine weights
  are the softmax of the chosen experts' scores (Mixtral, Jiang et al. 2024, arXiv:2401.04088,
  section 2.1: softmax over the top-k logits), so the router learns in both.
* Dispatch: tokens sorted by expert go to the expert's owner in the expert-parallel group by
  one all-to-all (the counts first, by another); the owner runs its E/ep local experts;
  a second all-to-all brings the outputs back, and each token's outputs are weighted and
  summed. Both all-to-alls are autograd functions whose backward is the reverse all-to-all.
* Each rank routes its own tokens (its sequence shard: MoE with tp > 1 needs sequence
  parallelism, as Megatron asserts). Expert tensor parallelism: with etp = tp the experts are
  split like the dense MLP (fc1 / gate / up by rows, fc2 by columns), and the rows an expert
  receives are exchanged within TP before it runs and its partial outputs reduced after;
  with etp = 1 each rank holds whole experts.
* Experts have no biases (Mixtral's and Switch's experts have none). The router's gradient is
  a partial sum over the TP group (each rank sees its shard of the tokens), all-reduced
  before the optimizer like a sequence-parallel weight's; the experts' gradients are summed
  over the expert data-parallel group (optimizer.py). At top-1 the combine weight is the
  chosen expert's softmax probability among all experts (below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .attention import compute_dtype
from .tensor_parallel import all_gather_dim0


@dataclass
class EPContext:
    """The expert-parallel group of one rank (size 1: every expert is local)."""
    size: int = 1
    rank: int = 0
    group: Any = None


class _AllToAll(torch.autograd.Function):
    """Rows of `x` in blocks of `send` rows to each member; returns the blocks received (`recv`)."""

    @staticmethod
    def forward(ctx, x, send: list[int], recv: list[int], ep: EPContext):
        ctx.send, ctx.recv, ctx.ep = send, recv, ep
        return _exchange(x, send, recv, ep)

    @staticmethod
    def backward(ctx, grad):
        return _exchange(grad, ctx.recv, ctx.send, ctx.ep), None, None, None


def _exchange(x: torch.Tensor, send: list[int], recv: list[int], ep: EPContext) -> torch.Tensor:
    out = x.new_empty((sum(recv), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), output_split_sizes=recv, input_split_sizes=send, group=ep.group)
    return out


def _counts(per_expert: torch.Tensor, ep: EPContext) -> torch.Tensor:
    """[ep, local experts]: how many rows each member sends to each of this rank's experts."""
    out = torch.empty_like(per_expert)
    dist.all_to_all_single(out, per_expert, group=ep.group)
    return out.view(ep.size, -1)


class ExpertMLP(nn.Module):
    """One expert: the dense MLP's shape at `expert_ffn` wide, split over TP when etp = tp."""

    def __init__(self, b, name: str, cfg, split: bool):
        super().__init__()
        self.activation, ffn = cfg.activation, cfg.expert_ffn
        rows, cols = (0, 1) if split else (None, None)
        if self.activation == "swiglu":
            self.gate = _expert_param(b, f"{name}.gate.weight", (ffn, cfg.hidden), rows)
            self.up = _expert_param(b, f"{name}.up.weight", (ffn, cfg.hidden), rows)
        else:
            self.fc1 = _expert_param(b, f"{name}.fc1.weight", (ffn, cfg.hidden), rows)
        self.fc2 = _expert_param(b, f"{name}.fc2.weight", (cfg.hidden, ffn), cols)

    def forward(self, x):  # a partial sum over TP when the expert is split
        if self.activation == "swiglu":
            h = F.silu(F.linear(x, self.gate)) * F.linear(x, self.up)
        elif self.activation == "squared-relu":
            h = F.relu(F.linear(x, self.fc1)).square()
        else:
            h = F.gelu(F.linear(x, self.fc1))
        return F.linear(h, self.fc2)


def _expert_param(b, name: str, shape: tuple[int, int], tp_dim: int | None) -> nn.Parameter:
    p = b.param(name, shape, tp_dim)
    p.sequence_parallel, p.expert = False, True
    return p


class MoE(nn.Module):
    def __init__(self, b, name: str, cfg, ep: EPContext):
        super().__init__()
        self.tp, self.cp, self.ep, self.cfg = b.tp, b.cp, ep, cfg
        self.split = cfg.expert_tp > 1  # etp = tp: experts split like the dense MLP
        self.router = b.param(f"{name}.router.weight", (cfg.experts, cfg.hidden))
        self.router.sequence_parallel = b.tp.size > 1  # a partial sum over TP (module docstring)
        self.local = cfg.experts // ep.size
        first = ep.rank * self.local
        self.experts = nn.ModuleList(ExpertMLP(b, f"{name}.experts.{e}", cfg, self.split)
                                     for e in range(first, first + self.local))

    def forward(self, x):  # x: this rank's tokens (its sequence shard under sequence parallelism)
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        scores = F.linear(tokens, self.router).to(compute_dtype(x.dtype))
        chosen = self._route(scores, shape)
        weights = self._weights(scores, chosen).to(x.dtype)
        outputs = self._dispatch(tokens, chosen)  # [tokens, k, hidden]
        return (outputs * weights.unsqueeze(-1)).sum(dim=1).view(shape)

    def _weights(self, scores: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        if self.cfg.top_k == 1:  # a softmax over one score is 1 and teaches the router nothing:
            # the chosen expert's probability among all (Switch Transformer, Fedus et al. 2021,
            # arXiv:2101.03961, section 2.1; Megatron asks for --moe-router-pre-softmax at top-1)
            return torch.softmax(scores, dim=-1).gather(1, chosen)
        return torch.softmax(scores.gather(1, chosen), dim=-1)

    def _route(self, scores: torch.Tensor, shape) -> torch.Tensor:
        k, experts = self.cfg.top_k, self.cfg.experts
        if self.cfg.routing == "topk":
            return scores.topk(k, dim=-1).indices
        positions = self.cp.positions(self.cfg.seq_len, device=scores.device)
        if self.tp.sp:  # this rank's shard of the sequence
            positions = positions.chunk(self.tp.size)[self.tp.rank]
        per_token = positions.repeat_interleave(shape[1])  # [s, b] flattened s-major
        return (per_token.unsqueeze(1) * k + torch.arange(k, device=scores.device)) % experts

    def _dispatch(self, tokens: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        k, experts, ep = self.cfg.top_k, self.cfg.experts, self.ep
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        rows = tokens[torch.div(order, k, rounding_mode="floor")]  # (token, choice) pairs, by expert
        per_expert = torch.bincount(flat, minlength=experts)
        if ep.size > 1:
            send = per_expert.view(ep.size, -1).sum(dim=1).tolist()
            received = _counts(per_expert, ep)  # [source, local expert]
            recv = received.sum(dim=1).tolist()
            rows = _AllToAll.apply(rows, send, recv, ep)
        else:
            received = per_expert.view(1, -1)
        out = self._experts(rows, received)
        if ep.size > 1:
            out = _AllToAll.apply(out, recv, send, ep)
        unsort = torch.empty_like(order)
        unsort[order] = torch.arange(order.numel(), device=order.device)
        return out[unsort].view(tokens.shape[0], k, self.cfg.hidden)

    def _experts(self, rows: torch.Tensor, received: torch.Tensor) -> torch.Tensor:
        """The local experts on the rows this rank received. Experts split over TP see the rows
        of every TP peer (each routed its own sequence shard to its own expert-parallel group):
        the rows are exchanged within TP, every peer computes its slice of the experts for all
        of them, and each row's partial outputs go back to the peer that holds it and are
        summed there (an all-gather before and a reduce-scatter after, as Megatron's
        all-to-all dispatcher does with expert tensor parallelism)."""
        tp = self.tp
        if not self.split or tp.size == 1:
            return self._run(rows, received)
        group = EPContext(tp.size, tp.rank, tp.group)
        everyone_received = all_gather_dim0(received.reshape(1, -1), tp)  # [peer, source x expert]
        sizes = everyone_received.sum(dim=1).tolist()
        mine = [rows.shape[0]] * tp.size
        everyone = _AllToAll.apply(rows.repeat(tp.size, 1), mine, sizes, group)
        partial = self._run(everyone, everyone_received.reshape(-1, self.local))
        back = _AllToAll.apply(partial, sizes, mine, group)  # my rows' partial outputs from every peer
        return back.view(tp.size, rows.shape[0], self.cfg.hidden).sum(dim=0)

    def _run(self, rows: torch.Tensor, received: torch.Tensor) -> torch.Tensor:
        """Rows arrive by source, each source's by local expert; each expert runs its rows."""
        counts = received.reshape(-1).tolist()  # [source][expert] flattened
        starts = [sum(counts[:i]) for i in range(len(counts))]
        indices, values = [], []
        for e, expert in enumerate(self.experts):
            index = [i for source in range(received.shape[0])
                     for i in range(starts[source * self.local + e],
                                    starts[source * self.local + e] + counts[source * self.local + e])]
            indices += index
            values.append(expert(rows[index]))
        place = torch.tensor(indices, dtype=torch.long, device=rows.device)
        return rows.new_zeros((rows.shape[0], self.cfg.hidden)).index_put((place,), torch.cat(values))

"""One rank of an executed run: walk this rank's lowered action list, and nothing else
decides the order (docs/contracts.md#schedule-ir). `RankRuntime` is a `schedule.Interpreter`, as
the simpy engine's rank is; the loop follows the description of PyTorch's pipelining runtime in
shared/reference/schedules.md section 1.6.

* `F`: run the chunk on its input (tokens on stage 0; the received activation, or the
  local output of the previous stage for a V turnaround) and keep (input, output).
* `RECV_x`: post an irecv and keep the handle; the first compute that needs it waits.
  `SEND_x`: isend; handles are waited at the end of the step. Forward and backward messages
  travel on two separate communicators per pipeline, so each (src, dst, direction) channel
  matches in order even where NCCL ignores tags.
* `B`: backward with the received gradient (or from the loss, scaled by 1/m, on the last
  stage). `BI` / `BW`: a numerically true split done with autograd: BI computes only the
  input gradient (`autograd.grad(..., retain_graph=True)`), BW then back-propagates into the
  chunk's parameters only (`backward(inputs=params)`). BW re-traverses the graph, so BW
  durations are those of a full backward, not of a weight-gradient-only pass.
* `DP_REDUCE#b`, `OPT_STEP`, `PARAM_GATHER#b`: the gradient buffers, data-parallel
  reduction and mixed-precision optimizer of optimizer.py. Weights, activations and the
  pipeline messages are in the format of `training.precision` (precision.py); the last stage
  starts the backward from the loss times the loss scale (fp16) over the micro-batch count.
  Gradients are averaged over dp x cp.
* Context parallelism: a rank feeds its chunks of each micro-batch's tokens
  (context_parallel.py); the ring attention's sends and receives happen inside F and B (and
  again in BW, which re-traverses the graph), as the simulator keeps per-layer collectives
  inside compute actions.

Trace rows are timestamped with `time.perf_counter` relative to the release of a barrier at
the start of each step (after `torch.cuda.synchronize` on CUDA). A SEND / RECV ends when
the runtime first sees it completed: it polls its pending transfers after every action
and at the wait.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ..cluster.placement import EXPERT_GRADIENT_AXIS, GRADIENT_AXIS, Placement
from ..schedule import Kind
from ..schedule.interpreter import Interpreter
from ..schedule.ir import BUCKETED, P2P
from ..schedule.dependencies import input_of
from ..step import step_schedule
from ..trace import STREAM_OF_KIND, TraceRow
from .attention import sdpa_backends
from .context_parallel import CPContext
from .experts import EPContext
from .gpt import GPTChunk, GPTConfig, activation_shape, token_batch
from .optimizer import GradientsAndOptimizer
from .precision import resolve_precision
from .tensor_parallel import TPContext



@dataclass
class RunSpec:
    """Everything a rank needs (picklable; the same for every rank)."""

    scenario: object
    steps: int = 3
    backend: str = "gloo"
    check: bool = False
    seed: int = 0
    lr: float = 0.1
    buckets_per_chunk: int = 1
    timeout_s: float = 30.0
    sabotage: str | None = None  # test hook: "dp_reduce" | "tp_allreduce" | "cp_ring"
    kill: tuple | None = None  # test hook: (rank, 1-based step[, "stop"]) -> os._exit(3) or SIGSTOP
    routing: str = "topk"  # experts: "topk" by the router's scores, or "balanced" by position (experts.py)


def make_schedule(spec: RunSpec):
    """The step schedule `sim3d run` replays and `sim3d validate` proves (sim3d.step)."""
    return step_schedule(spec.scenario, spec.buckets_per_chunk)


def _dist_opt(s) -> bool:
    """ZeRO-1 only means something over more than one rank of dp x cp (the simulator lowers
    it the same way: sim3d.step.gathers_after_step)."""
    return s.parallel.distributed_optimizer and s.dp * s.cp > 1


class RankRuntime(Interpreter):
    def __init__(self, rank: int, spec: RunSpec, device: torch.device):
        super().__init__()
        s = self.scenario = spec.scenario
        self.rank, self.spec, self.device = rank, spec, device
        self.cfg = GPTConfig.of(s, spec.routing)
        self.precision = resolve_precision(s.training, spec.check)
        self.dtype = self.precision.dtype("param")
        self.placement = Placement.of(s)
        self.coords = c = self.placement.coords(rank)
        self.pipeline = self.placement.pipeline(tp=c["tp"], dp=c["dp"], cp=c["cp"])
        self._make_groups()
        self.tp = TPContext(s.tp, c["tp"], self.groups["tp"], s.parallel.sequence_parallel, spec.sabotage)
        self.cp = CPContext(s.cp, c["cp"], self.groups["cp"], tuple(self.placement.group("cp", rank)),
                            spec.sabotage)
        self.ep = EPContext(s.ep, self.placement.group("ep", rank).index(rank), self.groups.get("ep"))
        self.schedule = make_schedule(spec)
        self.stages, self.m = self.schedule.stages, self.schedule.num_microbatches
        self.pp_rank = c["pp"]
        self.actions = self.schedule.ranks[self.pp_rank]
        self.chunks = {ch: GPTChunk(self.cfg, s.stage_layers, self.stages.stage(self.pp_rank, ch), self.tp,
                                    spec.seed, self.dtype, device, self.cp, self.ep)
                       for ch in range(self.stages.vpp)}
        self.buckets = {}
        bpc = spec.buckets_per_chunk
        for ch, module in self.chunks.items():
            params = list(module.parameters())
            for j in range(bpc):
                self.buckets[ch * bpc + j] = params[j * len(params) // bpc:(j + 1) * len(params) // bpc]
        # gradients are averaged (and the optimizer sharded) over dp x cp, as Megatron's
        # data-parallel group with context parallelism: each cp rank saw 1/cp of the tokens
        grads, experts = self.groups["dp_cp"], self.groups.get("edp")
        expert_dp = TPContext(len(self.placement.group(EXPERT_GRADIENT_AXIS, rank)),
                              dist.get_rank(experts) if experts is not None else 0, experts)
        self.opt = GradientsAndOptimizer(self.buckets, self.precision, self.tp,
                                         TPContext(s.dp * s.cp, dist.get_rank(grads), grads), _dist_opt(s),
                                         spec.lr, spec.sabotage, expert_dp)
        self.act_shape = activation_shape(self.cfg, s.training.micro_batch, self.tp, s.cp)

    def _make_groups(self) -> None:
        """Every rank creates every group in the same order (torch.distributed requires it)."""
        timeout = timedelta(seconds=self.spec.timeout_s)
        self.groups = {}
        experts = ((("ep", ("ep",)), (EXPERT_GRADIENT_AXIS, ("edp",)))
                   if self.scenario.model.moe is not None else ())
        for axis, copies in (("tp", ("tp",)), ("cp", ("cp",)), (GRADIENT_AXIS, ("dp_cp",)),
                             ("pp", ("pp_f", "pp_b")), *experts):
            for ranks in self.placement.groups(axis):
                for name in copies:
                    group = dist.new_group(ranks, timeout=timeout)
                    if self.rank in ranks:
                        self.groups[name] = group
        self.dp_size, self.dp_rank = self.scenario.dp, self.coords["dp"]

    # ---- timing and trace ------------------------------------------------------------
    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - self.t0

    def _poll(self) -> None:
        still = []
        for row, work in self.pending:
            if work.is_completed():
                self._end(row)
            else:
                still.append((row, work))
        self.pending = still

    def _wait(self, row: int, work) -> None:
        work.wait(timedelta(seconds=self.spec.timeout_s))
        if self.rows[row].end_s is None:
            self._end(row)
        self.pending = [(r, w) for r, w in self.pending if r != row]

    # ---- one step ----------------------------------------------------------------------
    def run_step(self, step: int) -> tuple[list[TraceRow], float | None, float]:
        s, spec = self.scenario, self.spec
        rows_per_replica = self.m * s.training.micro_batch
        tokens = token_batch(spec.seed, step, s.training.global_batch, self.cfg).to(self.device)
        self.tokens = tokens[self.dp_rank * rows_per_replica:(self.dp_rank + 1) * rows_per_replica]
        self.opt.zero_grad()
        self.saved, self.act_out, self.grad_in, self.recvs, self.deferred = {}, {}, {}, {}, {}
        self.sends, self.pending, self.rows, self.loss = [], [], [], None
        dist.barrier()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.t0 = time.perf_counter()
        for index, action in enumerate(self.actions):
            self._run(action)
            if spec.kill and tuple(spec.kill[:2]) == (self.rank, step + 1) and index == 0:
                if spec.kill[2:] == ("stop",):
                    os.kill(os.getpid(), signal.SIGSTOP)  # hangs here, as a rank stuck in a driver would
                os._exit(3)
            self._poll()
        for row, work, _ in self.sends:
            self._wait(row, work)
        leftovers = {k: v for k, v in (("saved", self.saved), ("recvs", self.recvs), ("act_out", self.act_out),
                                       ("grad_in", self.grad_in), ("deferred", self.deferred)) if v}
        if leftovers:
            raise RuntimeError(f"rank {self.rank}: state left after the step: "
                               + ", ".join(f"{k}={sorted(v)}" for k, v in leftovers.items()))
        return self.rows, self.loss, self.now()

    def _row(self, action, stage, chunk, mb, nbytes=0, peer=-1) -> int:
        """Open the row of an action starting now (end_s None until it is seen complete)."""
        kind = action.kind
        self.rows.append(TraceRow(self.rank, stage, chunk, mb, kind.value, STREAM_OF_KIND[kind.value], self.now(), None,
                                  nbytes, peer))
        return len(self.rows) - 1

    def _end(self, row: int, **known) -> None:
        """Close row `row` now, with what else became `known` (its bytes)."""
        self.rows[row] = self.rows[row]._replace(end_s=self.now(), **known)

    def _run(self, a) -> None:
        """Carry out one action; actions that occupy this rank get a trace row that ends
        when they return (point-to-point rows end when the transfer is seen complete)."""
        if a.kind in P2P:
            self.dispatch(a)
            return
        if a.kind is Kind.OPT_STEP:
            row = self._row(a, self.stages.stage(self.pp_rank, 0), -1, -1)  # chunk -1 as in the engine
        else:  # a DP bucket's row carries the bucket where compute rows carry the micro-batch
            row = self._row(a, self.stages.stage(self.pp_rank, a.chunk), a.chunk,
                            a.bucket if a.kind in BUCKETED else a.mb)
        nbytes = self.dispatch(a)
        self._end(row, **({"bytes": nbytes} if nbytes else {}))

    # ---- pipeline ------------------------------------------------------------------------
    def _channel(self, a) -> tuple:
        """(this rank's stage, the pipeline group of the action's direction, the peer's global rank)."""
        forward = a.kind in (Kind.SEND_F, Kind.RECV_F)
        return (self.stages.stage(self.pp_rank, a.chunk), self.groups["pp_f" if forward else "pp_b"],
                self.pipeline[a.peer])

    def send(self, a) -> None:
        stage, group, peer = self._channel(a)
        tensor = (self.act_out if a.kind is Kind.SEND_F else self.grad_in).pop((stage, a.mb)).contiguous()
        row = self._row(a, stage, a.chunk, a.mb, tensor.numel() * tensor.element_size(), peer)
        work = dist.isend(tensor, dst=peer, group=group)
        self.sends.append((row, work, tensor))  # the tensor stays alive until the step ends
        self.pending.append((row, work))

    def recv(self, a) -> None:
        stage, group, peer = self._channel(a)
        key = (a.kind, stage, a.mb)
        if key in self.recvs:
            raise RuntimeError(f"rank {self.rank}: {a} posted twice")
        buf = torch.empty(self.act_shape, dtype=self.dtype, device=self.device)
        row = self._row(a, stage, a.chunk, a.mb, buf.numel() * buf.element_size(), peer)
        work = dist.irecv(buf, src=peer, group=group)
        self.recvs[key] = (row, work, buf)
        self.pending.append((row, work))

    def _received(self, kind: Kind, stage: int, mb: int) -> torch.Tensor:
        if (kind, stage, mb) not in self.recvs:
            raise RuntimeError(f"rank {self.rank}: stage {stage} mb {mb} needs a {kind} that was never posted")
        row, work, buf = self.recvs.pop((kind, stage, mb))
        self._wait(row, work)
        return buf

    def _microbatch(self, mb: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) of micro-batch `mb`: this cp rank's positions of its rows."""
        size = self.scenario.training.micro_batch
        rows = self.tokens[mb * size:(mb + 1) * size]
        return self.cp.local(rows[:, :-1]), self.cp.local(rows[:, 1:])

    def forward(self, a) -> None:
        stage = self.stages.stage(self.pp_rank, a.chunk)
        module = self.chunks[a.chunk]
        src = input_of(self.stages, self.pp_rank, a)
        if src is None:
            x = self._microbatch(a.mb)[0]
        elif src.rank == self.pp_rank:  # V turnaround: local producer
            x = self.act_out.pop((src.stage, a.mb)).detach().requires_grad_()
        else:
            x = self._received(Kind.RECV_F, stage, a.mb).requires_grad_()
        if module.last:
            loss = module(x, self._microbatch(a.mb)[1])
            self.loss = (self.loss or 0.0) + float(loss.detach()) / self.m
            out = loss * (self.opt.loss_scale / self.m)  # the backward starts from the scaled loss (fp16)
        else:
            out = module(x)
            self.act_out[(stage, a.mb)] = out.detach()
        self.saved[(stage, a.mb)] = (x, out)

    def _output_grad(self, a, stage: int):
        src = input_of(self.stages, self.pp_rank, a)
        if src is None:  # the last stage starts from its loss
            return None
        if src.rank == self.pp_rank:
            return self.grad_in.pop((src.stage, a.mb))
        return self._received(Kind.RECV_B, stage, a.mb)

    def backward(self, a) -> None:
        stage = self.stages.stage(self.pp_rank, a.chunk)
        x, out = self.saved.pop((stage, a.mb))
        torch.autograd.backward(out, self._output_grad(a, stage))
        if stage > 0:
            self.grad_in[(stage, a.mb)] = x.grad

    def backward_input(self, a) -> None:
        stage = self.stages.stage(self.pp_rank, a.chunk)
        x, out = self.saved[(stage, a.mb)]
        grad = self._output_grad(a, stage)
        if stage > 0:
            (self.grad_in[(stage, a.mb)],) = torch.autograd.grad(out, [x], grad, retain_graph=True)
        self.deferred[(stage, a.mb)] = grad

    def backward_weight(self, a) -> None:
        stage = self.stages.stage(self.pp_rank, a.chunk)
        _, out = self.saved.pop((stage, a.mb))
        grad = self.deferred.pop((stage, a.mb))
        torch.autograd.backward(out, grad, inputs=list(self.chunks[a.chunk].parameters()))

    # ---- data parallel and optimizer (optimizer.py) ------------------------------------------
    def reduce_gradients(self, a) -> int:
        return self.opt.reduce(a.bucket)

    def optimizer_step(self, a) -> None:
        self.opt.step()

    def gather_parameters(self, a) -> int:
        return self.opt.gather(a.bucket)

    # ---- what ran, and the check ---------------------------------------------------------------
    def numerics(self) -> dict:
        """The formats, attention kernel and device this rank ran with (ExecuteResult.numerics)."""
        p, device = self.precision, str(self.device)
        if self.device.type == "cuda":
            device += f" ({torch.cuda.get_device_name(self.device)})"
        return {"precision": p.name, "dtype": p.param, "master_dtype": p.main, "grad_dtype": p.grad,
                "loss_scale": self.opt.scaler.scale if self.opt.scaler else None, "described": p.describe(),
                "attention": self._attention_ran(),
                "routing": self.cfg.routing if self.cfg.experts else None, "device": device}

    def _attention_ran(self) -> str:
        """The attention kernel that ran, and the named one (training.kernels.attention) where
        it did not: the ring of context parallelism computes its own blocks; elsewhere see
        attention.sdpa_backends."""
        named = self.cfg.sdpa_kernel
        if self.cp.size > 1:
            ran = f"ring over {self.cp.size} cp ranks"
        elif self.cfg.attention == "sdpa" and sdpa_backends(named, self.device.type, self.precision.dtype("param")):
            return f"sdpa ({named})"
        else:
            ran = self.cfg.attention
        return ran if named == "default" or self.cfg.attention != "sdpa" else f"{ran}; {named} not run"

    def shards_for_check(self) -> dict:
        """This rank's final master weights and (dp-averaged, unscaled) gradients, by global name."""
        weights, grads = self.opt.final_state()
        tp_dims = {p.global_name: p.tp_dim for m in self.chunks.values() for p in m.parameters()}
        return {"rank": self.rank, "tp": self.tp.size, "tp_rank": self.tp.rank, "grads": grads,
                "params": {name: (tp_dims[name], value) for name, value in weights.items()}}


def run_rank(rank: int, world_size: int, spec: RunSpec, init_method: str = "env://", local_rank: int = 0,
             on_step=None) -> dict:
    """Initialise the process group, run `spec.steps` steps, return this rank's payload.
    `on_step(step)` is called after each step (the launcher's progress)."""
    torch.set_num_threads(1)
    if spec.backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(spec.backend, init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=spec.timeout_s))
    runtime = RankRuntime(rank, spec, device)
    losses, step_times, rows, skipped = [], [], [], []
    for step in range(spec.steps):
        rows, loss, step_time = runtime.run_step(step)
        losses.append(loss)
        step_times.append(step_time)
        if runtime.opt.overflowed:  # fp16: the step's gradients overflowed and its update was skipped
            skipped.append(step)
        if on_step is not None:
            on_step(step)
    holds_loss = any(module.last for module in runtime.chunks.values())
    payload = {"rank": rank, "coords": runtime.coords, "losses": losses if holds_loss else None,
               "step_times": step_times, "trace": rows, "skipped_steps": skipped,
               "ran": runtime.numerics(),
               "shards": runtime.shards_for_check() if spec.check else None}
    dist.barrier()  # nobody leaves while a peer may still be reading from it
    return payload

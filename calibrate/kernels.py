"""Kernel benchmarks, forward and backward: GEMM (and FP8 GEMM on GPUs that have FP8 tensor
cores), attention, norms, activations, softmax, dropout, residual add, embedding lookup,
cross-entropy.

GEMMs use the ``nn.Linear`` layout (y = x W^T with x (m, k), W (n, k)); their backward is the
two GEMMs autograd runs (dx = dy W, dW = dy^T x), called directly. Every other op's backward
is ``torch.autograd.grad`` on a graph built once per input set (``retain_graph=True``), so
only the backward kernels are timed. Inputs are random normal (indices: uniform), one set
per rotation slot (see :mod:`sim3d_calibrate.timing`).

The whole plan is measured ``rounds`` times (quick: 2, full: 3), one round after the other;
each round yields the median of its repeats, and the profile keeps the smallest of these
medians. A burst of load from other processes (on a shared machine a second runnable
process stalls a 2-thread OpenMP region by whole scheduler ticks) then spoils one round,
not the profile.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from .noise import noise_summary
from .profile_io import make_row
from .shapes import KernelPlan
from .timing import measure, num_sets

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class KernelBench:
    def __init__(self, device: str, dtype: str, quick: bool, progress: Callable[[str], None] | None = None,
                 rounds: int | None = None):
        self.device, self.dtype, self.quick = device, dtype, quick
        self.tdtype = TORCH_DTYPES[dtype]
        self.es = torch.finfo(self.tdtype).bits // 8
        self.progress = progress or (lambda _msg: None)
        self.budget = 0.3 if quick else 1.0
        self.rounds = rounds or (2 if quick else 3)
        self.rows: list[dict] = []
        self.skipped: list[str] = []

    # -- helpers ---------------------------------------------------------------------------
    def _randn(self, *shape, grad=False):
        return torch.randn(*shape, device=self.device, dtype=self.tdtype, requires_grad=grad)

    def _time(self, calls) -> float:
        return measure(calls, self.device, warmup=2 if self.quick else 3,
                       min_repeats=3, max_repeats=15 if self.quick else 30, budget_s=self.budget)

    def _add(self, op, kind, pass_, shape, seconds, *, numel, nbytes, flops=None, m=None, n=None, k=None,
             dtype=None):
        self.rows.append(make_row(
            op=op, kind=kind, **{"pass": pass_}, shape=shape, m=m, n=n, k=k, numel=numel,
            bytes=nbytes, dtype=dtype or self.dtype, device=self.device, seconds=seconds,
            tflops=(flops / seconds / 1e12) if flops else None, gbps=nbytes / seconds / 1e9))

    def _fwd_bwd(self, op, kind, shape, make, numel, fwd_bytes, bwd_bytes, flops=(None, None), bwd=True):
        """``make()`` -> (fn, inputs needing grad). Times fn(), then autograd.grad of its output."""
        try:
            probe_fn, probe_inputs = make()
            out = probe_fn()
            set_bytes = sum(t.numel() * t.element_size() for t in probe_inputs) + out.numel() * out.element_size()
            sets = [(probe_fn, probe_inputs)] + [make() for _ in range(num_sets(set_bytes, self.device) - 1)]
            del out
            self._add(op, kind, "fwd", shape, self._time([fn for fn, _ in sets]),
                      numel=numel, nbytes=fwd_bytes, flops=flops[0])
            if not bwd:
                return
            graphs = []
            for fn, inputs in sets:
                out = fn()
                grad = torch.randn_like(out) if out.dim() else torch.ones_like(out)
                graphs.append((out, inputs, grad))
            calls = [lambda o=o, i=i, g=g: torch.autograd.grad(o, i, g, retain_graph=True) for o, i, g in graphs]
            self._add(op, kind, "bwd", shape, self._time(calls), numel=numel, nbytes=bwd_bytes, flops=flops[1])
        except (RuntimeError, NotImplementedError) as exc:  # e.g. op not implemented for dtype
            self.skipped.append(f"{op} {shape}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")

    # -- ops ---------------------------------------------------------------------------------
    def gemm(self, op: str, m: int, n: int, k: int) -> None:
        es, shape = self.es, f"m={m},n={n},k={k}"
        set_bytes = (m * k + n * k + m * n) * es
        try:
            sets = [(self._randn(m, k), self._randn(n, k), self._randn(m, n))
                    for _ in range(num_sets(set_bytes, self.device))]
            fwd = [lambda x=x, w=w: F.linear(x, w) for x, w, _ in sets]
            bwd = [lambda x=x, w=w, dy=dy: (dy @ w, dy.t() @ x) for x, w, dy in sets]
            kw = dict(m=m, n=n, k=k, numel=m * n)
            self._add(op, "gemm", "fwd", shape, self._time(fwd), nbytes=set_bytes, flops=2 * m * n * k, **kw)
            self._add(op, "gemm", "bwd", shape, self._time(bwd), nbytes=2 * set_bytes, flops=4 * m * n * k, **kw)
        except (RuntimeError, NotImplementedError) as exc:
            self.skipped.append(f"{op} {shape}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")

    def attention(self, b: int, h: int, kvh: int, s: int, d: int) -> None:
        """``attention`` is what ``scaled_dot_product_attention`` dispatches to by default (the
        row the cost model reads); on CUDA each fused backend is also timed on its own
        (``attention.flash``: FlashAttention-2 inside torch, ``attention.cudnn``: cuDNN's fused
        attention, the kernel family Transformer Engine uses on Hopper)."""
        gqa = kvh != h
        flops = 2 * b * h * s * s * d            # causal: half of 4*b*h*s^2*d
        io = (2 * b * h * s * d + 2 * b * kvh * s * d) * self.es
        shape = f"b={b},h={h},s={s},d={d}" + (f",kv={kvh}" if gqa else "")
        for op, backend in [("attention", None)] + (self._attention_backends() if self.device == "cuda" else []):
            def make(backend=backend):
                q, kk, v = (self._randn(b, h, s, d, grad=True), self._randn(b, kvh, s, d, grad=True),
                            self._randn(b, kvh, s, d, grad=True))
                extra = {"enable_gqa": True} if gqa else {}

                def call():
                    if backend is None:
                        return F.scaled_dot_product_attention(q, kk, v, is_causal=True, **extra)
                    with torch.nn.attention.sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, kk, v, is_causal=True, **extra)
                return call, [q, kk, v]
            self._fwd_bwd(op, "attention", shape, make, b * h * s * d, io, 2 * io, flops=(flops, 2.5 * flops))

    @staticmethod
    def _attention_backends() -> list[tuple[str, object]]:
        from torch.nn.attention import SDPBackend
        named = [("attention.flash", "FLASH_ATTENTION"), ("attention.cudnn", "CUDNN_ATTENTION")]
        return [(op, getattr(SDPBackend, name)) for op, name in named if hasattr(SDPBackend, name)]

    def fp8_gemm(self, op: str, m: int, n: int, k: int) -> None:
        """The three GEMMs of an FP8 linear as Transformer Engine runs them on Hopper: E4M3
        operands, per-tensor scales, bf16 output, through ``torch._scaled_mm`` (cuBLASLt).
        The operands are laid out beforehand (cuBLASLt's FP8 path wants A row-major and B
        column-major); TE's cast-transpose kernels that produce them are not timed here (the
        cost model charges them as memory traffic). ``_scaled_mm``'s default
        ``use_fast_accum=False`` (pytorch/pytorch aten/src/ATen/native/native_functions.yaml)
        runs cuBLASLt's split accumulator, as TE does for its input- and weight-gradient GEMMs;
        TE's forward GEMMs use fast accumulation (NVIDIA/TransformerEngine
        transformer_engine/pytorch/module/base.py: ``_2X_ACC_FPROP = False``), which no row here
        times."""
        shape = f"m={m},n={n},k={k}"
        if any(x % 16 for x in (m, n, k)):
            self.skipped.append(f"{op} {shape} fp8: dimensions must be multiples of 16")
            return
        e4m3, one = torch.float8_e4m3fn, torch.ones((), device=self.device)

        def fp8(*shape):
            return (torch.randn(*shape, device=self.device) * 0.5).to(e4m3)

        def mm(a, b):
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        set_bytes = m * k + n * k + 2 * m * n
        try:
            sets = []
            for _ in range(num_sets(set_bytes, self.device)):
                x, w, dy = fp8(m, k), fp8(n, k), fp8(m, n)
                sets.append((x, w.t(), dy, w.t().contiguous().t(), dy.t().contiguous(), x.t().contiguous().t()))
            fwd = [lambda x=x, wt=wt: mm(x, wt) for x, wt, *_ in sets]
            bwd = [lambda dy=dy, wk=wk, dyt=dyt, xk=xk: (mm(dy, wk), mm(dyt, xk)) for _, _, dy, wk, dyt, xk in sets]
            kw = dict(m=m, n=n, k=k, numel=m * n, dtype="fp8")
            self._add(op, "gemm", "fwd", shape, self._time(fwd), nbytes=set_bytes, flops=2 * m * n * k, **kw)
            self._add(op, "gemm", "bwd", shape, self._time(bwd), nbytes=2 * set_bytes, flops=4 * m * n * k, **kw)
        except (RuntimeError, NotImplementedError, TypeError) as exc:
            self.skipped.append(f"{op} {shape} fp8: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")

    def rowwise(self, rows: int, cols: int) -> None:
        es, numel, shape = self.es, rows * cols, f"rows={rows},cols={cols}"

        def unary(fn, with_weight=False):
            def make():
                x = self._randn(rows, cols, grad=True)
                if with_weight:
                    w = self._randn(cols, grad=True)
                    return (lambda: fn(x, w)), [x, w]
                return (lambda: fn(x)), [x]
            return make
        ln = unary(lambda x, w: F.layer_norm(x, (cols,), w), True)
        rms = unary(lambda x, w: F.rms_norm(x, (cols,), w), True)
        self._fwd_bwd("layernorm", "norm", shape, ln, numel, 2 * numel * es, 3 * numel * es)
        self._fwd_bwd("rmsnorm", "norm", shape, rms, numel, 2 * numel * es, 3 * numel * es)
        self._fwd_bwd("gelu", "elementwise", shape, unary(F.gelu), numel, 2 * numel * es, 3 * numel * es)

        def swiglu():
            x, y = self._randn(rows, cols, grad=True), self._randn(rows, cols, grad=True)
            return (lambda: F.silu(x) * y), [x, y]
        self._fwd_bwd("swiglu", "elementwise", shape, swiglu, numel, 3 * numel * es, 5 * numel * es)
        self._fwd_bwd("dropout", "elementwise", shape, unary(lambda x: F.dropout(x, 0.1, training=True)),
                      numel, 2 * numel * es, 2 * numel * es)

        def add():
            x, y = self._randn(rows, cols, grad=True), self._randn(rows, cols, grad=True)
            return (lambda: x + y), [x, y]
        # the backward of a residual add is a pass-through (no kernel); the gradient sum at
        # the residual fork is another add, i.e. use the forward row.
        self._fwd_bwd("add", "elementwise", shape, add, numel, 3 * numel * es, 0, bwd=False)

    def softmax(self, rows: int, cols: int) -> None:
        numel, es = rows * cols, self.es

        def make():
            x = self._randn(rows, cols, grad=True)
            return (lambda: torch.softmax(x, dim=-1)), [x]
        self._fwd_bwd("softmax", "softmax", f"rows={rows},cols={cols}", make, numel, 2 * numel * es, 3 * numel * es)

    def embedding(self, tokens: int, vocab: int, hidden: int) -> None:
        numel, es = tokens * hidden, self.es

        def make():
            idx = torch.randint(0, vocab, (tokens,), device=self.device)
            table = self._randn(vocab, hidden, grad=True)
            return (lambda: F.embedding(idx, table)), [table]
        self._fwd_bwd("embedding", "embedding", f"tokens={tokens},vocab={vocab},hidden={hidden}", make,
                      numel, 2 * numel * es, (vocab * hidden + 2 * numel) * es)

    def cross_entropy(self, tokens: int, vocab: int) -> None:
        numel, es = tokens * vocab, self.es

        def make():
            logits = self._randn(tokens, vocab, grad=True)
            target = torch.randint(0, vocab, (tokens,), device=self.device)
            return (lambda: F.cross_entropy(logits, target)), [logits]
        self._fwd_bwd("cross_entropy", "loss", f"rows={tokens},cols={vocab}", make, numel,
                      numel * es, 2 * numel * es)

    # -- driver ------------------------------------------------------------------------------
    def _has_fp8(self) -> bool:
        """FP8 tensor cores: compute capability 8.9 (Ada) or 9.0+ (Hopper, Blackwell)."""
        return (self.device == "cuda" and hasattr(torch, "_scaled_mm")
                and torch.cuda.get_device_capability(0) >= (8, 9))

    def run(self, plan: KernelPlan) -> list[dict]:
        torch.manual_seed(0)
        steps = ([(f"GEMM {op} m={m} n={n} k={k}", self.gemm, (op, m, n, k)) for op, m, n, k in plan.gemms]
                 + [(f"FP8 GEMM {op} m={m} n={n} k={k}", self.fp8_gemm, (op, m, n, k))
                    for op, m, n, k in (plan.gemms if self._has_fp8() else [])]
                 + [(f"attention b={a[0]} h={a[1]} s={a[3]} d={a[4]}", self.attention, a) for a in plan.attention]
                 + [(f"norm/activation {r}x{c}", self.rowwise, (r, c)) for r, c in plan.rowwise]
                 + [(f"softmax {r}x{c}", self.softmax, (r, c)) for r, c in plan.softmax]
                 + [(f"embedding {e}", self.embedding, e) for e in plan.embedding]
                 + [(f"cross-entropy {c}", self.cross_entropy, c) for c in plan.cross_entropy])
        for r in range(1, self.rounds + 1):
            for i, (label, fn, args) in enumerate(steps, 1):
                self.progress(f"round {r}/{self.rounds} [{i}/{len(steps)}] {label} ({self.dtype}, {self.device})")
                fn(*args)
                if self.device == "cuda":
                    torch.cuda.empty_cache()
        self.noise = noise_summary(self.rows)
        best: dict = {}
        for row in self.rows:   # keep the smallest per-round median of each measurement
            key = (row["op"], row["pass"], row["shape"], row["dtype"])
            if key not in best or row["seconds"] < best[key]["seconds"]:
                best[key] = row
        self.skipped = sorted(set(self.skipped))
        return list(best.values())

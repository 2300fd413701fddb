"""One transformer layer's shard on one GPU, forward and backward, timed as a whole.

``python -m sim3d_calibrate.layer_bench SCENARIO... [--out FILE.json]``

This is the compute half of a tensor-parallel layer exactly as one rank of the scenario runs
it (heads, query groups and FFN divided by tp, the sequence by cp), in eager PyTorch with
``scaled_dot_product_attention``: the same cuBLAS GEMMs and fused attention kernels that
Megatron-Core runs, one kernel per op (no Transformer Engine fusions, so norms and
activations are if anything slower here than in NeMo). No communication is run. It is the
measured side of ``benchmarks/layer_check.py``, which puts sim3d's per-op prediction for the
same layer beside it: an end-to-end check of the compute model that no per-kernel row gives,
because it includes the launch gaps and layout copies between the kernels.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def _shard(scenario) -> dict:
    m, t = scenario.model, scenario.tp
    return {"name": scenario.name, "b": scenario.training.micro_batch, "s": m.seq_len // scenario.cp,
            "h": m.hidden, "heads": m.heads // t, "kv_heads": max(1, m.num_kv_heads // t),
            "head_dim": m.head_dim, "ffn": m.ffn // t, "activation": m.activation, "tp": t, "cp": scenario.cp,
            "hidden_dropout": m.hidden_dropout, "attention_dropout": m.attention_dropout,
            "attention_backend": scenario.training.attention_backend}


class LayerShard(torch.nn.Module):
    def __init__(self, d: dict, dtype, device):
        super().__init__()
        h, hd = d["h"], d["head_dim"]
        kw = dict(device=device, dtype=dtype)
        gpt = d["activation"] == "gelu"
        self.d = d
        self.norm1 = torch.nn.LayerNorm(h, **kw) if d["activation"] != "swiglu" else torch.nn.RMSNorm(h, **kw)
        self.norm2 = torch.nn.LayerNorm(h, **kw) if d["activation"] != "swiglu" else torch.nn.RMSNorm(h, **kw)
        self.qkv = torch.nn.Linear(h, (d["heads"] + 2 * d["kv_heads"]) * hd, bias=gpt, **kw)
        self.proj = torch.nn.Linear(d["heads"] * hd, h, bias=gpt, **kw)
        self.fc1 = torch.nn.Linear(h, d["ffn"] * (2 if d["activation"] == "swiglu" else 1), bias=gpt, **kw)
        self.fc2 = torch.nn.Linear(d["ffn"], h, bias=gpt, **kw)
        half = hd // 2
        inv = 1.0 / (10000 ** (torch.arange(half, device=device, dtype=torch.float32) / half))
        ang = torch.outer(torch.arange(d["s"], device=device, dtype=torch.float32), inv)
        self.cos, self.sin = ang.cos().to(dtype)[:, None, None, :], ang.sin().to(dtype)[:, None, None, :]

    def _rope(self, x):  # x: [s, b, heads, hd]
        a, b = x.chunk(2, dim=-1)
        return torch.cat((a * self.cos - b * self.sin, b * self.cos + a * self.sin), dim=-1)

    def forward(self, x):  # x: [s, b, h], Megatron's layout
        d, hd = self.d, self.d["head_dim"]
        s, b, _ = x.shape
        y = self.qkv(self.norm1(x)).view(s, b, d["heads"] + 2 * d["kv_heads"], hd)
        q, k, v = y.split([d["heads"], d["kv_heads"], d["kv_heads"]], dim=2)
        if d["activation"] != "gelu":
            q, k = self._rope(q), self._rope(k)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))   # [b, heads, s, hd]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=d["attention_dropout"],
                                           enable_gqa=d["kv_heads"] != d["heads"])
        o = o.permute(2, 0, 1, 3).reshape(s, b, d["heads"] * hd)
        x = x + F.dropout(self.proj(o), d["hidden_dropout"])
        u = self.fc1(self.norm2(x))
        if d["activation"] == "swiglu":
            g, u = u.chunk(2, dim=-1)
            a = F.silu(g) * u
        elif d["activation"] == "squared-relu":
            a = F.relu(u).square()
        else:
            a = F.gelu(u)
        return x + F.dropout(self.fc2(a), d["hidden_dropout"])


def _events(fn, reps: int) -> list[float]:
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in pairs:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) / 1e3 for a, b in pairs]


def measure_layer(d: dict, reps: int = 10, hot_seconds: float = 20.0, dtype=torch.bfloat16,
                  device: str = "cuda") -> dict:
    """Forward and backward medians twice: ``cold`` after two idle seconds (the boost clock a
    kernel benchmark sees) and ``hot`` after ``hot_seconds`` of back-to-back training steps of
    the layer (the power-capped clock a training run sees)."""
    from .sustained import _smi
    torch.manual_seed(0)
    layer = LayerShard(d, dtype, device)
    x = torch.randn(d["s"], d["b"], d["h"], device=device, dtype=dtype, requires_grad=True)
    params = [x, *layer.parameters()]
    grad = torch.randn_like(layer(x))

    def step():
        torch.autograd.grad(layer(x), params, grad)
    for _ in range(3):
        step()
    torch.cuda.synchronize()

    def timed() -> dict:
        fwd = _events(lambda: layer(x), reps)
        graphs = iter([layer(x) for _ in range(reps)])
        bwd = _events(lambda: torch.autograd.grad(next(graphs), params, grad), reps)
        smi = _smi() or {}
        return {"fwd_ms": statistics.median(fwd) * 1e3, "bwd_ms": statistics.median(bwd) * 1e3,
                "sm_clock_mhz": smi.get("clocks.sm"), "power_w": smi.get("power.draw")}
    time.sleep(2.0)
    cold = timed()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < hot_seconds:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    hot = timed()
    return {**d, "cold": cold, "hot": hot, "reps": reps, "hot_seconds": hot_seconds,
            "statistic": "median of CUDA-event timings; nvidia-smi read right after"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim3d_calibrate.layer_bench", description=__doc__.splitlines()[0])
    p.add_argument("scenarios", nargs="+")
    p.add_argument("--out", default=None)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--hot-seconds", type=float, default=20.0, help="steps run before the hot timing")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: layer_bench needs a CUDA GPU", file=sys.stderr)
        return 2
    from sim3d.scenario.load import load_scenario

    from .profile_io import provenance
    rows = []
    for path in a.scenarios:
        d = _shard(load_scenario(path))
        t0 = time.perf_counter()
        rows.append({"scenario": path, **measure_layer(d, a.reps, a.hot_seconds)})
        torch.cuda.empty_cache()
        c, h = rows[-1]["cold"], rows[-1]["hot"]
        print(f"{path}: cold fwd {c['fwd_ms']:.2f} bwd {c['bwd_ms']:.2f} ms ({c['sm_clock_mhz']} MHz); "
              f"hot fwd {h['fwd_ms']:.2f} bwd {h['bwd_ms']:.2f} ms ({h['sm_clock_mhz']} MHz, {h['power_w']} W) "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    info = {"provenance": provenance("cuda", False, "bf16"), "layers": rows}
    text = json.dumps(info, indent=2) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

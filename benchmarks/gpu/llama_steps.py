"""Whole training steps of a Llama block as plain PyTorch runs it, eager and under torch.compile,
timed on one GPU, with one profiled step of each (a Kineto trace) -- the measurement
`validation/h200_llama_steps.json` holds and `tests/fixtures/traces/` keeps the traces of.

The model is written here, in plain torch, the way Hugging Face transformers' LlamaForCausalLM
computes it (models/llama/modeling_llama.py): RMSNorm as its chain of ops on an fp32 copy,
rotary embeddings with rotate_half, repeat_kv for grouped-query attention, SDPA with
is_causal, SwiGLU as down(silu(gate(x)) * up(x)), untied embeddings, the loss on fp32 logits.
Parameters, gradients and AdamW(fused=True) state in bf16, as the H100 step file's run.

    python benchmarks/gpu/llama_steps.py --out DIR            # on a GPU (a few minutes)
    python benchmarks/gpu/llama_steps.py --device cpu --tiny   # the same code, small, on a CPU
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, h: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + 1e-5)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, h: int, heads: int, kv: int, ffn: int):
        super().__init__()
        self.heads, self.kv, self.d = heads, kv, h // heads
        self.input_norm, self.post_norm = RMSNorm(h), RMSNorm(h)
        self.q, self.k = nn.Linear(h, h, bias=False), nn.Linear(h, kv * self.d, bias=False)
        self.v, self.o = nn.Linear(h, kv * self.d, bias=False), nn.Linear(h, h, bias=False)
        self.gate, self.up = nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False)
        self.down = nn.Linear(ffn, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        y = self.input_norm(x)
        q = self.q(y).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv, self.d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv
        k = k[:, :, None].expand(b, self.kv, rep, s, self.d).reshape(b, self.heads, s, self.d)
        v = v[:, :, None].expand(b, self.kv, rep, s, self.d).reshape(b, self.heads, s, self.d)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).contiguous().view(b, s, -1))
        y = self.post_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    def __init__(self, layers, h, heads, kv, ffn, vocab, theta=500000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, h)
        self.layers = nn.ModuleList(Layer(h, heads, kv, ffn) for _ in range(layers))
        self.norm, self.head = RMSNorm(h), nn.Linear(h, vocab, bias=False)
        d = h // heads
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d),
                             persistent=False)

    def forward(self, tokens, labels):
        x = self.embed(tokens)
        positions = torch.arange(tokens.shape[1], device=tokens.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype)[None, None], emb.sin().to(x.dtype)[None, None]
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def step(model, opt, batches):
    opt.zero_grad(set_to_none=True)
    for tokens, labels in batches:
        (model(tokens, labels) / len(batches)).backward()
    opt.step()


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def run(args, mode: str, mbs: int, out: Path) -> dict:
    torch.manual_seed(0)
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = Llama(args.layers, args.hidden, args.heads, args.kv, args.ffn, args.vocab).to(device, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    run_model = torch.compile(model) if mode == "compiled" else model
    n = args.gbs // mbs
    batches = [(torch.randint(0, args.vocab, (mbs, args.seq), device=device),
                torch.randint(0, args.vocab, (mbs, args.seq), device=device)) for _ in range(n)]
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    walls = []
    for _ in range(args.steps):
        sync(device)
        started = time.perf_counter()
        step(run_model, opt, batches)
        sync(device)
        walls.append(time.perf_counter() - started)
    result = {"mode": mode, "seq": args.seq, "mbs": mbs, "gbs": args.gbs, "walls": walls,
              "median_s": statistics.median(walls[3:]) if len(walls) > 3 else walls[-1],
              "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}
    if args.trace and mbs == args.trace_mbs:
        from torch.profiler import ProfilerActivity, profile, record_function
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        path = out / f"llama_{mode}_step.json"
        with profile(activities=activities, record_shapes=True) as prof:
            for i in range(2):  # two steps: a trace reader sees the spread between them
                with record_function(f"ProfilerStep#{i}"):
                    step(run_model, opt, batches)
                sync(device)
        prof.export_chrome_trace(str(path))
        with open(path, "rb") as src, gzip.open(f"{path}.gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
        result["trace"] = f"{path.name}.gz"
    del model, opt, run_model
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a small model (a check of the code on a CPU)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--trace", action="store_true", help="also write one profiled step per mode")
    parser.add_argument("--trace-mbs", type=int, default=2)
    args = parser.parse_args()
    shape = dict(layers=4, hidden=4096, heads=32, kv=8, ffn=14336, vocab=128256, seq=4096, gbs=8)
    if args.tiny:
        shape = dict(layers=2, hidden=64, heads=4, kv=2, ffn=128, vocab=256, seq=32, gbs=4)
    for k, v in shape.items():
        setattr(args, k, v)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"what": __doc__.split("\n\n")[0].replace("\n", " "), "shape": shape,
              "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
              "torch": torch.__version__, "cuda": torch.version.cuda,
              "date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/gpu/llama_steps.py --trace",
              "steps": []}
    for mode in ("eager", "compiled"):
        for mbs in (1, 2):
            result = run(args, mode, mbs, args.out)
            print(json.dumps({k: v for k, v in result.items() if k != "walls"}), flush=True)
            record["steps"].append(result)
            (args.out / "llama_steps.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()

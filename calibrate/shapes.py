"""What to measure: the general shape grids and the shapes of one scenario's layer.

The grids are sized for the device and the mode: ``quick`` on a 2-core CPU must finish the
whole calibration in about two minutes, so its largest GEMM is 2048^3 (about 0.25 s fp32).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product


@dataclass
class KernelPlan:
    gemms: list[tuple[str, int, int, int]] = field(default_factory=list)   # (op, m, n, k)
    attention: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # b,h,kvh,s,d
    rowwise: list[tuple[int, int]] = field(default_factory=list)   # (rows, cols): norms, acts
    softmax: list[tuple[int, int]] = field(default_factory=list)   # (rows, cols)
    embedding: list[tuple[int, int, int]] = field(default_factory=list)  # tokens, vocab, hidden
    cross_entropy: list[tuple[int, int]] = field(default_factory=list)   # tokens, vocab
    notes: dict = field(default_factory=dict)

    def extend(self, other: "KernelPlan") -> None:
        for name in ("gemms", "attention", "rowwise", "softmax", "embedding", "cross_entropy"):
            mine = getattr(self, name)
            mine.extend(x for x in getattr(other, name) if x not in mine)
        self.notes.update(other.notes)


def default_plan(device: str, quick: bool) -> KernelPlan:
    if device == "cuda":
        if quick:
            ms, nks, squares = (512, 4096), (1024, 4096), (1024, 4096, 8192)
        else:
            ms, nks = (256, 1024, 4096, 16384), (512, 2048, 8192, 16384)
            squares = (128, 512, 2048, 8192, 16384)
    else:
        if quick:
            ms, nks, squares = (128, 512, 2048), (256, 1024), (64, 256, 1024, 2048)
        else:
            ms, nks, squares = (128, 512, 2048, 8192), (256, 1024, 4096), (64, 256, 1024, 2048, 4096)
    grid = {(m, n, k) for m, n, k in product(ms, nks, nks)} | {(s, s, s) for s in squares}
    plan = KernelPlan(gemms=[("gemm", m, n, k) for m, n, k in sorted(grid, key=lambda t: t[0] * t[1] * t[2])])

    if device == "cuda":
        att = [(4, 16, 1024, 64), (2, 32, 2048, 128)] + ([] if quick else [(1, 32, 4096, 128), (1, 64, 8192, 128)])
        rows = [(1024, 1024), (4096, 4096), (8192, 8192)] + ([] if quick else [(16384, 12288), (16384, 32768)])
        emb = [(4096, 32000, 4096)] + ([] if quick else [(16384, 128256, 8192)])
        ce = [(4096, 32000)] + ([] if quick else [(16384, 64128), (8192, 128256)])
    else:
        att = [(1, 4, 256, 64), (1, 8, 512, 64), (2, 8, 1024, 64)] + ([] if quick else [(1, 16, 2048, 128)])
        rows = [(128, 256), (512, 1024), (2048, 1024), (2048, 4096)] + ([] if quick else [(8192, 4096), (8192, 12288)])
        emb = [(512, 8192, 512), (2048, 32000, 1024)] + ([] if quick else [(8192, 51200, 2048)])
        ce = [(512, 8192), (1024, 16384)] + ([] if quick else [(4096, 51200)])
    plan.attention = [(b, h, h, s, d) for b, h, s, d in att]
    plan.rowwise = list(rows)
    plan.softmax = list(rows)
    plan.embedding = emb
    plan.cross_entropy = ce
    return plan


def scenario_plan(scenario) -> KernelPlan:
    """The GEMMs and other kernels of one transformer layer of ``scenario`` at its tp."""
    m, t = scenario.model, scenario.tp
    b, s, h = scenario.training.micro_batch, m.seq_len, m.hidden
    hd, heads, kvh = m.head_dim, m.heads, m.num_kv_heads
    tokens = b * s
    swiglu = m.activation == "swiglu"
    gemms = [
        ("gemm.qkv", tokens, (heads + 2 * kvh) * hd // t, h),
        ("gemm.attn_out", tokens, h, heads * hd // t),
        ("gemm.mlp_up", tokens, m.ffn // t, h),
        ("gemm.mlp_down", tokens, h, m.ffn // t),
        ("gemm.lm_head", tokens, m.vocab // t, h),
    ]
    layer = {"gemm.qkv": 1, "gemm.attn_out": 1, "gemm.mlp_up": 2 if swiglu else 1, "gemm.mlp_down": 1}
    plan = KernelPlan(
        gemms=gemms,
        attention=[(b, heads // t, kvh // t, s, hd)],
        rowwise=[(tokens, h), (tokens, m.ffn // t)],
        softmax=[(b * heads // t * s, s)],
        embedding=[(tokens, m.vocab // t, h)],
        cross_entropy=[(tokens, m.vocab // t)],
        notes={"scenario": getattr(scenario, "name", None), "scenario_tp": t,
               "scenario_layer_gemms_per_layer": layer,
               "scenario_note": "mlp_up is measured once; a swiglu layer runs it twice (up and gate)"
                                if swiglu else ""},
    )
    return plan

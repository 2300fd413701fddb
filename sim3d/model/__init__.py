"""WHAT each rank computes and holds: transformer ops (FLOPs, bytes, collectives), FLOP
totals for MFU/HFU, and the per pipeline-rank memory model. No torch, no simpy."""

from .flops import (forward_flops, hardware_flops_per_step, head_forward_flops, layer_forward_flops,
                    model_flops_per_step, recompute_flops, stage_flops, train_flops)
from .memory import (GIB, MemoryReport, RankMemory, fits_in_memory, layer_activation_bytes,
                     layer_working_bytes, memory_per_rank, memory_report, peak_memory_gib, stage_activation_bytes)
from .params import model_params, stage_params
from .ops import Dims, Op, embedding_ops, head_ops, is_moe_layer, layer_ops, stage_layer_range, stage_ops

__all__ = [
    "Op", "Dims", "layer_ops", "embedding_ops", "head_ops", "stage_ops", "is_moe_layer",
    "stage_layer_range", "layer_forward_flops", "head_forward_flops", "model_flops_per_step",
    "hardware_flops_per_step", "stage_flops", "forward_flops", "train_flops", "recompute_flops",
    "GIB", "RankMemory", "MemoryReport", "memory_per_rank", "memory_report", "fits_in_memory",
    "peak_memory_gib", "layer_activation_bytes", "layer_working_bytes", "stage_activation_bytes",
    "stage_params", "model_params",
]

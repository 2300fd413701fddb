"""GPU presets: one record per GPU with every fact sim3d reads of it, each with its source.

Units: TFLOP/s dense (no structured sparsity), HBM capacity in GiB as marketed in GB
rounded to the physical stack size, HBM bandwidth in TB/s (1e12 B/s), link speeds in
Gbit/s per GPU per direction (the scenario's `intra_node.gbps` / `inter_node.nic_gbps`).

A preset is one `GpuSpec` record: its datasheet, its compute-model facts, the attention kernels
with figures for it, its architecture, its NVLink domain and the names it goes by. Nothing
else in sim3d branches on a GPU's name, so a new preset is one record (`register_preset`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields, replace

# Which published fused-attention figures price a GPU's kernels (costs/compute.py): "hopper"
# (cuDNN on H100, FlashAttention-3 paper) or "ampere" (FlashAttention-2 on A100).
ATTENTION_FAMILIES = ("hopper", "ampere")


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bf16_tflops: float | None  # None: no bf16 tensor cores (V100)
    fp16_tflops: float
    fp8_tflops: float | None  # None: no fp8 tensor cores
    fp32_tflops: float  # plain FP32 (non-tensor-core) peak; fp32 training falls back to TF32 in practice
    tf32_tflops: float
    hbm_gib: float
    hbm_tbps: float
    nvlink_gbps: float  # per GPU, per direction, Gbit/s
    nic_gbps: float  # default NIC line rate, Gbit/s
    nics_per_node: int
    gpus_per_node: int
    sms: int  # streaming multiprocessors: the unit of GEMM wave quantization and of SMs lent to comm kernels
    # Measured NCCL bus bandwidth inside one node (GB/s, large messages, all GPUs of the
    # node): ring, and NVLink SHARP (NVLS, all-reduce only, NVSwitch 3+) where it exists.
    nvlink_ring_busbw: float
    nvlink_nvls_busbw: float | None = None
    # Per-GPU facts of the compute model (costs/compute.py), cited beside each record below. "16"
    # is the 16-bit tensor-core rate (bf16, or fp16 where there is no bf16); fp8 facts exist
    # exactly when fp8_tflops does. Required: a preset without one is refused by `check_preset`.
    gemm_burst_efficiency_16: float | None = field(default=None, kw_only=True)
    gemm_burst_efficiency_fp8: float | None = field(default=None, kw_only=True)
    sustained_clock_16: float | None = field(default=None, kw_only=True)
    sustained_clock_fp8: float | None = field(default=None, kw_only=True)
    attention_family: str | None = field(default=None, kw_only=True)  # one of ATTENTION_FAMILIES
    # CTA tile of its GEMM library (costs/gemm.py); None: cuBLAS's 128x256. (1, 1): no tile or
    # wave quantization, e.g. a CPU BLAS fitted by costs/fit.py
    gemm_tile: tuple[int, int] | None = field(default=None, kw_only=True)
    # The fused-attention kernels `training.kernels.attention` may name on it besides the GPU's
    # own (`default`) and Triton's: those with figures (costs/attention.py). FlashAttention-2 runs
    # on Ampere, Ada and Hopper (Dao-AILab/flash-attention README), FlashAttention-3 on Hopper
    # alone (its README: H100 / H800), cuDNN's fused attention is Hopper's and Blackwell's default
    # (the H100 profile).
    attention_kernels_with_figures: tuple[str, ...] = field(default=(), kw_only=True)
    # CUDA compute capability (NVIDIA's CUDA GPUs list, developer.nvidia.com/cuda-gpus): its
    # architecture, which decides the kernels it runs and the era of the runs published on it.
    # None: not a CUDA GPU (a device fitted by costs/fit.py).
    compute_capability: float | None = field(default=None, kw_only=True)
    # Nodes that one NVLink switch system joins as the maker ships them: 1 for a server, more
    # for a rack-scale system (the most a scenario's cluster.intra_node.domain_nodes is given
    # when a published run is read, validation/published_row.py).
    nvlink_domain_nodes: int = field(default=1, kw_only=True)
    # How free text names it (a table's gpu cell, nvidia-smi's device name, a system's
    # description): marks found anywhere in the text, in any case, with -, _ and spaces alike
    # (`preset_named_in`).
    aliases: tuple[str, ...] = field(default=(), kw_only=True)
    # Power (W): the board's rated limit, at which the sustained_clock figures were found; what
    # it draws with its clocks up and no kernel running; and the limit a scenario sets below the
    # rated one (`cluster.power_limit_w`, as `nvidia-smi -pl` does). None: not known / not set.
    tdp_w: float | None = field(default=None, kw_only=True)
    idle_w: float | None = field(default=None, kw_only=True)
    power_limit_w: float | None = field(default=None, kw_only=True)

    def gemm_burst_efficiency(self, precision: str) -> float:
        return self.gemm_burst_efficiency_fp8 if precision == "fp8" else self.gemm_burst_efficiency_16

    def sustained_clock(self, precision: str) -> float:
        at_rated_limit = self.sustained_clock_fp8 if precision == "fp8" else self.sustained_clock_16
        return at_rated_limit * self.power_clock_factor()

    def power_clock_factor(self) -> float:
        """The tensor-core clock under `power_limit_w` over the clock at the rated limit.

        A board at its limit runs the clock at which it draws the limit. What the clock moves is
        the dynamic power, C V^2 f, over the idle draw; across the DVFS range the voltage rises
        in proportion to the clock (CMOS switching: the gate delay falls as 1/V), so the dynamic
        power goes as f^3 and the clock as the cube root of the power left above idle. Memory
        clocks do not move (the soaks' nvidia-smi samples hold clocks.mem fixed), so only
        tensor-core kernels slow (costs/gemm.py, costs/attention.py)."""
        if self.power_limit_w is None or self.power_limit_w >= self.tdp_w:
            return 1.0
        return ((self.power_limit_w - self.idle_w) / (self.tdp_w - self.idle_w)) ** (1 / 3)

    def peak_tflops(self, precision: str) -> float:
        peak = {
            "bf16": self.bf16_tflops,
            "fp16": self.fp16_tflops,
            "fp8": self.fp8_tflops,
            "fp32": self.tf32_tflops,  # Megatron/torch run fp32 matmuls on TF32 tensor cores
        }[precision]
        if peak is None:
            raise ValueError(f"{self.name} has no {precision} tensor cores")
        return peak

    def predates(self, compute_capability: float) -> bool:
        """Whether it is a CUDA GPU of an architecture older than `compute_capability`."""
        return self.compute_capability is not None and self.compute_capability < compute_capability


# ---- how the compute-model facts of the records below were found -------------------------------
# gemm_burst_efficiency: fraction of the dense tensor-core peak that torch.matmul (cuBLAS)
# reaches on the best shape of a brute-force search ("maximum achievable matmul FLOPS"):
# stas00/ml-engineering, compute/accelerator/README.md, MAMF table (mamf-finder.py); each
# record gives its figures.
#
# sustained_clock: MAMF is a burst figure: the kernels run for well under a second. A training
# step keeps the tensor cores busy for seconds, the board reaches its power limit, and the SM
# clock drops (1980 -> ~1390 MHz at 700 W, throttle reason "SW power cap"). Measured here on an
# H100 SXM5 (calibrate/sustained.py; calibrate/profiles/h100-sxm5-80gb-study/, 2026-11-22):
# random-data bf16 8192^3 GEMMs sustain 687.6 TFLOP/s (median of the windows after 10 s, two
# runs: 685, 688); FP8 E4M3 8192^3 sustains 1238.8 (torch._scaled_mm's default split
# accumulator, as Transformer Engine runs its gradient GEMMs; TE's forward GEMMs accumulate fast,
# not measured here, so an FP8 forward is priced as conservatively as its backward). 8192^3 is
# not MAMF's best shape: the GEMM model (costs/gemm.py) prices its tiles, waves and k-loop at
# _S_8192 of the best shape's rate (_S_8192_FP8 in FP8), so the best shape sustains
# 687.6 / _S_8192 (0.728 of the peak) and the clock factor is that over MAMF's burst. A second
# soak, 8192x7168x8192 at 701.0 TFLOP/s, gives 0.742 through the same model (2% apart).
# tests/test_sustained_clock.py recomputes both _S_ from the model. Applied to every tensor-core
# kernel (GEMMs and fused attention); memory-bound
# kernels keep their rate (the memory clock did not move). Assumption: the GEMMs of a step run at
# this soak rate. A step also runs memory-bound kernels, during which the board draws less, so
# the clock a layer holds is higher (1500-1620 MHz in layers.json's hot runs, at 683-690 W); but
# GEMM throughput follows the clock weakly once power-limited (MAMF's burst at 1980 MHz is
# only 10% over the best shape's soak rate at ~1390 MHz), so the soak rate is conservative by
# about 3% (linear in the clock between the two). Each record says how its own was found.
_S_8192, _S_8192_FP8 = 0.954779, 0.940312  # costs/gemm.py gemm_shape_efficiency(8192, 8192, 8192, 132)
_H100_SUSTAINED_16 = 687.6 / (794.5 * _S_8192)
_H100_SUSTAINED_FP8 = 1238.8 / (1402.6 * _S_8192_FP8)
# B200 (not measured here): ml-engineering's maximum *sustainable* matmul rate (MSMF,
# mamf-finder.py after a thermal soak) is 1429 TFLOP/s bf16 against its 1745.0 burst, both the
# best shape of a search; the card draws its 1000 W limit and the SM clock settles near 1450 MHz
# from its 1965 MHz boost (stas00/ml-engineering, its counting-FLOPs video script, which reads
# the README's MAMF/MSMF table). Assumed, no measurement found: FP8 drops with the same clock as
# bf16.
_B200_SUSTAINED = 1429.0 / 1745.0
# A100 SXM (not measured here): the rate a random-data 16-bit GEMM holds when it runs back to
# back for seconds, as the H100's soak above. The one such timing found: Mu Li's
# micro-benchmark times `a @ b` on torch.randn fp16 8192^3 matrices with torch.utils.benchmark's
# blocked_autorange over at least 3 s of back-to-back calls, and its README table gives 230
# TFLOP/s for an "A100" of 80 GB at 2,039 GB/s, the SXM part's figures
# (mli/transformers-benchmarks @3370b2b, README.md and micro_bench.ipynb, whose stored outputs
# are another GPU's); the board's power limit and the software are not stated. Through the same
# GEMM model (costs/gemm.py prices 8192^3 at _S_8192_A100 of the best shape's rate) over MAMF's
# 271.2 burst. Short timings of the shape read higher: Horace He's 257-258 TFLOP/s on random
# bf16 data at the 400 W limit ("Strangely, Matrix Multiplications on GPUs Run Faster When Given
# 'Predictable' Data!", thonking.ai, 2024) is 3% under MAMF's burst for it (295 on zeros: the
# limiter already cutting the clock for random data). Why the two differ by 11% (the loop's
# length, fp16 against bf16, their cuBLAS, their boards) is not known; the H100's own soak fell
# 4% from its burst within a second, so the loop's length alone would not explain it.
_S_8192_A100 = 0.982696  # costs/gemm.py gemm_shape_efficiency(8192, 8192, 8192, 108)
_A100_SUSTAINED = 230.0 / (271.2 * _S_8192_A100)

# Idle draw of a Hopper board with its CUDA context up and clocks at 1980 MHz, before the first
# GEMM: the first nvidia-smi sample of each soak, 105.8-133.9 W on the H100, 128.1-131.1 W on
# the H200 (calibrate/profiles/*-study/sustained_*.json, median 129 W). Boards not measured here
# take the H100's share of its 700 W limit (assumed: idle scales with the board).
_HOPPER_IDLE_W = 129.0
_IDLE_SHARE = _HOPPER_IDLE_W / 700.0


_SHIPPED = (
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web):
    # BF16/FP16 312 TF, TF32 156 TF, FP32 19.5 TF; 40GB HBM2 at 1,555 GB/s; 108 SMs (NVIDIA
    # A100 whitepaper); NVLink 600 GB/s bidirectional = 300 GB/s = 2400 Gb/s per direction;
    # max TDP 400 W (SXM).
    # DGX A100 datasheet: 8x ConnectX-6 200 Gb/s HDR InfiniBand for compute.
    # Ring busbw ~230 GB/s on 8 A100 (NCCL maintainer, NVIDIA/nccl-tests#149; validation/nccl.csv).
    # MAMF: A100 SXM bf16 271.2 of 312; sustained clock from random-data 8192^3 GEMMs run back to
    # back for 3 s (_A100_SUSTAINED, above).
    # Attention: FlashAttention-2's figures on A100; cuDNN on an A100 runs, but no figures for it
    # are known here. Named by its size beside the part's name (an A100 without one is the 80GB).
    GpuSpec("a100-40gb", 312.0, 312.0, None, 19.5, 156.0, 40.0, 1.555, 2400.0, 200.0, 8, 8, 108, 230.0,
            gemm_burst_efficiency_16=0.869, sustained_clock_16=_A100_SUSTAINED, attention_family="ampere",
            attention_kernels_with_figures=("fa2",), compute_capability=8.0, tdp_w=400.0, idle_w=400.0 * _IDLE_SHARE,
            aliases=("A100-SXM4-40GB", "A100 SXM 40GB", "A100 40GB", "A100 40 GB")),
    # Same datasheet, A100 80GB SXM: HBM2e at 2,039 GB/s. Compute facts as the 40GB part's (the
    # same GA100). The A100 whose size is not written beside its name.
    GpuSpec("a100-80gb", 312.0, 312.0, None, 19.5, 156.0, 80.0, 2.039, 2400.0, 200.0, 8, 8, 108, 230.0,
            gemm_burst_efficiency_16=0.869, sustained_clock_16=_A100_SUSTAINED, attention_family="ampere",
            attention_kernels_with_figures=("fa2",), compute_capability=8.0, tdp_w=400.0, idle_w=400.0 * _IDLE_SHARE,
            aliases=("A100",)),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): BF16 1,979 TF and FP8 3,958 TF
    # *with sparsity*, i.e. 989.4 / 1978.9 dense; TF32 494.7 dense; FP32 67 TF; 80GB HBM3 at
    # 3.35 TB/s; 132 SMs (H100 SXM5, NVIDIA H100 whitepaper); NVLink 900 GB/s bidirectional
    # = 3600 Gb/s per direction; max TDP up to 700 W (configurable). DGX H100 datasheet: 8x
    # ConnectX-7 400 Gb/s (NDR) for compute.
    # busbw: ring ~370 GB/s, NVLS ~480 GB/s on 8 GPUs (sjeaugey, NVIDIA/nccl-tests#212; nccl#1455).
    # MAMF: H100 SXM bf16 794.5 of 989, fp8 e4m3 1402.6 of 1979; sustained clock measured here
    # (above). Attention: cuDNN (the H100 profile), FlashAttention-2 and -3 (FA3 paper).
    GpuSpec("h100-sxm", 989.4, 989.4, 1978.9, 67.0, 494.7, 80.0, 3.35, 3600.0, 400.0, 8, 8, 132, 370.0, 480.0,
            gemm_burst_efficiency_16=0.803, gemm_burst_efficiency_fp8=0.709,
            sustained_clock_16=_H100_SUSTAINED_16, sustained_clock_fp8=_H100_SUSTAINED_FP8,
            attention_family="hopper", attention_kernels_with_figures=("cudnn", "fa2", "fa3"),
            compute_capability=9.0, tdp_w=700.0, idle_w=_HOPPER_IDLE_W, aliases=("H100",)),
    # NVIDIA H200 datasheet (SXM): same Hopper tensor throughput and SMs as H100 SXM; 141GB
    # HBM3e at 4.8 TB/s; NVLink 900 GB/s; max TDP up to 700 W (configurable). DGX H200: 8x
    # ConnectX-7 400 Gb/s. NVLS all-reduce
    # peak 475 GB/s measured (NVIDIA/nccl-tests#272), ring as H100.
    # MAMF: H200 fp8 1453.4 of 1979 (bf16 taken as H100's: same SMs and clocks). Sustained clock
    # measured the same way (calibrate/profiles/h200-study/): 658.6 bf16 and 1192.0 FP8 on
    # 8192^3, over the 794.5 burst taken for it and MAMF's 1453.4. Attention: as H100's.
    GpuSpec("h200", 989.4, 989.4, 1978.9, 67.0, 494.7, 141.0, 4.8, 3600.0, 400.0, 8, 8, 132, 370.0, 475.0,
            gemm_burst_efficiency_16=0.803, gemm_burst_efficiency_fp8=0.734,
            sustained_clock_16=658.6 / (794.5 * _S_8192), sustained_clock_fp8=1192.0 / (1453.4 * _S_8192_FP8),
            attention_family="hopper", attention_kernels_with_figures=("cudnn", "fa2", "fa3"),
            compute_capability=9.0, tdp_w=700.0, idle_w=_HOPPER_IDLE_W, aliases=("H200",)),
    # NVIDIA DGX B200 / HGX B200 datasheet: per GPU FP8 4.5 PF and BF16 2.25 PF dense
    # (9 / 4.5 PF quoted with sparsity), TF32 1.1 PF dense, FP32 75 TF; 180GB HBM3e at
    # 8 TB/s; 148 SMs; NVLink 5 1.8 TB/s bidirectional = 7200 Gb/s per direction;
    # DGX B200: 8x ConnectX-7 400 Gb/s. No public busbw measurement found: the H100's measured
    # fractions of the line rate (370/450 ring, 480/450*... NVLS 480/450) are assumed.
    # MAMF: B200 SXM bf16 1745.0 of 2250, fp8 3432.5 of 4500 (torch 2.7.1+cu128). XLA's default
    # matmul table agrees for Blackwell (tensorflow/tensorflow third_party/xla/xla/backends/gpu/
    # cost_model/matmul_interpolator_data.h @a305421, key sm_100: bf16 4 x 4096^3 at 1670
    # TFLOP/s). Sustained clock: _B200_SUSTAINED (above). Attention: Blackwell keeps Hopper's
    # fractions of the peak; cuDNN alone (FlashAttention-2 on Blackwell runs, but no figures for
    # it are known here; FlashAttention-3 is Hopper's).
    GpuSpec("b200", 2250.0, 2250.0, 4500.0, 75.0, 1100.0, 180.0, 8.0, 7200.0, 400.0, 8, 8, 148, 740.0, 960.0,
            gemm_burst_efficiency_16=1745.0 / 2250.0, gemm_burst_efficiency_fp8=3432.5 / 4500.0,
            sustained_clock_16=_B200_SUSTAINED, sustained_clock_fp8=_B200_SUSTAINED,
            attention_family="hopper", attention_kernels_with_figures=("cudnn",), compute_capability=10.0,
            tdp_w=1000.0, idle_w=1000.0 * _IDLE_SHARE, aliases=("B200",)),
    # GB200 (a Blackwell GPU of the GB200 superchip, at up to 1,200 W): NVIDIA's GB200 NVL72
    # specification, per GPU: FP16/BF16 5 PF, FP8 10 PF, TF32 2.5 PF with sparsity (2.5 / 5 /
    # 1.25 PF dense), FP32 80 TF, 186 GB HBM3E at 8 TB/s, NVLink 5 at 1.8 TB/s. A compute tray
    # holds 2 superchips = 4 GPUs, one 400 Gb/s NIC per GPU; its NVLink domain spans 18 trays
    # (the cluster's intra_node.domain_nodes): a GB200 NVL72 rack is 18 compute trays of 4 GPUs
    # on one NVLink switch system. busbw as the B200's.
    # MAMF: GB200 bf16 1822.0 of 2500, fp8 3615.6 of 5000 (torch 2.10.0.dev20250916+cu130).
    # Sustained clock assumed, no measurement found: the same die at a 1200 W limit takes the
    # B200's ratio. Attention: as the B200's.
    GpuSpec("gb200", 2500.0, 2500.0, 5000.0, 80.0, 1250.0, 186.0, 8.0, 7200.0, 400.0, 4, 4, 148, 740.0, 960.0,
            gemm_burst_efficiency_16=1822.0 / 2500.0, gemm_burst_efficiency_fp8=3615.6 / 5000.0,
            sustained_clock_16=_B200_SUSTAINED, sustained_clock_fp8=_B200_SUSTAINED,
            attention_family="hopper", attention_kernels_with_figures=("cudnn",), compute_capability=10.0,
            nvlink_domain_nodes=18, tdp_w=1200.0, idle_w=1200.0 * _IDLE_SHARE, aliases=("GB200",)),
    # H800 SXM (the export Hopper, DeepSeek-V3's cluster): H100 SXM compute, HBM and SMs with
    # NVLink cut to 400 GB/s bidirectional = 1600 Gb/s per direction (validation/hardware.csv;
    # DeepSeek-V3 report arXiv:2412.19437 sec. 3.2.2: ~160 GB/s usable NVLink, 50 GB/s IB per GPU,
    # i.e. one 400 Gb/s NIC per GPU). busbw from the H100's measured fractions of the line
    # rate (ring 370/450, NVLS 480/450): 164 and 213 GB/s; a user measured 215 GB/s
    # (NVIDIA/nccl#1374, checked by nccl_check).
    # Compute facts as the H100's: the same GH100 die, SMs and clocks, and the same 700 W limit.
    GpuSpec("h800", 989.4, 989.4, 1978.9, 67.0, 494.7, 80.0, 3.35, 1600.0, 400.0, 8, 8, 132,
            200.0 * 370.0 / 450.0, 200.0 * 480.0 / 450.0,
            gemm_burst_efficiency_16=0.803, gemm_burst_efficiency_fp8=0.709,
            sustained_clock_16=_H100_SUSTAINED_16, sustained_clock_fp8=_H100_SUSTAINED_FP8,
            attention_family="hopper", attention_kernels_with_figures=("cudnn", "fa2", "fa3"),
            compute_capability=9.0, tdp_w=700.0, idle_w=_HOPPER_IDLE_W, aliases=("H800",)),
    # NVIDIA V100 SXM3 32GB in a DGX-2 (the 2019-20 Megatron runs): FP16 tensor 125 TF, no
    # BF16 and no FP8; FP32 15.7 TF (V100 datasheet); 80 SMs; HBM2 900 GB/s; 16 GPUs on
    # NVSwitch at 300 GB/s bidirectional = 1200 Gb/s per direction; 8x EDR 100 Gb/s NICs per
    # 16 GPUs (DGX-2 datasheet; validation/hardware.csv). No busbw measurement found: the
    # A100's measured fraction of the line rate (230/300) is assumed.
    # No public MAMF found: 0.75 assumed; sustained clock not measured, no derating applied (1.0).
    # Attention: no table of its own, it takes Hopper's fractions; no fused kernel with figures
    # (FlashAttention-2 needs sm80+).
    GpuSpec("v100", None, 125.0, None, 15.7, 125.0, 32.0, 0.9, 1200.0, 100.0, 8, 16, 80, 115.0,
            gemm_burst_efficiency_16=0.75, sustained_clock_16=1.0, attention_family="hopper",
            compute_capability=7.0, aliases=("V100",)),
)


def missing_facts(spec: GpuSpec) -> list[str]:
    """The record's fields the models need that it leaves empty."""
    needed = ["gemm_burst_efficiency_16", "sustained_clock_16", "attention_family"]
    if spec.fp8_tflops is not None:
        needed += ["gemm_burst_efficiency_fp8", "sustained_clock_fp8"]
    return [name for name in needed if getattr(spec, name) is None]


def power_limit_problem(spec: GpuSpec) -> str | None:
    """Why the record's power_limit_w cannot be priced, or None."""
    if spec.power_limit_w is None:
        return None
    if spec.tdp_w is None or spec.idle_w is None:
        return (f"{spec.name} records no rated power limit (tdp_w) and idle draw (idle_w), so a power limit "
                "cannot be priced on it")
    if not spec.idle_w < spec.power_limit_w <= spec.tdp_w:
        return (f"{spec.power_limit_w:g} W is outside what {spec.name} runs at: above its idle draw "
                f"({spec.idle_w:.0f} W) and at most its rated limit ({spec.tdp_w:g} W); a higher limit than the "
                "rated one is another board (a preset of its own)")
    return None


def check_preset(spec: GpuSpec) -> GpuSpec:
    """Refuse a record that lacks a fact (never a silent default), naming preset and fields."""
    missing = missing_facts(spec)
    if missing:
        raise ValueError(f"GPU preset {spec.name!r} lacks {', '.join(missing)}")
    if problem := power_limit_problem(spec):
        raise ValueError(f"GPU preset {spec.name!r}: {problem}")
    if spec.attention_family not in ATTENTION_FAMILIES:
        raise ValueError(f"GPU preset {spec.name!r}: attention_family {spec.attention_family!r} is not one of "
                         f"{', '.join(ATTENTION_FAMILIES)}")
    return spec


PRESETS: dict[str, GpuSpec] = {spec.name: check_preset(spec) for spec in _SHIPPED}


def register_preset(spec: GpuSpec) -> GpuSpec:
    """Add (or replace) a preset: scenarios, kernel prices and free-text names then find it."""
    PRESETS[spec.name] = check_preset(spec)
    return spec


GPU_FIELDS = tuple(f.name for f in fields(GpuSpec) if f.name != "name")


def attention_kernels(gpu_name: str) -> tuple[str, ...]:
    """What `training.kernels.attention` may name on a preset: its own, Triton's, and those with figures."""
    spec = PRESETS.get(gpu_name)
    return ("default", "triton", *(spec.attention_kernels_with_figures if spec else ()))


def suggest(name: str, choices) -> str:
    """' (did you mean X?)' for the likeliest intended choice, or ''."""
    choices = list(choices)
    folded = {c.lower(): c for c in choices}
    name = name.lower()
    close = ([folded[c] for c in folded if c.startswith(name)]
             or [folded[c] for c in difflib.get_close_matches(name, list(folded), n=1, cutoff=0.5)])
    return f" (did you mean {close[0]}?)" if close else ""


# Names that hold a preset's alias but are no preset: PCIe cards (other clocks, power, HBM, no
# NVSwitch) and the GH200 Grace Hopper superchip (an H100 with 96-144 GB beside a CPU).
_NAMES_OF_NO_PRESET = ("PCIE", "GH200")
# "NVL" with no rack size after it: beside a server GPU a PCIe pair (H100 NVL), beside a
# rack-scale one the rack (GB200 NVL)
_BARE_NVL = re.compile(r"NVL(?![A-Z\d])")


def _spelling(text: str) -> str:
    """`text` as aliases are compared: upper case, each run of -, _ and white space one space."""
    return re.sub(r"[-_\s]+", " ", text.upper())


def preset_named_in(text: str) -> str | None:
    """The preset a free-text GPU or system name refers to ("H100-SXM5-80GB", "8x A100-SXM4-40GB
    + 4x HDR", "DGX B200"), or None: the preset whose alias comes first in the text, the longest
    where several start there ("GB200" holds "B200", "A100 40GB" holds "A100"), the one registered
    first where presets share an alias (a record fitted from a preset keeps its aliases)."""
    text = _spelling(text)
    if any(name in text for name in _NAMES_OF_NO_PRESET):
        return None
    found = [(text.find(alias), -len(alias), order, spec.name) for order, spec in enumerate(PRESETS.values())
             for alias in map(_spelling, spec.aliases) if alias in text]
    if not found:
        return None
    name = min(found)[-1]
    if _BARE_NVL.search(text) and PRESETS[name].nvlink_domain_nodes == 1:
        return None
    return name


def gpu_preset(name: str, **overrides) -> GpuSpec:
    if name not in PRESETS:
        raise KeyError(f"unknown GPU preset {name!r}{suggest(name, PRESETS)}; known: {', '.join(PRESETS)}")
    return check_preset(replace(PRESETS[name], **{k: v for k, v in overrides.items() if v is not None}))

"""A profile and the traced step from PyTorch profiler traces (costs/kineto.py,
costs/trace_profile.py): kernel names into op kinds, the profile the project's loader reads and
prices from, the step as it ran, and every trace sim3d must refuse.

Fixtures (tests/fixtures/traces/README.md): a real H200 trace, and two hand-written H100 ranks
whose figures are worked out by hand in make_two_rank_trace.py's docstring."""
from __future__ import annotations

import gzip
import hashlib
import json
import time
import tracemalloc
from pathlib import Path

import pytest

import sim3d
from sim3d.costs.kineto import KINDS, classify, read_trace, read_traces
from sim3d.costs.profile import Profile
from sim3d.costs.trace_profile import step_truth, write_profile
from sim3d.errors import ScenarioError
from sim3d.scenario.limits import WorkLimitExceeded

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "fixtures" / "traces"
H200 = TRACES / "h200_gpt_step.json.gz"
TWO_RANKS = [TRACES / "two_rank_rank0.json", TRACES / "two_rank_rank1.json.gz"]


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _rank0() -> dict:
    return json.loads(TWO_RANKS[0].read_text())


# (name, kind, detail, pass); names marked "real" are copied from a real trace (the H200 fixture,
# or HTA's tests/data: README.md), the others spelled as their library names its kernels.
KERNELS = [
    # GEMMs: cuBLAS on Volta, Ampere, Hopper, Blackwell; cuBLASLt's nvjet; CUTLASS 2 and 3; Triton
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
     "gemm", "", ""),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm", "", ""),
    ("sm100_xmma_gemm_bf16f16_bf16f16_bf16f32_tn_n_tilesize256x128x64_stage4_warpsize2x2x1", "gemm", "", ""),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm", "", ""),  # real
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "gemm", "", ""),
    ("volta_sgemm_64x64_nt", "gemm", "", ""),  # real
    ("ampere_sgemm_32x32_sliced1x4_tn", "gemm", "", ""),  # real
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4>(cutlass_80_tensorop_s1688gemm_256x64_"
     "16x4_tn_align4::Params)", "gemm", "", ""),  # real
    ("void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_"
     "warpspecialized_cooperative_epi_tma>(cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_"
     "align8_warpspecialized_cooperative_epi_tma::Params)", "gemm", "", ""),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>(cublasLt::"
     "cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, float "
     "const*, float*, void*, long, float*, int*)", "gemm", "", ""),  # real
    ("triton_tem_fused_mm_0", "gemm", "", ""),
    # fused attention, forward and backward
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
     "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
     "(pytorch_flash::Flash_fwd_params)", "attention", "flash", "fwd"),  # real
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, true>"
     "(Flash_fwd_params)", "attention", "flash", "fwd"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, "
     "false, false, cutlass::bfloat16_t> >(pytorch_flash::Flash_bwd_params)", "attention", "flash", "bwd"),  # real
    ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, "
     "false, cutlass::bfloat16_t> >(pytorch_flash::Flash_bwd_params)", "attention", "flash", "bwd"),  # real
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0",
     "attention", "cudnn", "fwd"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
     "attention", "cudnn", "bwd"),  # real
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*, void const*, void*, void*, unsigned int)",
     "attention", "cudnn", "bwd"),  # real
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "attention", "efficient", "fwd"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, "
     "cutlass::bfloat16_t, true, false, true, 64, 64, 64, false>::Params)", "attention", "efficient", "bwd"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
     "2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<176>, cute::C<128> > > > > >"
     "(flash::FlashAttnFwdSm90<> ::Params)", "attention", "fa3", "fwd"),
    ("_attn_fwd", "attention", "triton", "fwd"),
    ("_attn_bwd_dkdv", "attention", "triton", "bwd"),
    # NCCL collectives and point-to-point (NCCL 2.19+ and before)
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "collective", "all_reduce", ""),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "collective", "all_reduce", ""),  # real
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "collective", "all_gather", ""),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "collective", "reduce_scatter", ""),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "collective", "broadcast", ""),  # real
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "p2p", "send_recv", ""),  # real
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "p2p", "send_recv", ""),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "collective", "", ""),
    # optimizers
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
     "(at::native::ADAM_MODE)1, false>, double, double, double, double, double, double, bool, float const*, float const*>"
     "(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>)", "optimizer", "", ""),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float, float, float, float, float, float, "
     "float, float, adamMode_t, float, int>(long, int volatile*, TensorListMetadata<4>, AdamFunctor<float>, float, float, "
     "float, float, float, float, float, float, adamMode_t, float, int)", "optimizer", "", ""),  # real
    # memory-bound kernels
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
     "norm", "", ""),  # real
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float, 32u, 32u, 256u, "
     "false>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16*, "
     "c10::BFloat16*)", "norm", "", ""),  # real
    ("void transformer_engine::normalization::rmsnorm_fwd_tuned_kernel<transformer_engine::normalization::Kernel_traits<"
     "__nv_bfloat16, __nv_bfloat16, float, float, unsigned int, 8192u, 1u, 1u, 4u, 16u, transformer_engine::"
     "normalization::Kernel_traits_base<8192u, __nv_bfloat16, __nv_bfloat16, float, float, unsigned int, 128u> > >"
     "(transformer_engine::normalization::FwdParams)", "norm", "", ""),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*, "
     "cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
     "norm", "", ""),  # real
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
     "softmax", "", ""),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, "
     "int, int, bool const*, int, bool)", "softmax", "", ""),  # real
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, "
     "float const*, long const*, float const*, bool, long, long, long, long)", "loss", "", ""),  # real
    ("void at::native::(anonymous namespace)::compute_grad_weight<c10::BFloat16, long>(long const*, c10::BFloat16 const*, "
     "long const*, long, long, long const*, long const*, at::AccumulateType<c10::BFloat16, true>::type*)",
     "embedding", "", ""),  # real
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>"
     "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>)", "embedding", "", ""),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, "
     "at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)"
     "#1}>, unsigned int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<c10::BFloat16>)", "reduction", "", ""),  # real
    ("triton_red_fused__to_copy_mean_pow_1", "reduction", "", ""),
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0", "reduction", "", ""),  # real
    ("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortOnesweepKernel<at_cuda_detail::cub::detail::radix_sort"
     "::policy_hub<long, long, unsigned long>::Policy900, false, long, long, unsigned long, int, int>(int*, int*, "
     "unsigned long*, unsigned long const*, long*, long const*, long*, long const*, int, int, int)", "index", "", ""),  # real
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
     "unsigned int, 3, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>*)", "index", "", ""),  # real
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
     "(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "elementwise", "", ""),  # real
    ("void at::native::vectorized_elementwise_kernel<8, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
     "c10::basic_string_view<char>)::{lambda()#2}::operator()() const::{lambda()#10}::operator()() const::"
     "{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int)", "elementwise", "", ""),  # real
    ("triton_poi_fused_add_cos_sin_0", "elementwise", "", ""),  # real
    ("triton__0d1d2d3d4d5d", "elementwise", "", ""),  # real: Inductor before torch 2.1
    # convolutions, which the profile does not price but the breakdown counts as compute
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
     "tensor16x8x8_execute_kernel_cudnn_infer", "conv", "", ""),  # real
    ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "conv", "", ""),  # real
    ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4>"
     "(cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4::Params)", "conv", "", ""),  # real
]


@pytest.mark.parametrize("name,kind,detail,pass_", KERNELS, ids=[k[0][:60] for k in KERNELS])
def test_kernel_names_are_classified(name, kind, detail, pass_):
    assert classify(name) == (kind, detail, pass_)


def test_copies_and_fills_go_by_category_and_unknown_names_by_their_launching_op():
    assert classify("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy")[0] == "memcpy"
    assert classify("Memset (Device)", "gpu_memset")[0] == "memset"
    assert classify("my_vendor_gemm_v2", launcher="aten::mm")[0] == "gemm"
    assert classify("kernel0", launcher="aten::_scaled_dot_product_cudnn_attention_backward") == ("attention", "", "bwd")
    assert classify("my_vendor_fused_kernel_v2", launcher="myext::fused_thing")[0] == "unclassified"
    assert {k[1] for k in KERNELS} | {"memcpy", "memset", "unclassified"} == set(KINDS)


def test_two_rank_traces_are_read_with_their_ranks_devices_and_versions():
    ranks = read_traces(reversed(TWO_RANKS))
    assert [t.rank for t in ranks] == [0, 1] and ranks[1].path.endswith(".gz")
    for t in ranks:
        assert (t.device_name, t.cuda, t.nccl, t.world_size) == ("NVIDIA H100 80GB HBM3", "12.4", "2.21.5", 2)
        assert [s.name for s in t.steps] == ["ProfilerStep#5", "ProfilerStep#6"]
        assert t.sha256 == hashlib.sha256(Path(t.path).read_bytes()).hexdigest()  # of the file as it is
    # the only kernel no pattern knows: 20 us of 1759 us of GPU time per step on rank 0
    assert ranks[0].unclassified_share() == pytest.approx(20 / 1759)
    comms = [k for k in ranks[0].kernels if k.kind in ("collective", "p2p")]
    assert {(k.detail, k.comm.group_size) for k in comms} == {("all_reduce", 2), ("all_gather", 2), ("send_recv", 2)}
    # the all-gather kernel carries no arguments: its size comes from the record_param_comms that launched it
    assert {k.comm.out_nelems for k in comms if k.detail == "all_gather"} == {8388608}


def test_the_real_h200_trace_is_fully_classified():
    trace = read_trace(H200)
    assert trace.device_name == "NVIDIA H200" and trace.nccl == "2.28.9" and trace.cuda == "13.0"
    assert trace.unclassified_share() < 0.10
    kinds = {k.kind for k in trace.kernels}
    assert {"gemm", "attention", "optimizer", "norm", "softmax", "reduction", "elementwise", "memcpy", "memset"} <= kinds
    backends = {(k.detail, k.pass_) for k in trace.kernels if k.kind == "attention"}
    assert backends == {("flash", "fwd"), ("flash", "bwd"), ("cudnn", "fwd"), ("cudnn", "bwd")}


def test_profile_round_trip_prices_from_the_traces(tmp_path):
    out = tmp_path / "traced.csv"
    provenance = write_profile(read_traces(TWO_RANKS), out, command="sim3d calibrate --from-trace ...")
    assert json.loads(out.with_suffix(".json").read_text()) == json.loads(json.dumps(provenance))
    profile = Profile.load(out)
    # GEMMs: one call per shape per step, the same time every step and on both ranks
    assert profile.gemm_seconds(4096, 6144, 2048, "bf16", "fwd") == pytest.approx(200e-6)
    assert profile.gemm_seconds(4096, 6144, 2048, "bf16", "bwd") == pytest.approx(190e-6 + 210e-6)  # dgrad + wgrad
    assert profile.gemm_seconds(4096, 2048, 2048, "bf16", "bwd") is not None  # interpolated from the bwd rows
    # attention: the whole call (3 kernels in the backward), flash rows beside the default ones
    for op in ("attention", "attention.flash"):
        assert profile.attention_seconds(4, 16, 1024, 128, "bf16", "fwd", op) == pytest.approx(150e-6, rel=1e-5)
        assert profile.attention_seconds(4, 16, 1024, 128, "bf16", "bwd", op) == pytest.approx(300e-6, rel=1e-5)
    assert profile.attention_seconds(4, 16, 1024, 128, "bf16", "fwd", "attention.cudnn") is None
    assert profile.op_seconds("layernorm", 4096 * 2048, "bf16", "fwd") == pytest.approx(20e-6)
    # a collective's time is the rank that waited least: all-reduce 300 us on rank 0, 250 on rank 1
    assert profile.collective_seconds("all_reduce", 16777216 * 2, 2) == pytest.approx(250e-6)
    assert profile.collective_seconds("all_gather", 8388608 * 2, 2) == pytest.approx(50e-6)
    assert profile.collective_seconds("send_recv", 1048576 * 2, 2) == pytest.approx(30e-6)
    assert profile.describe("collective").startswith(f"profile {out} (NVIDIA H100 80GB HBM3, CUDA 12.4, NCCL 2.21.5")
    assert profile.device_mismatch("h100-sxm") is None
    price = sim3d.kernel_seconds("h100-sxm", "gemm", m=4096, n=6144, k=2048, profile=out)
    assert (price.source, price.seconds) == ("profile", pytest.approx(200e-6)) and str(out) in price.detail
    assert [t["rank"] for t in provenance["traces"]] == [0, 1]
    assert provenance["unclassified_share"] == pytest.approx(40 / (1759 + 1699))
    assert provenance["unclassified_kernels"][0]["name"] == "my_vendor_fused_kernel_v2"


@pytest.mark.parametrize("is_causal,rows,note", [("False", 0, "not causal"), (None, 2, "taken as causal")])
def test_attention_rows_are_causal_calls(tmp_path, is_causal, rows, note):
    doc = _rank0()
    for e in doc["traceEvents"]:
        if e["name"] == "aten::_flash_attention_forward":
            if is_causal is None:
                del e["args"]["Concrete Inputs"]
            else:
                e["args"]["Concrete Inputs"][8] = is_causal
    provenance = write_profile([read_trace(_write(tmp_path / "t.json", doc))], tmp_path / "t.csv")
    forward = Profile.load(tmp_path / "t.csv").table.query("kind == 'attention' and `pass` == 'fwd'")
    assert len(forward) == rows and any(note in why for why in provenance["left_out"])


def test_a_scenario_is_priced_from_the_traced_profile(tmp_path):
    out = tmp_path / "traced.csv"
    write_profile(read_traces(TWO_RANKS), out)
    scenario = dict(name="traced", model=dict(layers=2, hidden=2048, heads=16, vocab=8192, seq_len=1024),
                    parallel=dict(tp=1, pp=1, dp=2), training=dict(micro_batch=4, global_batch=8, precision="bf16"),
                    cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=2), costs=dict(profile=str(out)))
    sources = dict(sim3d.simulate(scenario).explain())
    for what in ("compute: GEMMs (16-bit)", "compute: attention (flash: fused kernel)", "compute: layernorm",
                 "dp collectives"):
        assert sources[what].startswith(f"profile {out}"), (what, sources[what])


def test_launches_whose_external_id_names_no_op_find_it_around_the_call(tmp_path):
    """Some traces give a launch its correlation id as External id (HTA's test traces of
    2022-23): the op that made the call is then the innermost one around it on its thread."""
    doc = _rank0()
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime"):
            e["args"]["External id"] = e["args"]["correlation"]
    relinked, original = read_trace(_write(tmp_path / "relinked.json", doc)), read_trace(TWO_RANKS[0])

    def launchers(trace):
        return [(k.name, trace.ops[k.launch_id].name) for k in trace.kernels]
    assert launchers(relinked) == launchers(original)
    write_profile([relinked], tmp_path / "relinked.csv")
    write_profile([original], tmp_path / "original.csv")
    assert (tmp_path / "relinked.csv").read_text() == (tmp_path / "original.csv").read_text()


def test_the_real_trace_makes_a_profile_of_its_own_shapes(tmp_path):
    out = tmp_path / "h200.csv"
    provenance = write_profile([read_trace(H200)], out)
    profile = Profile.load(out)
    assert profile.device_mismatch("h200") is None and provenance["unclassified_share"] < 0.10
    qkv = profile.gemm_seconds(4096, 3072, 1024, "bf16", "fwd")  # x [4096 x 1024] @ W_qkv^T [1024 x 3072]
    assert 20e-6 < qkv < 100e-6  # 25.8 GFLOP: 43 us at 600 TFLOP/s
    for op in ("attention.flash", "attention.cudnn"):
        assert 10e-6 < profile.attention_seconds(4, 8, 1024, 128, "bf16", "fwd", op) < 500e-6
    assert profile.op_seconds("layernorm", 4096 * 1024, "bf16", "bwd") is not None
    # its one-rank process group's collectives are device-to-device copies, no collective kernels
    assert not profile.has("collective")


def test_step_truth_of_the_two_rank_trace():
    truth = step_truth(read_traces(TWO_RANKS))
    assert truth.steps == ("ProfilerStep#5", "ProfilerStep#6") and truth.ranks == (0, 1)
    assert truth.step_s == pytest.approx((2010e-6, 1990e-6))  # the slower rank's span, step by step
    assert (truth.step_time_s, truth.spread) == (pytest.approx(2000e-6), pytest.approx(0.01))
    # rank 0: all-reduce 1100-1400 under compute until 1250, all-gather 1420-1480 and send 1700-1730 bare
    assert truth.comm_exposed_by_rank_s == {0: pytest.approx(240e-6), 1: pytest.approx(230e-6)}
    assert truth.comm_exposed_s == pytest.approx(240e-6) and truth.comm_s == pytest.approx(390e-6)
    assert truth.stream_busy_s["rank 0 gpu 0 stream 7"] == pytest.approx(1369e-6)
    assert truth.stream_busy_s["rank 1 gpu 0 stream 20"] == pytest.approx(330e-6)
    # rank 0's GPU, any stream: 5-9, 10-1250 and 1500-1625 on stream 7, then 1250-1400 of the
    # all-reduce, the all-gather 1420-1480 and the send 1700-1730: 1,609 us (rank 1's: 1,599)
    assert truth.gpu_busy_s == pytest.approx(1609e-6)
    # of each rank's own step window (rank 0: 2000 and 1950 us), the busiest rank's, then the mean
    assert truth.gpu_busy_share == pytest.approx((1609 / 2000 + 1609 / 1950) / 2)
    assert truth.kinds_s["gemm"] == pytest.approx(680e-6) and truth.kinds_s["attention"] == pytest.approx(450e-6)
    assert truth.unclassified_share == pytest.approx(40 / (1759 + 1699))
    assert json.loads(truth.to_json())["comm_exposed_s"] == pytest.approx(240e-6)


def test_step_truth_of_the_real_trace():
    truth = step_truth([read_trace(H200)])
    assert len(truth.steps) == 3 and 1e-3 < truth.step_time_s < 1.0 and truth.spread < 0.5
    busy = sum(truth.stream_busy_s.values())
    assert 0 < busy <= truth.step_time_s and truth.comm_exposed_s == 0.0
    assert max(truth.kinds_s, key=truth.kinds_s.get) == "gemm"


# ---------------------------------------------------------------------------- refused inputs
@pytest.mark.parametrize("doc,message", [
    ({"traceEvents": [{"name": "F0", "cat": "F", "ph": "X", "ts": 0, "dur": 5, "pid": 0, "tid": 0}],
      "displayTimeUnit": "ms"}, "another tool"),  # sim3d's own trace.json
    ([{"name": "op", "ph": "X", "ts": 0, "dur": 1, "pid": 0, "tid": 0}], "expected a JSON object"),  # Chrome's array form
    ({"schema": "nsys", "data": []}, "traceEvents"),
])
def test_another_profilers_json_is_refused(tmp_path, doc, message):
    with pytest.raises(ScenarioError, match=message):
        read_trace(_write(tmp_path / "other.json", doc))


def test_truncated_traces_are_refused(tmp_path):
    text = TWO_RANKS[0].read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(ScenarioError, match="not valid JSON.*cut short"):
        read_trace(cut)
    data = TWO_RANKS[1].read_bytes()
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(data[: len(data) // 2])
    with pytest.raises(ScenarioError, match="not a readable gzip file"):
        read_trace(cut_gz)


def test_traces_without_gpu_kernels_or_steps_or_shapes_are_refused(tmp_path):
    doc = _rank0()
    cpu_only = dict(doc, traceEvents=[e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy",
                                                                                             "gpu_memset")])
    with pytest.raises(ScenarioError, match="no GPU kernel events.*ProfilerActivity.CUDA"):
        read_trace(_write(tmp_path / "cpu.json", cpu_only))
    bad_numbers = dict(doc, traceEvents=[dict(e, dur="abc") if e.get("cat") == "kernel" else e
                                         for e in doc["traceEvents"] if e.get("cat") not in ("gpu_memcpy", "gpu_memset")])
    with pytest.raises(ScenarioError, match="no GPU kernel event has a start and a duration"):
        read_trace(_write(tmp_path / "bad.json", bad_numbers))
    no_steps = dict(doc, traceEvents=[e for e in doc["traceEvents"] if not e["name"].startswith("ProfilerStep")])
    with pytest.raises(ScenarioError, match="no ProfilerStep# annotation"):
        step_truth([read_trace(_write(tmp_path / "steps.json", no_steps))])
    no_shapes = dict(doc, traceEvents=[dict(e, args={k: v for k, v in e.get("args", {}).items()
                                                     if k not in ("Input Dims", "Collective name")})
                                       for e in doc["traceEvents"]])
    with pytest.raises(ScenarioError, match="record_shapes=True"):
        write_profile([read_trace(_write(tmp_path / "shapes.json", no_shapes))], tmp_path / "p.csv")
    assert not (tmp_path / "p.csv").exists()


def test_kernels_of_zero_duration_are_named_not_read_as_infinitely_fast(tmp_path):
    """A trace rewritten without its timing said "record_shapes=True" (its shapes were there)
    and compared as a step whose every traced part took 0 s."""
    doc = _rank0()
    gpu = ("kernel", "gpu_memcpy", "gpu_memset")
    untimed = dict(doc, traceEvents=[dict(e, dur=0) if e.get("cat") in gpu else e for e in doc["traceEvents"]])
    with pytest.raises(ScenarioError, match=r"GPU kernel events last 0 us, so the trace holds no kernel timing"):
        read_trace(_write(tmp_path / "untimed.json", untimed))
    gemms = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and classify(e["name"], "kernel", None)[0] == "gemm"]
    assert gemms
    no_gemm_time = dict(doc, traceEvents=[dict(e, dur=0) if e in gemms else e for e in doc["traceEvents"]])
    provenance = write_profile([read_trace(_write(tmp_path / "half.json", no_gemm_time))], tmp_path / "p.csv")
    assert provenance["left_out"]["calls whose kernels all last 0 us"] > 0
    assert "gemm" not in set(Profile.load(tmp_path / "p.csv").table["kind"])


def test_two_files_of_one_rank_and_missing_files_are_refused(tmp_path):
    with pytest.raises(ScenarioError, match="two traces are of rank 0"):
        read_traces([TWO_RANKS[0], TWO_RANKS[0]])
    with pytest.raises(ScenarioError, match="no such trace file"):
        read_traces([tmp_path / "missing.json"])


def test_a_trace_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SIM3D_MAX_TRACE_BYTES", "10000")
    with pytest.raises(WorkLimitExceeded, match="on disk.*SIM3D_MAX_TRACE_BYTES"):
        read_trace(TWO_RANKS[0])


def test_a_gzip_bomb_is_refused_quickly_in_bounded_memory(tmp_path, monkeypatch):
    """64 MiB of JSON-looking zeros in ~64 KiB of gzip, against a 16 MiB limit: refused once the
    limit is passed, never expanded whole."""
    bomb = tmp_path / "bomb.json.gz"
    with open(bomb, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9) as g:
        g.write(b'{"traceEvents": [')
        for _ in range(64):
            g.write(b"0" * 2**20)
    limit = 16 * 2**20
    assert bomb.stat().st_size < limit // 100
    monkeypatch.setenv("SIM3D_MAX_TRACE_BYTES", str(limit))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(WorkLimitExceeded, match="decompressed"):
            read_trace(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 5.0
    assert peak < 3 * limit


def test_driver_api_launches_place_compiled_kernels_in_their_step():
    """Inductor's Triton kernels launch through cuLaunchKernel (cuda_driver events): without
    those launch times half the compiled Llama step's kernels (by GPU start, after the CPU's
    step span) fell outside every step, and its kernels summed to 0.13 s of a 0.49 s step."""
    import json as json_
    traces = read_traces([TRACES / "llama_compiled_step.json.gz"])
    assert all(k.launch_us is not None for k in traces[0].kernels)
    kinds = json_.loads(step_truth(traces).to_json())["kinds_s"]
    measured = 0.4928  # validation/h200_llama_steps.json: the compiled step at micro-batch 2, same run
    assert 0.8 * measured < sum(kinds.values()) <= 1.05 * measured
    assert kinds["gemm"] > 0.6 * measured


@pytest.mark.parametrize("mode,measured", [("eager", 0.5971), ("compiled", 0.4928)])
def test_a_step_lasts_until_its_last_kernel_ends(mode, measured):
    """The ProfilerStep annotation spans the CPU's launches: 0.11 s of a 0.49 s compiled step.
    The traced step is the median of the profiled pair, against the same run's timed median
    (validation/h200_llama_steps.json, micro-batch 2)."""
    truth = step_truth(read_traces([TRACES / f"llama_{mode}_step.json.gz"]))
    assert truth.step_time_s == pytest.approx(measured, rel=0.05)


def test_the_commands_read_a_trace_end_to_end(tmp_path):
    """`sim3d calibrate --from-trace` writes a profile a scenario then prices from, and
    `sim3d compare REPORT TRACE.json.gz` sets the simulated step beside the traced one."""
    import json as json_
    import yaml
    from typer.testing import CliRunner
    from sim3d.cli.app import app
    from sim3d.validation.measured_steps import step_scenario
    record = json_.loads((ROOT / "validation" / "h200_llama_steps.json").read_text())
    scenario = tmp_path / "h200-eager.yaml"
    scenario.write_text(yaml.safe_dump(step_scenario(record, "eager", 2)))
    trace = TRACES / "llama_eager_step.json.gz"
    runner = CliRunner()
    missing = runner.invoke(app, ["calibrate", "--from-trace", str(trace)])
    assert missing.exit_code == 2 and "--out" in missing.stderr
    made = runner.invoke(app, ["calibrate", "--from-trace", str(trace), "--out", str(tmp_path / "p.csv"),
                               "--scenario", str(scenario), "--json"])
    assert made.exit_code == 0, made.output
    priced = json_.loads(made.stdout)["priced_from_profile"]
    assert any("GEMM" in what for what in priced)
    assert runner.invoke(app, ["run", str(scenario), "--out", str(tmp_path / "sim"), "--no-plots"]).exit_code == 0
    compared = runner.invoke(app, ["compare", str(tmp_path / "sim"), str(trace), "--json"])
    assert compared.exit_code == 0, compared.output
    result = json_.loads(compared.stdout)
    assert result["traced"]["step_time_s"] == pytest.approx(0.5971, rel=0.05)
    assert result["step_error"] == pytest.approx(result["simulated_step_s"] / result["traced"]["step_time_s"] - 1)

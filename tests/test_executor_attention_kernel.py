"""The executor runs the attention kernel a scenario names (`training.kernels.attention`) where
torch's scaled_dot_product_attention has it: on a GPU, cuDNN's or FlashAttention-2 by name,
FA3 and Triton refused before any process starts; on a CPU torch's own kernel, as said."""

from pathlib import Path

import pytest
import torch

import sim3d
from sim3d.executor.attention import SDPA_HOLDS, core_attention, sdpa_backends
from sim3d.executor.gpt import GPTConfig
from sim3d.executor.launch import ExecutorRefusal, make_spec

ROOT = Path(__file__).resolve().parents[1]
H100_SDPA = ["cluster.gpu=h100-sxm", "training.attention_backend=flash"]


needs_holds = pytest.mark.skipif(not SDPA_HOLDS, reason="torch < 2.5 runs its own choice")


@needs_holds
def test_named_kernels_are_held_on_a_gpu_in_16_bits_only():
    from torch.nn.attention import SDPBackend
    assert sdpa_backends("cudnn", "cuda") == [SDPBackend.CUDNN_ATTENTION]
    assert sdpa_backends("fa2", "cuda", torch.float16) == [SDPBackend.FLASH_ATTENTION]
    assert sdpa_backends("default", "cuda") is None and sdpa_backends("fa2", "cpu") is None
    # the flash and cuDNN backends take no fp32 (a scenario in fp32) or float64 (a check)
    assert sdpa_backends("fa2", "cuda", torch.float32) is None and sdpa_backends("cudnn", "cuda", torch.float64) is None
    for missing in ("fa3", "triton"):
        with pytest.raises(ValueError, match="torch SDPA has no such kernel"):
            sdpa_backends(missing, "cuda")


@needs_holds
def test_attention_held_to_a_backend_runs_that_backend_only():
    """Held to the math backend (a CPU has it) the arithmetic is the default's; held to cuDNN's,
    which a CPU lacks, nothing runs: the hold is applied, not just passed along."""
    from torch.nn.attention import SDPBackend
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8, generator=g) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # grouped-query attention: 2 kv heads for 4 query heads
    held = core_attention(q, k, v, "sdpa", [SDPBackend.MATH])
    assert torch.allclose(held, core_attention(q, k, v, "sdpa"), atol=1e-6)
    assert torch.allclose(held, core_attention(q, k, v, "unfused"), atol=1e-5)
    with pytest.raises(RuntimeError):
        core_attention(q, k, v, "sdpa", [SDPBackend.CUDNN_ATTENTION])


@pytest.mark.parametrize("kernel", ["fa3", "triton"])
def test_kernels_sdpa_lacks_are_refused_on_a_gpu_before_any_process(kernel):
    s = sim3d.load_scenario(ROOT / "scenarios" / "tiny.yaml", H100_SDPA + [f"training.kernels.attention={kernel}"])
    with pytest.raises(ExecutorRefusal, match="no such kernel"):
        make_spec(s, backend="nccl")
    assert make_spec(s, backend="gloo")  # a CPU runs torch's own kernel: nothing to refuse
    ring = sim3d.load_scenario(ROOT / "scenarios" / "tiny.yaml", H100_SDPA + [
        f"training.kernels.attention={kernel}", "parallel.cp=2", "cluster.gpus_per_node=2"])
    assert make_spec(ring, backend="nccl")  # context parallelism's ring runs no SDPA kernel at all


def test_a_run_says_the_named_kernel_did_not_run_on_a_cpu():
    from sim3d.executor.launch import execute
    r = execute(str(ROOT / "scenarios" / "tiny.yaml"), steps=1,
                overrides=H100_SDPA + ["training.kernels.attention=fa2"])
    assert r.numerics["attention"] == "sdpa; fa2 not run"


def test_the_named_kernel_reaches_the_model():
    s = sim3d.load_scenario(ROOT / "scenarios" / "tiny.yaml", H100_SDPA + ["training.kernels.attention=cudnn"])
    assert GPTConfig.of(s).sdpa_kernel == "cudnn" and GPTConfig.of(s).attention == "sdpa"

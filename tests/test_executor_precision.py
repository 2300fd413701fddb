"""The executor computes in the scenario's precision (bf16 / fp16 with fp32 master weights and
Megatron's main_grad buffer, fp16 with dynamic loss scaling; fp8 refused), and `--check`
holds a 16-bit run to a stated tolerance that a sabotaged run does not meet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sim3d.executor import ExecutorRefusal, execute
from sim3d.executor.precision import LossScaler, Precision, resolve_precision
from sim3d.executor.reference import tolerance
from sim3d.executor.tensor_parallel import TPContext
from sim3d.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "scenarios" / "tiny.yaml")
LLAMA = ["model.activation=swiglu", "model.kv_heads=2", "training.attention_backend=flash"]


def layout(tp=1, pp=1, dp=1, *extra):
    return [f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", f"cluster.gpus_per_node={tp * pp * dp}",
            *extra]


@pytest.mark.parametrize("block", [[], LLAMA], ids=["gpt-unfused", "swiglu-gqa-rmsnorm-sdpa"])
def test_bf16_tp2_pp2_passes_the_check(block):
    r = execute(TINY, steps=2, check=True, overrides=layout(2, 2, 1, "training.precision=bf16", *block))
    assert r.passed, r.summary()
    assert r.numerics["dtype"] == "bfloat16" and r.numerics["master_dtype"] == "float32"
    assert r.numerics["grad_dtype"] == "float32"  # Megatron's default for bf16
    assert r.numerics["attention"] == ("sdpa" if block else "unfused")
    assert r.check["tolerance"] == tolerance("bf16", 4)[0] == 16 * 2 ** -8
    assert 1e-6 < r.check["max_rel"]  # it really ran in 16 bits, not in float64


def test_fp16_loss_scaling_with_the_distributed_optimizer_passes_the_check():
    r = execute(TINY, steps=2, check=True, overrides=layout(1, 1, 2, "training.precision=fp16",
                                                            "parallel.distributed_optimizer=true"))
    assert r.passed, r.summary()
    assert r.numerics["dtype"] == r.numerics["grad_dtype"] == "float16"  # Megatron's fp16 default
    assert r.numerics["loss_scale"] == 2.0 ** 16 and r.check["skipped_steps"] == []


def test_a_sabotaged_bf16_run_fails_the_check():
    r = execute(TINY, steps=2, check=True, overrides=layout(2, 1, 1, "training.precision=bf16"),
                sabotage="tp_allreduce")
    assert not r.passed
    assert r.check["max_rel"] > 2 * r.check["tolerance"]


def test_fp8_is_refused_with_one_line():
    with pytest.raises(ExecutorRefusal, match="torchao.float8"):
        execute(TINY, overrides=["training.precision=fp8", "cluster.gpu=h100-sxm"])
    done = subprocess.run([sys.executable, "-m", "sim3d.executor", TINY, "--set", "training.precision=fp8",
                           "--set", "cluster.gpu=h100-sxm"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr



def test_main_grad_accumulates_in_fp32_and_master_weights_round_into_bf16():
    from sim3d.executor.optimizer import GradientsAndOptimizer
    w = torch.nn.Parameter(torch.full((4,), 1.0, dtype=torch.bfloat16))
    w.global_name, w.tp_dim, w.sequence_parallel = "w", None, False
    opt = GradientsAndOptimizer({0: [w]}, Precision("bf16", "bfloat16", "float32", "float32"), TPContext(),
                                TPContext(), dist_opt=False, lr=1.0)
    for _ in range(256):  # 256 x 2^-10: in bf16, 1 + 2^-10 rounds back to 1 and the sum would stay at 1
        (w * 2.0 ** -10).sum().backward()
    assert w.grad is None and w.main_grad.dtype == torch.float32
    assert torch.equal(w.main_grad, torch.full((4,), 0.25))
    opt.step()
    assert torch.equal(opt.master["w"], torch.full((4,), 0.75)) and torch.equal(w.detach().float(),
                                                                                torch.full((4,), 0.75))


def test_precision_follows_the_scenario_and_megatron_defaults():
    def run(*sets, check=False):
        return resolve_precision(load_scenario(TINY, overrides=list(sets)).training, check)
    assert run("training.precision=fp32") == Precision("fp32", "float32", "float32", "float32")
    assert run("training.precision=fp32", check=True).param == "float64"
    assert (run("training.precision=bf16").grad, run("training.precision=fp16").grad) == ("float32", "float16")
    assert run("training.precision=bf16", "training.grad_reduce_in_fp32=false").grad == "bfloat16"
    assert run("training.precision=fp16").loss_scaling and not run("training.precision=bf16").loss_scaling


def test_loss_scaler_backs_off_on_overflow_and_grows_after_clean_steps():
    scaler = LossScaler(scale=8.0, interval=2)
    scaler.update(True)
    assert scaler.scale == 4.0
    scaler.update(False)
    scaler.update(False)
    assert scaler.scale == 8.0

"""Run the SAME lowered schedules for real with torch.distributed, on a small Megatron-style
GPT (DESIGN.md section 9): `execute(scenario, steps, backend, check, out_dir, seed)`.

Importing this package does not import torch (launch.py imports it inside functions);
`gpt`, `tensor_parallel`, `runtime` and `reference` do.
"""

from .launch import ExecuteResult, ExecutorError, ExecutorRefusal, execute, run_torchrun

__all__ = ["execute", "ExecuteResult", "ExecutorError", "ExecutorRefusal", "run_torchrun"]

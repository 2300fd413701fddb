"""Run the SAME lowered schedules for real with torch.distributed, on a small Megatron-style
GPT (docs/commands.md, sim3d execute): `execute(scenario, steps, backend, check, out_dir, seed)`.

Importing this package imports neither torch nor pandas: `launch` (pandas) loads on first use
of its names; `precision` (the run's number formats) is torch-free too; `gpt`, `attention`,
`tensor_parallel`, `optimizer`, `runtime` and `reference` import torch.
"""

from typing import TYPE_CHECKING

__all__ = ["execute", "ExecuteResult", "ExecutorError", "ExecutorRefusal", "RankKilled", "run_torchrun"]

if TYPE_CHECKING:
    from .launch import ExecuteResult, ExecutorError, ExecutorRefusal, RankKilled, execute, run_torchrun


def __getattr__(name: str):
    if name in __all__:
        from . import launch
        return getattr(launch, name)
    raise AttributeError(f"module 'sim3d.executor' has no attribute {name!r}")

"""Launch an executed run: spawn tp*pp*dp*cp local processes (or join a torchrun / SLURM
job), watch them, gather losses, timings, the trace and, with `check`, compare with the
single-process reference.

This module imports torch only inside functions, so `import sim3d.executor` stays cheap.

Failure handling: every process group and every collective has a timeout (`timeout_s`);
the parent polls its children and, as soon as one fails (exception or death), waits a short
grace period to collect the other reports, terminates the rest and raises `ExecutorError`
naming the failed rank. Errors that are only consequences of another rank's death
(connection closed / reset, timeouts) are not blamed when a root cause is known.
"""

from __future__ import annotations

import os
import queue as queue_mod
import socket
import statistics
import time
import traceback
from contextlib import contextmanager
from typing import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..trace import rows_to_frame, write_trace_csv
from ..scenario.sharding import ShardingPlan
from .failures import note_exits, process_state, root_cause


class ExecutorRefusal(ValueError):
    """A request the executor will not start (a layout it cannot run, more processes or memory
    than this machine has, NCCL without GPUs): bad input, refused before any process starts."""


# A rank is a Python process with torch and torch.distributed imported: 218 MiB of RSS measured
# on this machine (torch 2.13 CPU); rounded up for gloo's buffers and the schedule state.
RANK_BASELINE_BYTES = 300 * 2**20


class ExecutorError(RuntimeError):
    """A rank of an executed run failed; `rank` and `error` name the root cause."""

    def __init__(self, rank: int | None, error: str, others: dict[int, str] | None = None):
        self.rank, self.error, self.others = rank, error, dict(others or {})
        who = f"rank {rank}" if rank is not None else "executor"
        text = f"{who} failed: {error.strip()}"
        if self.others:
            text += f"\n(then {len(self.others)} other rank(s) stopped: ranks {sorted(self.others)})"
        super().__init__(text)


class RankKilled(ExecutorError):
    """A rank died of a signal it did not raise itself (SIGKILL from the OOM killer or a user,
    SIGTERM from a job scheduler): the machine failed the run, not sim3d nor the input."""


@dataclass
class ExecuteResult:
    """Outcome of `execute`. `trace` holds the actions of the LAST step only (one row per
    action and rank, columns `rank, stage, chunk, microbatch, kind, stream, start_s, end_s,
    bytes, peer`; `peer` is a global rank), since the trace columns carry no step number."""

    name: str
    schedule: str
    world_size: int
    losses: list[float]  # mean token loss of the global batch, per step
    step_times_s: list[float]  # per step, slowest rank (barrier release -> last action end)
    median_step_s: float  # median over steps, the first (warm-up) step excluded when steps > 1
    trace: pd.DataFrame
    trace_path: Path | None = None
    check: dict | None = None  # errors vs the reference (see reference.compare_with_reference)
    reference_losses: list[float] | None = None
    meta: dict = field(default_factory=dict)
    scenario_path: Path | None = None  # the scenario that ran, beside the trace (`sim3d run` takes it)

    @property
    def max_param_diff(self) -> float | None:
        return None if self.check is None else self.check["param_abs"]

    @property
    def max_grad_diff(self) -> float | None:
        return None if self.check is None else self.check["grad_abs"]

    @property
    def numerics(self) -> dict:
        """What the run computed with: `precision` (the scenario's word, float64 for a checked
        fp32 run), `dtype` (weights and activations), `master_dtype`, `grad_dtype`,
        `loss_scale` (fp16's last scale, else null), `attention` (sdpa | unfused), `routing`
        (topk | balanced for experts, else null), `device`."""
        return {k: self.meta.get(k) for k in ("precision", "dtype", "master_dtype", "grad_dtype", "loss_scale",
                                              "attention", "routing", "device")}

    @property
    def passed(self) -> bool | None:
        return None if self.check is None else bool(self.check["passed"])

    def summary(self) -> str:
        lines = [f"{self.name}: schedule {self.schedule} on {self.world_size} process(es), "
                 f"median step {self.median_step_s * 1e3:.1f} ms",
                 f"ran {self.meta.get('described', '?')}, attention {self.meta.get('attention', '?')} "
                 f"on {self.meta.get('device', '?')}",
                 "losses: " + ", ".join(f"{x:.6f}" for x in self.losses)]
        if self.check is not None:
            c = self.check
            lines.append(f"check {'PASSED' if c['passed'] else 'FAILED'} (tolerance {c['tolerance']:.1e} for "
                         f"{self.meta.get('precision')}): loss rel {c['loss_rel']:.2e}, "
                         f"param abs {c['param_abs']:.2e} rel {c['param_rel']:.2e}, "
                         f"grad abs {c['grad_abs']:.2e} rel {c['grad_rel']:.2e}"
                         + ("" if c["passed"] else f"; worst: {c['worst']}"))
        if self.trace_path:
            lines.append(f"trace (last step): {self.trace_path}")
        if self.scenario_path:
            lines.append(f"scenario as run: {self.scenario_path}")
        return "\n".join(lines)


def _load(scenario, overrides=()):
    if isinstance(scenario, (str, Path)):
        from ..scenario.load import load_scenario
        return load_scenario(scenario, overrides=overrides)  # a str is refused there, not split into characters
    if overrides:
        raise ValueError("overrides apply to a scenario path, not to a loaded Scenario")
    return scenario


def _env_hooks(sabotage, kill):
    sabotage = sabotage or os.environ.get("SIM3D_EXECUTOR_SABOTAGE") or None
    if sabotage not in (None, "dp_reduce", "tp_allreduce", "cp_ring"):
        raise ValueError(f"sabotage must be 'dp_reduce', 'tp_allreduce' or 'cp_ring', got {sabotage!r}")
    text = os.environ.get("SIM3D_EXECUTOR_KILL")  # "RANK:STEP[:stop]", test only
    if kill is None and text:
        rank, step, *how = text.split(":")
        kill = (int(rank), int(step), *how)
    return sabotage, kill


def make_spec(scenario, steps=3, backend="gloo", check=False, seed=0, lr=0.1, timeout_s=30.0,
              sabotage=None, kill=None, buckets_per_chunk=None, routing="topk"):
    """Validate the request (no torch needed) and build the per-rank RunSpec. Gradient
    buckets per chunk: Megatron's count for the scenario (as `sim3d run` replays it) unless
    `buckets_per_chunk` is given."""
    from ..schedule import prove
    from ..step import dp_buckets_per_chunk
    from .runtime import RunSpec, make_schedule

    _refuse_experts(scenario, routing, check)
    for key, what in (("mla", "multi-head latent attention"), ("mtp_layers", "multi-token prediction")):
        if getattr(scenario.model, key):  # the executor's GPT: standard attention, one loss
            raise ExecutorRefusal(f"model.{key}: {what} runs in the simulator only, not in the executor's GPT")
    from .precision import resolve_precision
    try:
        resolve_precision(scenario.training, check)
    except ValueError as e:  # fp8
        raise ExecutorRefusal(str(e)) from None
    named = scenario.training.kernels.attention
    if backend == "nccl" and named in ("fa3", "triton") and scenario.cp == 1:  # cp > 1: the ring, not SDPA
        raise ExecutorRefusal(f"training.kernels.attention={named}: the executor runs torch's scaled_dot_product_attention, "
                              "which has no such kernel; on a GPU it runs default, cudnn or fa2")
    zero = ShardingPlan.of(scenario).zero
    if zero >= 2 and scenario.dp * scenario.cp > 1:
        raise ExecutorRefusal(f"parallel.zero={zero}: the executor shards the optimizer state at "
                              "most (zero 0 or 1); run sharded gradients and parameters in the simulator only")
    if steps < 1:
        raise ExecutorRefusal(f"steps must be >= 1, got {steps}")
    if scenario.parallel.sequence_parallel and (scenario.model.seq_len // scenario.cp) % scenario.tp:
        raise ExecutorRefusal(f"model.seq_len={scenario.model.seq_len} / cp={scenario.cp} is not divisible by "
                              f"tp={scenario.tp} (sequence parallelism)")
    sabotage, kill = _env_hooks(sabotage, kill)
    if buckets_per_chunk is None:
        buckets_per_chunk = dp_buckets_per_chunk(scenario)
    spec = RunSpec(scenario, steps, backend, check, seed, lr, buckets_per_chunk, timeout_s, sabotage, kill, routing)
    prove(make_schedule(spec))
    return spec


def _refuse_experts(scenario, routing: str, check: bool) -> None:
    """What the executor's experts (experts.py) do not implement, said before any process starts."""
    if routing not in ("topk", "balanced"):
        raise ExecutorRefusal(f"routing: expected topk or balanced, got {routing!r}")
    moe, p = scenario.model.moe, scenario.parallel
    if moe is None:  # etp is 1 or tp, with sequence parallelism below tp: the scenario's own checks
        if routing != "topk":
            raise ExecutorRefusal(f"--routing {routing}: the model has no experts (model.moe is null)")
        return
    if moe.shared_expert_ffn:
        raise ExecutorRefusal("model.moe.shared_expert_ffn: the executor's MoE layers have routed experts only")
    if moe.first_dense_layers:
        raise ExecutorRefusal("model.moe.first_dense_layers: the executor places MoE layers by model.moe.every alone; "
                              "dense first layers run in the simulator only")
    if scenario.tp > 1 and not p.sequence_parallel:
        raise ExecutorRefusal("experts under tensor parallelism route each rank's sequence shard: set "
                              "parallel.sequence_parallel true (Megatron asserts it for MoE with tp > 1)")
    if moe.capacity_factor is not None and (routing == "topk" or moe.capacity_factor < 1):
        raise ExecutorRefusal("model.moe.capacity_factor: the executor's experts are dropless; with --routing "
                              "balanced and a capacity factor of at least 1 no token would be dropped, so that runs")
    if ShardingPlan.of(scenario).shards_optimizer and scenario.dp * scenario.cp > 1:
        raise ExecutorRefusal("the executor's distributed optimizer shards dense parameters only: run MoE with "
                              "parallel.zero 0")
    if check and routing == "topk" and scenario.training.precision in ("bf16", "fp16"):
        raise ExecutorRefusal(f"--check with experts in {scenario.training.precision}: the router's scores differ "
                              "from the float64 reference's by rounding, so top-k routing sends some tokens to other "
                              "experts and the two runs compute different things; use --routing balanced")


def check_machine_fits(scenario, backend: str, check: bool) -> None:
    """Refuse a layout this machine cannot hold: more processes than the limit, more memory
    than is available (every rank's weights, gradients and a spare copy, plus the reference
    model under `check`), or NCCL ranks without a GPU each."""
    from ..scenario.limits import LOCAL_PROCESSES, WorkLimitExceeded
    from ..model.params import model_params

    world = scenario.world_size
    try:
        LOCAL_PROCESSES.check(world, f"tp*pp*dp*cp = {scenario.tp}*{scenario.pp}*{scenario.dp}*{scenario.cp}")
    except WorkLimitExceeded as e:
        raise ExecutorRefusal(f"{e}; the executor starts one process per rank on this machine") from None
    width = 8 if check else 4  # float64 under --check
    params = model_params(scenario)
    acts = _activation_bytes(scenario) * width / 4
    needed = world * RANK_BASELINE_BYTES + 3 * width * params * (2 if check else 1) + acts
    available = _available_memory_bytes()
    if available is not None and needed > available:
        raise ExecutorRefusal(f"{world} rank processes need about {needed / 2**30:.1f} GiB "
                              f"({world} x {RANK_BASELINE_BYTES / 2**20:.0f} MiB + {params / 1e6:,.1f} M parameters "
                              f"x {3 * width} bytes{' x 2 with the reference' if check else ''} + "
                              f"{acts / 2**30:.1f} GiB of activations); "
                              f"this machine has {available / 2**30:.1f} GiB available")
    if backend == "nccl":
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < world:
            raise ExecutorRefusal(f"--backend nccl needs a GPU per rank: {world} ranks, {gpus} GPU(s) here "
                                  "(use --backend gloo on CPU)")


def _activation_bytes(scenario) -> float:
    """Activations of all ranks at their peak, at most as the executor keeps them: fp32 and
    attention scores materialised (its unfused kernel; bf16 and SDPA keep less), from the
    memory model."""
    from ..model.memory import memory_report
    from ..scenario.load import scenario_from_dict
    as_run = scenario_from_dict(scenario.model_dump(exclude_none=True), values={
        "training.attention_backend": "unfused", "training.kernels.attention": "default",
        "training.precision": "fp32", "cluster.gpu": "a100-80gb"})
    rows = memory_report(as_run, check_schedule=False).rows
    return sum(r.activations + r.other for r in rows) * scenario.world_size / scenario.pp


def _available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def execute(scenario, steps: int = 3, backend: str = "gloo", check: bool = False, out_dir=None, seed: int = 0,
            *, lr: float = 0.1, timeout_s: float = 30.0, sabotage: str | None = None,
            buckets_per_chunk: int | None = None, overrides=(), deadline_s: float | None = None,
            progress: Callable[[str], None] | None = None, routing: str = "topk") -> ExecuteResult:
    """Run the scenario's layout for real: tp*pp*dp*cp local processes (forkserver), the
    scenario's schedule lowered exactly as the simulator lowers it. `scenario` is a Scenario
    or a path (then `overrides` like "parallel.tp=2" apply). The run computes in the
    scenario's `training.precision` (precision.py; fp32 becomes float64 under `check`) and
    attention kernel; with `check` it is compared with the float64 `reference.run_reference`
    at that precision's tolerance; the result's `check` holds the errors and `passed`. The
    trace (and `out_dir/trace.csv`) holds the last step only.
    Scripts calling this need the `if __name__ == "__main__":` guard (children are started
    by a forkserver, which re-imports the main module). Raises ExecutorError when a rank fails
    (RankKilled, a subclass, when a signal from outside killed it), ExecutorRefusal (a
    ValueError) on a request it will not start (fp8, expert layouts it does not implement,
    more processes or memory than this machine has). `routing`: how MoE tokens pick experts. `progress(message)` hears each phase and each step rank 0 finishes."""
    import multiprocessing as mp

    say = progress or (lambda _message: None)

    s = _load(scenario, overrides)
    spec = make_spec(s, steps, backend, check, seed, lr, timeout_s, sabotage, None, buckets_per_chunk, routing)
    check_machine_fits(s, backend, check)
    world = s.world_size
    try:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed", "sim3d.executor.runtime"])
    except ValueError:  # no forkserver on this platform
        ctx = mp.get_context("spawn")
    results_q = ctx.Queue()
    init_method = f"tcp://127.0.0.1:{_free_port()}"
    procs = [ctx.Process(target=_child, args=(r, world, init_method, spec, results_q, os.getpid()),
                         daemon=True)
             for r in range(world)]
    with _safe_path():
        for p in procs:
            p.start()
    say(f"started {world} rank process(es) ({backend}); each imports torch first")
    deadline = time.monotonic() + (deadline_s or 600 + 60 * steps)
    payloads: dict[int, dict] = {}
    failures: dict[int, str] = {}
    killed: set[int] = set()  # ranks that died of a signal sent from outside
    try:
        while len(payloads) < world:
            for step in _drain(results_q, payloads, failures, 0.1):
                say(f"step {step + 1} of {steps} done on rank 0")
            note_exits(procs, payloads, failures, killed)
            if failures:
                # collect the tracebacks on their way, and the exit codes: a rank's peers may
                # report the broken connection before the forkserver reports that rank's death
                grace = time.monotonic() + 1.5
                while time.monotonic() < grace:
                    list(_drain(results_q, payloads, failures, 0.1))
                    note_exits(procs, payloads, failures, killed)
                rank, error = root_cause(failures, {r: p for r, p in enumerate(procs)
                                                     if r not in payloads and r not in failures})
                stopped = rank not in failures and process_state(procs[rank].pid).startswith("process stopped")
                raise (RankKilled if rank in killed or stopped else ExecutorError)(  # SIGSTOP: from outside too
                    rank, error, {r: e for r, e in failures.items() if r != rank})
            if time.monotonic() > deadline:
                raise ExecutorError(None, f"no result after {deadline_s or 600 + 60 * steps:.0f} s; "
                                    f"ranks still running: {[r for r in range(world) if r not in payloads]}")
    finally:
        _stop(procs)
    if check:
        say("checking against the single-process reference")
    return assemble(spec, [payloads[r] for r in range(world)], out_dir)


@contextmanager
def _safe_path():
    """The forkserver starts as `python -c ...`, which puts the working folder first on its
    sys.path, so a `sim3d` folder there (another checkout) would be what the ranks import.
    PYTHONSAFEPATH (Python 3.11+) leaves it off; the ranks fork from that server."""
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = before


def _child(rank, world, init_method, spec, results_q, launcher: int) -> None:
    from ..util.lifetime import die_with
    from .runtime import run_rank

    die_with(launcher)  # the launching process; our parent is the forkserver

    try:
        # rank 0 alone reports its steps: the launcher's progress, one message per step
        on_step = (lambda step: results_q.put(("step", rank, step))) if rank == 0 else None
        payload = run_rank(rank, world, spec, init_method, on_step=on_step)
        message = ("ok", rank, payload)
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        message = ("error", rank, traceback.format_exc())
    results_q.put(message)
    results_q.close()
    results_q.join_thread()
    os._exit(0 if message[0] == "ok" else 1)  # skip atexit: a dead peer must not hang teardown


def _drain(results_q, payloads, failures, timeout) -> list[int]:
    """Take what the ranks sent: their payloads and failures, filed here, and the steps rank 0
    finished, returned."""
    steps = []
    try:
        while True:
            status, rank, body = results_q.get(timeout=timeout)
            if status == "step":
                steps.append(body)
            else:
                (payloads if status == "ok" else failures)[rank] = body
            timeout = 0.01
    except queue_mod.Empty:
        pass
    return steps


def _stop(procs) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
            if process_state(p.pid).startswith("process stopped"):
                p.kill()  # a stopped process never handles SIGTERM
    end = time.monotonic() + 5
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assemble(spec, payloads: list[dict], out_dir=None) -> ExecuteResult:
    """Combine the ranks' payloads: losses averaged over data-parallel replicas (tp rank 0 of
    each last stage), step time = slowest rank, trace of the last step, optional check."""

    s = spec.scenario
    holders = [p for p in payloads if p["losses"] is not None and p["coords"]["tp"] == 0]
    losses = [statistics.fmean(p["losses"][i] for p in holders) for i in range(spec.steps)]
    step_times = [max(p["step_times"][i] for p in payloads) for i in range(spec.steps)]
    timed = step_times[1:] if len(step_times) > 1 else step_times
    trace = rows_to_frame([row for p in payloads for row in p["trace"]])
    trace = trace.sort_values(["rank", "start_s"], kind="stable").reset_index(drop=True)
    trace_path = scenario_path = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        trace_path, scenario_path = Path(out_dir) / "trace.csv", Path(out_dir) / SCENARIO_NAME
        # written beside and renamed over: a hard link or a symlink at trace.csv is replaced,
        # never written through into the file it points at
        for path, write in ((trace_path, lambda temp: write_trace_csv(trace, temp)),
                            (scenario_path, lambda temp: temp.write_text(scenario_yaml(s)))):
            temp = path.with_name(f".sim3d-{os.getpid()}-{path.name}")
            try:
                write(temp)
                os.replace(temp, path)
            finally:
                temp.unlink(missing_ok=True)
    ran = payloads[0]["ran"]  # what the ranks ran with: precision, formats, attention kernel, device
    check = ref_losses = None
    if spec.check:
        from .reference import compare_with_reference, run_reference
        skipped = sorted({step for p in payloads for step in p["skipped_steps"]})
        ref = run_reference(s, spec.steps, spec.seed, spec.lr, skipped_steps=skipped, routing=spec.routing)
        ref_losses = ref.losses
        check = compare_with_reference(ref, losses, [p["shards"] for p in payloads], ran["precision"],
                                       s.model.layers)
        check["skipped_steps"] = skipped
    return ExecuteResult(s.name, s.schedule, s.world_size, losses, step_times, statistics.median(timed), trace,
                         trace_path, check, ref_losses,
                         meta={"backend": spec.backend, "sabotage": spec.sabotage, "seed": spec.seed, **ran},
                         scenario_path=scenario_path)


SCENARIO_NAME = "scenario.yaml"


def scenario_yaml(scenario) -> str:
    """The scenario as it ran (its file with every --set and the local cluster applied), as a
    scenario file: `sim3d run` on it simulates exactly the executed layout and schedule."""
    import yaml
    head = ("# The scenario `sim3d execute` ran, every --set applied, on one node of a process per rank.\n"
            "# Simulate the same run: sim3d run <this file> --set costs.profile=<a profile of this machine>\n")
    return head + yaml.safe_dump(scenario.model_dump(mode="json", exclude_unset=True), sort_keys=False)


def run_torchrun(scenario, steps=3, backend="gloo", check=False, out_dir=None, seed=0, **kw) -> ExecuteResult | None:
    """Entry for torchrun / SLURM: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT come
    from the environment. Rank 0 gathers everything and returns the result; others return None."""
    import torch.distributed as dist

    from .runtime import run_rank

    spec = make_spec(scenario, steps, backend, check, seed, **kw)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != scenario.world_size:
        raise ValueError(f"WORLD_SIZE={world} but the scenario needs tp*pp*dp*cp = {scenario.world_size} processes")
    payload = run_rank(rank, world, spec, "env://", int(os.environ.get("LOCAL_RANK", 0)))
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(payload, gathered, dst=0)
    dist.destroy_process_group()
    return assemble(spec, gathered, out_dir) if rank == 0 else None

"""The executor runs the lowered schedules for real (gloo, CPU) and matches a single-process
float64 reference; sabotage makes the check fail; a dead rank is reported, not hung on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim3d.executor import ExecutorError, execute
from sim3d.executor.reference import CHECK_RTOL
from sim3d.scenario.load import load_scenario
from sim3d.schedule import build, lower

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "scenarios" / "tiny.yaml")
COLUMNS = ["rank", "stage", "chunk", "microbatch", "kind", "stream", "start_s", "end_s", "bytes", "peer"]


def layout(tp=1, pp=1, dp=1, schedule="1f1b", vpp=1, *extra):
    return [f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", f"parallel.vpp={vpp}",
            f"schedule={schedule}", f"cluster.gpus_per_node={tp * pp * dp}", *extra]


CASES = {
    "single": layout(),
    "tp2": layout(tp=2),
    "pp2-gpipe": layout(pp=2, schedule="gpipe"),
    "dp2": layout(dp=2),
    "tp2-pp2-dp2-1f1b": layout(2, 2, 2, "1f1b"),
    "pp2-interleaved-vpp2": layout(pp=2, schedule="interleaved-1f1b", vpp=2),
    "zbv-split-backward": layout(pp=2, schedule="zbv", vpp=2),
    "zb-h2": layout(pp=2, schedule="zb-h2"),
    # the embedding and the loss counted as a layer each: the first stage holds the embedding
    # alone, the last the loss alone (no transformer layer)
    "embedding-and-loss-stages": layout(1, 4, 1, "1f1b", 1, "model.layers=2",
                                        "parallel.account_for_embedding_in_pipeline_split=true",
                                        "parallel.account_for_loss_in_pipeline_split=true"),
    "zbv-embedding-and-loss-chunks": layout(1, 2, 1, "zbv", 2, "model.layers=2",
                                            "parallel.account_for_embedding_in_pipeline_split=true",
                                            "parallel.account_for_loss_in_pipeline_split=true"),
    "dualpipev": layout(pp=2, schedule="dualpipev", vpp=2),
    "tp2-dp2-sp-distopt-swiglu-gqa": layout(2, 1, 2, "1f1b", 1, "parallel.sequence_parallel=true",
                                            "parallel.distributed_optimizer=true", "model.activation=swiglu",
                                            "model.kv_heads=2"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_check_matches_reference(name):
    r = execute(TINY, steps=2, check=True, overrides=CASES[name])
    assert r.passed, r.summary()
    assert r.check["max_rel"] <= CHECK_RTOL
    assert len(r.losses) == 2 and r.losses == pytest.approx(r.reference_losses, rel=1e-12)
    assert r.max_param_diff < 1e-10 and r.max_grad_diff < 1e-10


@pytest.mark.parametrize("sabotage, overrides", [("dp_reduce", layout(dp=2)), ("tp_allreduce", layout(tp=2))])
def test_sabotage_makes_check_fail(sabotage, overrides):
    r = execute(TINY, steps=2, check=True, overrides=overrides, sabotage=sabotage)
    assert not r.passed
    assert r.check["max_rel"] > 1e-4


def test_killed_rank_is_reported_quickly(monkeypatch):
    monkeypatch.setenv("SIM3D_EXECUTOR_KILL", "1:2")  # rank 1 calls os._exit(3) in step 2
    start = time.monotonic()
    with pytest.raises(ExecutorError) as info:
        execute(TINY, steps=3, overrides=layout(pp=2, dp=2), timeout_s=20)
    assert time.monotonic() - start < 60
    assert info.value.rank == 1
    assert "code 3" in str(info.value)


def test_trace_has_fixed_columns_and_last_step_actions(tmp_path):
    r = execute(TINY, steps=2, out_dir=tmp_path, overrides=layout(pp=2, dp=2, schedule="1f1b"))
    assert list(r.trace.columns) == COLUMNS
    assert r.trace_path == tmp_path / "trace.csv" and r.trace_path.exists()
    s = load_scenario(TINY, overrides=layout(pp=2, dp=2))
    schedule = lower(build("1f1b", 2, s.num_microbatches))
    for rank, rows in r.trace.groupby("rank"):
        pp_rank = rank // 2  # order tp-cp-ep-dp-pp: rank = dp + 2 * pp
        assert list(rows["kind"]) == [a.kind.value for a in schedule.ranks[pp_rank]]
    t = r.trace
    assert set(t.loc[t.kind.isin(["F", "B", "OPT_STEP"]), "stream"]) == {"compute"}
    assert set(t.loc[t.kind.str.contains("SEND|RECV"), "stream"]) == {"pp"}
    assert set(t.loc[t.kind == "DP_REDUCE", "stream"]) == {"dp"}
    assert (t.loc[t.kind == "OPT_STEP", "microbatch"] == -1).all()
    assert (t.loc[t.kind == "F", "peer"] == -1).all()
    assert (t.loc[t.kind == "SEND_F", "peer"] >= 2).all()  # global rank of the next stage
    assert (t.end_s >= t.start_s).all() and (t.loc[t.kind == "SEND_F", "bytes"] > 0).all()
    assert r.median_step_s > 0 and len(r.step_times_s) == 2


def test_import_does_not_pull_torch():
    code = "import sys, sim3d, sim3d.executor; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_torchrun_style_entry(tmp_path):
    """Two processes started the way torchrun starts them (RANK/WORLD_SIZE/MASTER_* in env)."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        cmd = [sys.executable, "-m", "sim3d.executor", TINY, "--steps", "1", "--check", "--out", str(tmp_path),
               "--set", "parallel.tp=2", "--set", "cluster.gpus_per_node=2"]
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "check PASSED" in outs[0][0]
    assert (tmp_path / "trace.csv").exists()


def test_a_hung_rank_is_named_not_the_ranks_that_waited_for_it(monkeypatch):
    monkeypatch.setenv("SIM3D_EXECUTOR_KILL", "2:2:stop")  # rank 2 stops itself (SIGSTOP) in step 2
    with pytest.raises(ExecutorError) as info:
        execute(TINY, steps=3, overrides=layout(pp=2, dp=2), timeout_s=5)
    assert info.value.rank == 2
    assert "stopped responding (process stopped" in str(info.value)
    # stopped from outside, as a kill is: the environment failed the run (exit 3), not sim3d (1)
    from sim3d.executor.launch import RankKilled
    assert isinstance(info.value, RankKilled)


def _descendants(pid: int) -> set[int]:
    found, frontier = set(), [pid]
    while frontier:
        for task in Path(f"/proc/{frontier.pop()}/task").glob("*"):
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            frontier += list(children - found)
            found |= children
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
def test_ranks_die_with_a_killed_parent(tmp_path):
    import signal
    parent = subprocess.Popen([sys.executable, "-m", "sim3d.cli", "execute", str(TINY), "--steps", "1000",
                               "--set", "parallel.pp=2", "--set", "parallel.dp=2", "--out", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks: set[int] = set()  # the 4 ranks, children of the forkserver, and the helpers beside them
    deadline = time.monotonic() + 60
    while len(ranks) < 5 and time.monotonic() < deadline and parent.poll() is None:
        ranks = _descendants(parent.pid)
        time.sleep(0.2)
    assert len(ranks) >= 5, "the ranks never started"
    time.sleep(1.0)  # into the steps
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    end = time.monotonic() + 15
    while any(_alive(p) for p in ranks) and time.monotonic() < end:
        time.sleep(0.2)
    assert not [p for p in ranks if _alive(p)], "rank processes outlived their killed parent"


def test_simulated_and_executed_traces_of_one_scenario_align_one_to_one():
    import sim3d
    from sim3d.report.compare import compare_traces
    sets = ["parallel.pp=2", "parallel.dp=2", "parallel.tp=2", "cluster.gpus_per_node=8"]
    simulated = sim3d.simulate(TINY, sets=sets)
    executed = execute(TINY, steps=1, overrides=sets)
    result = compare_traces(simulated.trace, executed.trace)
    assert (result.unmatched_sim, result.unmatched_real) == (0, 0)
    # every action of the lowered schedule (one pipeline: pp ranks) is a key on both sides
    assert len(result.per_action) == sum(len(actions) for actions in simulated.schedule.ranks)


def test_torchrun_and_slurm_runs_size_the_cluster_from_the_launcher():
    """Under torchrun or SLURM the job's nodes and processes per node come from the launcher's
    environment (as `sim3d execute` sizes a local run), not from the scenario's cluster."""
    from sim3d.executor.sizing import launcher_cluster
    tiny = str(ROOT / "scenarios" / "tiny.yaml")
    assert launcher_cluster(tiny, [], {"RANK": "3", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}) == \
        ["cluster.nodes=2", "cluster.gpus_per_node=8"]
    assert launcher_cluster(tiny, [], {"RANK": "0", "WORLD_SIZE": "8", "SLURM_NNODES": "4"}) == \
        ["cluster.nodes=4", "cluster.gpus_per_node=2"]
    assert launcher_cluster(tiny, ["parallel.tp=2", "parallel.dp=2"], {}) == \
        ["cluster.nodes=1", "cluster.gpus_per_node=4"]
    with pytest.raises(ValueError, match="whole number of nodes"):
        launcher_cluster(tiny, [], {"RANK": "0", "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "8"})


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH keeps the working folder off sys.path from 3.11")
def test_ranks_import_the_installed_sim3d_not_a_folder_of_that_name_where_they_run(tmp_path):
    """The forkserver starts as `python -c`, which would put the working folder first on its
    path: a `sim3d` folder there (another checkout) must not be what the ranks run."""
    marker = tmp_path / "imported"
    shadow = tmp_path / "sim3d" / "executor"
    shadow.mkdir(parents=True)
    (tmp_path / "sim3d" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('shadow')\n")
    (shadow / "__init__.py").write_text("")
    (shadow / "runtime.py").write_text("")
    script = Path(sys.executable).with_name("sim3d")  # as a user runs it: the folder is not on its own path
    if not script.exists():
        pytest.skip("no `sim3d` script beside this interpreter")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    done = subprocess.run([str(script), "execute", str(TINY), "--set", "parallel.pp=2",
                           "--steps", "2", "--out", str(tmp_path / "out")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()

"""How big the executed job's cluster is: the launcher's, not the scenario's (no torch here,
so the CLI can size a run before deciding to start one)."""

from __future__ import annotations


def launcher_cluster(path: str, overrides: list[str], env) -> list[str]:
    """The cluster the job really has, as overrides (as `sim3d execute` sizes its local run):
    under torchrun (WORLD_SIZE, LOCAL_WORLD_SIZE) or SLURM (SLURM_NTASKS, SLURM_NNODES) the
    launcher's nodes and processes per node; otherwise one node with a process per rank."""
    from ..scenario.load import local_world_size
    if "WORLD_SIZE" in env and "RANK" in env:
        world = int(env["WORLD_SIZE"])
        per_node = int(env.get("LOCAL_WORLD_SIZE") or 0)
        if not per_node and env.get("SLURM_NNODES"):
            per_node = world // int(env["SLURM_NNODES"])
        per_node = per_node or world
        if world % per_node:
            raise ValueError(f"WORLD_SIZE={world} is not a whole number of nodes of {per_node} processes")
        return [f"cluster.nodes={world // per_node}", f"cluster.gpus_per_node={per_node}"]
    return ["cluster.nodes=1", f"cluster.gpus_per_node={local_world_size(path, overrides)}"]

"""Predicted NCCL bus bandwidths against the measured ones of validation/nccl.csv.

    python -m sim3d.validation.nccl_check

Each row of the table names a system, a GPU count, a size (blank: the peak, taken at 8 GiB)
and the busbw nccl-tests printed. It is priced with the same topology and collective model a
simulation uses: a cluster of that system with a data-parallel group of that many GPUs. Rows
that force an algorithm (NCCL_ALGO=RING / NVLS) are priced with that algorithm; the others
with the fastest, as NCCL's tuner picks. Rows whose system has no GPU preset are not covered.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ..costs.collectives import bus_factor, collective_time, p2p_time
from ..cluster.gpus import preset_named_in
from ..scenario.load import scenario_from_dict
from ..cluster.topology import Topology

NCCL_CSV = Path(__file__).resolve().parents[2] / "validation" / "nccl.csv"
PEAK_BYTES = 8 * 2**30  # rows that give a peak without a size


@dataclass(frozen=True)
class Check:
    collective: str
    system: str
    gpus: int
    size: float
    measured: float  # GB/s
    predicted: float | None  # GB/s; None: not covered
    algorithm: str

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.measured - 1


def _system(row) -> dict | None:
    """Cluster of a row's system: gpu preset, GPUs per node, NICs and their speed."""
    text = row["system"]
    if "ConnectX-7" in text:  # a NIC measured alone: any 400G H100 node
        return {"gpu": "h100-sxm", "gpus_per_node": 8, "inter_node": {"fabric": "rail-optimized", "nic_gbps": 400}}
    gpu = preset_named_in(text)
    if gpu is None:
        return None
    cluster = {"gpu": gpu, "gpus_per_node": 8, "inter_node": {"fabric": "rail-optimized"}}
    if "HDR" in text:
        cluster["inter_node"].update(nics_per_node=int(re.search(r"(\d+)x HDR", text)[1]), nic_gbps=200)
    elif "400Gb/s" in text:
        cluster["inter_node"].update(nics_per_node=8, nic_gbps=400)
    return cluster


def _link(cluster: dict, gpus: int):
    per_node = min(gpus, cluster["gpus_per_node"])
    nodes = -(-gpus // per_node)
    s = scenario_from_dict({
        "name": "nccl", "model": {"layers": 2, "hidden": 256, "heads": 4, "vocab": 128, "seq_len": 64},
        "parallel": {"tp": 1, "pp": 1, "dp": nodes * per_node},
        "training": {"micro_batch": 1, "global_batch": nodes * per_node},
        "cluster": {**cluster, "nodes": nodes, "gpus_per_node": per_node}})
    return s, Topology(s).group_link("dp")


def check_row(row) -> Check:
    size = float(row["size_bytes"]) if str(row["size_bytes"]).strip() not in ("", "nan") else PEAK_BYTES
    gpus = int(row["num_gpus"]) if str(row["num_gpus"]).strip() not in ("", "nan") else 0
    measured = float(row["busbw_gb_s"])
    cluster = _system(row)
    if cluster is None:
        return Check(row["collective"], row["system"], gpus, size, measured, None, "no preset")
    if row["collective"].startswith("point_to_point"):  # one NIC, one message, two nodes
        s, _ = _link(cluster, 16)
        topo = Topology(s)
        bw, latency = topo.path_cost(0, 8)
        seconds = p2p_time(size, bw, latency, True)
        return Check(row["collective"], row["system"], 2, size, measured, size / seconds / 1e9, "send/recv")
    _, link = _link(cluster, gpus or 8)
    forced = re.search(r"NCCL_ALGO=(\w+)", row["system"])
    if forced and forced[1] == "RING":
        link = replace(link, nvls_busbw=None)
    got = collective_time(row["collective"], size, link)
    busbw = size / got.seconds * bus_factor(row["collective"], link.size) / 1e9
    return Check(row["collective"], row["system"], link.size, size, measured, busbw, got.algorithm)


def check_all(path: Path = NCCL_CSV) -> list[Check]:
    import pandas as pd
    rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    return [check_row(row) for _, row in rows.iterrows()]


def markdown(checks: list[Check]) -> str:
    """The README's table."""
    lines = ["| system | collective | GPUs | size | measured GB/s | predicted GB/s | error | algorithm |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for c in checks:
        size = "peak (8 GiB)" if c.size == PEAK_BYTES else f"{c.size / 2**20:,.0f} MiB"
        predicted = f"{c.predicted:.1f}" if c.predicted is not None else "-"
        error = f"{c.error:+.1%}" if c.error is not None else "-"
        lines.append(f"| {c.system} | {c.collective} | {c.gpus} | {size} | {c.measured:.1f} | {predicted} | {error} "
                     f"| {c.algorithm} |")
    return "\n".join(lines)


def main() -> int:
    checks = check_all()
    if "--markdown" in sys.argv[1:]:
        print(markdown(checks))
        return 0
    print(f"{'collective':14} {'GPUs':>4} {'size':>9} {'measured':>9} {'predicted':>9} {'error':>7}  algorithm  system")
    for c in checks:
        size = f"{c.size / 2**20:,.0f} MiB"
        predicted = f"{c.predicted:9.1f}" if c.predicted is not None else f"{'-':>9}"
        error = f"{c.error:+7.1%}" if c.error is not None else f"{'-':>7}"
        print(f"{c.collective[:14]:14} {c.gpus:>4} {size:>9} {c.measured:9.1f} {predicted} {error}  "
              f"{c.algorithm:10} {c.system[:60]}")
    covered = [c for c in checks if c.error is not None]
    within = sum(abs(c.error) <= 0.10 for c in covered)
    print(f"{within} of {len(covered)} covered rows within 10% ({len(checks) - len(covered)} not covered)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

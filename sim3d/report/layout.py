"""The derived layout of a scenario, as `sim3d validate` prints it."""

from __future__ import annotations

from ..cluster.placement import Placement


def layout_rows(s) -> list[tuple[str, str]]:
    placement = Placement.of(s)
    last = s.world_size - 1
    per_node = s.gpus_per_node

    def where(rank: int) -> str:
        c = placement.coords(rank)
        node, local = divmod(rank, per_node)
        return (f"rank {rank}: tp {c['tp']}, cp {c['cp']}, dp {c['dp']}, pp {c['pp']}"
                + (f", ep {c['ep']}" if s.ep > 1 else "") + f" -> node {node}, GPU {local}")

    layers = s.stage_layers
    spread = f"{layers[0]}" if len(set(layers)) == 1 else f"{min(layers)}-{max(layers)} (uneven)"
    return [
        ("GPUs", f"{s.num_gpus} ({s.cluster.nodes} nodes x {per_node} {s.cluster.gpu})"),
        ("degrees", f"tp={s.tp} pp={s.pp} dp={s.dp} cp={s.cp} ep={s.ep} vpp={s.vpp}"
                    + (f" etp={s.etp} (experts: etp x ep x edp = {s.etp} x {s.ep} x "
                       f"{s.tp * s.cp * s.dp // (s.etp * s.ep)} per stage)" if s.etp != s.tp else "")),
        ("rank order", f"{s.parallel.order} (innermost first)"),
        ("micro-batches", f"{s.num_microbatches} per step ({s.training.global_batch} / "
                          f"({s.training.micro_batch} x dp {s.dp}))"),
        ("layers per stage", f"{spread} ({s.model.layers} layers over {s.num_stages} stages)"),
        ("schedule", s.schedule),
        ("first rank", where(0)),
        ("last rank", where(last)),
    ]


def layout_table(s):
    from rich.table import Table
    table = Table(title=f"{s.name}: layout", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    for what, value in layout_rows(s):
        table.add_row(what, value)
    return table

"""How busy the cluster's links were over the step (`Result.links`), as a picture: the busiest
link directions, and for each kind of link (NVLink, PCIe, NIC to leaf, leaf to spine) how its
busy fractions spread."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KIND_COLORS = {"nvlink": "#4c72b0", "pcie": "#8172b2", "ib": "#dd8452", "uplink": "#c44e52"}
KIND_NAMES = {"nvlink": "NVLink", "pcie": "GPU-NIC (PCIe)", "ib": "NIC-leaf (IB)", "uplink": "leaf-spine"}


def plot_links(links, paths: list[Path] | Path, title: str = "", top: int = 16) -> list[Path]:
    paths = [paths] if isinstance(paths, Path) else list(paths)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [3, 2]})
    kinds = [k for k in KIND_NAMES if k in set(links.kind)] + sorted(set(links.kind) - set(KIND_NAMES))
    per_kind = max(1, top // max(1, len(kinds)))  # the busiest of every kind, so no kind hides another
    busiest = links.groupby("kind", sort=False).head(per_kind)
    busiest = busiest.sort_values("busy_fraction", kind="stable").reset_index(drop=True)
    labels = [f"{src} → {dst}" for src, dst in zip(busiest.src, busiest.dst)]
    left.barh(labels, busiest.busy_fraction * 100, color=[KIND_COLORS.get(k, "grey") for k in busiest.kind])
    for y, (frac, nbytes) in enumerate(zip(busiest.busy_fraction, busiest.bytes)):
        left.text(frac * 100, y, f" {nbytes / 1e9:,.1f} GB", va="center", fontsize=7)
    left.set_xlabel("busy (% of the step, mean utilisation of that direction)")
    left.set_title(f"busiest {per_kind} link directions of each kind (of {len(links)})", fontsize=10)
    left.tick_params(axis="y", labelsize=7)
    kinds = [k for k in kinds if k in KIND_NAMES]
    data = [links.busy_fraction[links.kind == k] * 100 for k in kinds]
    box = right.boxplot(data, patch_artist=True, showfliers=True)
    for patch, kind in zip(box["boxes"], kinds):
        patch.set_facecolor(KIND_COLORS[kind])
    right.set_xticks(range(1, len(kinds) + 1), [KIND_NAMES[k] for k in kinds], rotation=15, fontsize=8)
    right.set_ylabel("busy (%)")
    totals = [links.bytes[links.kind == k].sum() / 1e12 for k in kinds]
    right.set_title("by kind of link; TB moved: " + ", ".join(f"{t:,.1f}" for t in totals), fontsize=10)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return paths

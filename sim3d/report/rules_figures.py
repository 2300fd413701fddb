"""One figure per rule of thumb (sim3d/studies/rules): what the rule claims drawn beside what
the closed form, sim3d and the published runs say. Figure + Agg, no pyplot; the widths are
the Gantt chart's (gantt_sizes.py: a paper's text or column width, or a screen), and panels
that sit side by side on a page stack in a column."""

from __future__ import annotations

from .gantt_sizes import SIZES

RULE = "#888888"          # what the rule claims: grey bands and lines
CLOSED = "tab:green"      # closed forms
SIM = "tab:blue"          # sim3d
PUBLISHED = "black"       # published runs
BAD = "tab:red"


def rule_figure(check, size: str = "page"):
    """The Figure for one RuleCheck, drawn at `size` (a key of gantt_sizes.SIZES)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, k = SIZES[size]
    panels = _PANELS.get(check.key, 1)
    stacked = size == "column" and panels > 1
    height = (2.5 * panels if stacked else 3.0) * max(k, 0.8) + (0.4 if size == "screen" else 0)
    with matplotlib.rc_context({"font.size": 8 * k, "axes.titlesize": 8.5 * k, "axes.labelsize": 8 * k,
                                "xtick.labelsize": 7 * k, "ytick.labelsize": 7 * k, "legend.fontsize": 6.5 * k,
                                "lines.markersize": 4.5 * k, "figure.titlesize": 9 * k, "axes.grid": True,
                                "grid.alpha": 0.3}):
        fig = Figure(figsize=(width, height), layout="constrained")
        FigureCanvasAgg(fig)  # no pyplot: nothing left in a global registry of figures
        axes = fig.subplots(panels, 1) if stacked else fig.subplots(1, panels)
        axes = list(axes) if panels > 1 else [axes]
        _DRAW[check.key](check, axes)
        fig.suptitle(f"Rule {check.number}: {check.title} -- {check.verdict}", fontweight="bold")
    return fig


def _pcts(ax, axis: str = "y") -> None:
    from matplotlib.ticker import FuncFormatter
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:g}%"))


def _log2(ax, values) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(values)))
    ax.set_xticklabels([f"{v:g}" for v in sorted(set(values))])
    ax.minorticks_off()


def _microbatches(check, axes) -> None:
    from ..schedule.bubble import bubble_1f1b
    ax = axes[0]
    cases = check.cases
    p = cases[0]["p"]
    m_all = range(max(1, min(c["m"] for c in cases) // 2), max(c["m"] for c in cases) + 1)
    ax.plot([m / p for m in m_all], [bubble_1f1b(p, m) for m in m_all], color=CLOSED, label="(P-1)/(M+P-1)")
    ax.plot([c["m_over_p"] for c in cases], [c["unit_cost"] for c in cases], "s", color=CLOSED, mfc="none",
            label="sim3d schedule, unit costs")
    ax.plot([c["m_over_p"] for c in cases], [c["simulated"] for c in cases], "o-", color=SIM,
            label="GPT-3 175B simulated (heavier last stage)")
    ax.axhline(0.10, color=RULE, linestyle="--", linewidth=1)
    ax.axvline(4, color=RULE, linestyle=":", linewidth=1)
    ax.annotate("rule: M >= 4P keeps\nthe bubble < 10%", (4, 0.10), xytext=(-8, 60), textcoords="offset points",
                color=RULE, ha="right", arrowprops={"arrowstyle": "-", "color": RULE, "linewidth": 0.6})
    _log2(ax, [c["m_over_p"] for c in cases])
    ax.set_xlabel(f"micro-batches per pipeline stage M/P (P = {p})")
    ax.set_ylabel("bubble (idle share of the least busy rank)")
    _pcts(ax)
    ax.set_ylim(0, None)
    ax.legend(loc="upper right")


def _interleaving(check, axes) -> None:
    left, right = axes
    ms = [c["m"] for c in check.cases]
    for key, style, label in (("closed_1", "-", "closed form, vpp 1"), ("closed_2", "--", "closed form, vpp 2")):
        left.plot(ms, [c[key] for c in check.cases], style, color=CLOSED, label=label)
    for key, style, label in (("sim_1", "o-", "GPT-3 simulated, vpp 1"), ("sim_2", "s--", "GPT-3 simulated, vpp 2")):
        left.plot(ms, [c[key] for c in check.cases], style, color=SIM, label=label)
    left.set_ylabel("bubble")
    right.plot(ms, [c["closed_cut"] for c in check.cases], "-", color=CLOSED, label="bubble cut, closed form")
    right.plot(ms, [c["sim_cut"] for c in check.cases], "o-", color=SIM, label="bubble cut, GPT-3 simulated")
    right.plot(ms, [c["step_gain"] for c in check.cases], "^:", color="tab:purple", label="step time saved")
    right.axhspan(0.4, 0.6, color=RULE, alpha=0.2, label="rule: about half")
    right.set_ylabel("reduction by vpp 2")
    right.set_ylim(0, 0.7)
    for ax in axes:
        _log2(ax, ms)
        ax.set_xlabel("micro-batches per pipeline M (P = 16)")
        _pcts(ax)
        ax.legend(loc="upper right")


def _parallelism_costs(check, axes) -> None:
    names = [c["case"] for c in check.cases]
    for ax, dim in zip(axes, ("tp", "pp", "dp")):
        used = [c[f"uses_{dim}"] for c in check.cases]
        values = [c[dim] for c in check.cases]
        lo, hi = check.bands[dim]
        colors = [SIM if not u else (CLOSED if lo <= v <= hi else BAD) for v, u in zip(values, used)]
        for i, (value, color, u) in enumerate(zip(values, colors, used)):
            if u:
                ax.barh(i, value, color=color)
        ax.axvspan(lo, hi, color=RULE, alpha=0.25)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names if ax is axes[0] else [""] * len(names))
        ax.invert_yaxis()
        ax.set_title(f"{dim.upper()} (rule: {100 * lo:g}-{100 * hi:g}%)")
        _pcts(ax, "x")
    axes[0].figure.supxlabel("exposed share of the critical rank's step (green: inside the rule's band, red: outside; "
                             "no bar: the scenario does not use it)")


def _tp_domain(check, axes) -> None:
    ax = axes[0]
    cases = sorted(check.cases, key=lambda c: (c["gpu"] != "h100", -c["tp"], c["crosses"]))
    colors = [BAD if c["crosses"] else SIM for c in cases]
    ax.barh(range(len(cases)), [c["step_s"] for c in cases], color=colors)
    for i, c in enumerate(cases):
        ax.text(c["step_s"], i, f" {c['step_s']:.2f} s", va="center")
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels([c["case"] for c in cases])
    ax.invert_yaxis()
    ax.set_xlim(0, max(c["step_s"] for c in cases) * 1.2)
    ax.set_xlabel("step time (s), GPT-3 175B on 1024 GPUs (red: TP crosses the NVLink domain)")


def _dp_ethernet(check, axes) -> None:
    models = list(dict.fromkeys(c["model"] for c in check.cases))
    networks = list(dict.fromkeys(c["network"] for c in check.cases))
    ax = axes[0]
    width = 0.8 / (2 * len(models))
    for i, model in enumerate(models):
        for j, overlap in enumerate((True, False)):
            rows = [next(c for c in check.cases
                         if c["model"] == model and c["network"] == n and c["overlap"] == overlap) for n in networks]
            x = [k + (2 * i + j - len(models) + 0.5) * width for k in range(len(networks))]
            ax.bar(x, [r["slowdown"] for r in rows], width, color=f"C{i}", alpha=1.0 if overlap else 0.45,
                   label=f"{model}, {'overlapped' if overlap else 'not overlapped'}")
    ax.set_xticks(range(len(networks)))
    ax.set_xticklabels(networks)
    ax.set_ylabel("step time vs 8x 400G, overlapped")
    _pcts(ax)
    ax.legend(loc="upper left")


def _tp8(check, axes) -> None:
    ax = axes[0]
    for i, model in enumerate(dict.fromkeys(c["model"] for c in check.cases)):
        rows = [c for c in check.cases if c["model"] == model]
        ax.plot([r["tp"] for r in rows], [r["vs_best"] for r in rows], "o-", color=f"C{i}", label=model)
    ax.axvline(8, color=RULE, linestyle="--", linewidth=1)
    ax.text(8, 1.0, " rule: T = 8", transform=ax.get_xaxis_transform(), va="top", color=RULE)
    _log2(ax, [c["tp"] for c in check.cases])
    ax.set_xlabel("tensor-parallel degree T (fastest pipeline depth that fits for each)")
    ax.set_ylabel("step time over the fastest T")
    _pcts(ax)
    ax.legend(loc="upper left")


def _even_split(check, axes) -> None:
    ax = axes[0]
    cases = check.cases
    colors = {"uneven": SIM, "even": CLOSED, "even, other model": "tab:olive", "even, published": "tab:gray"}
    ax.barh(range(len(cases)), [c["tokens_per_s_per_gpu"] for c in cases], color=[colors[c["split"]] for c in cases])
    for i, c in enumerate(cases):
        note = "" if c["fits"] else " (does not fit)"
        if c.get("published"):
            ax.plot([c["published"]], [i], "D", color=PUBLISHED, label="published")
            note += f" (published {c['published']:.0f})"
        ax.text(max(c["tokens_per_s_per_gpu"], c.get("published") or 0), i, f" {c['tokens_per_s_per_gpu']:.0f}{note}",
                va="center", color=BAD if not c["fits"] else "black")
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels([c["case"] for c in cases])
    ax.invert_yaxis()
    ax.set_xlim(0, max(c["tokens_per_s_per_gpu"] for c in cases) * 1.45)
    ax.set_xlabel("tokens/s per GPU, Llama 3.1 405B on H100 (blue: uneven split; green: even)")
    if any(c.get("published") for c in cases):
        ax.legend(loc="lower right")


def _selective(check, axes) -> None:
    left, right = axes
    published = [c for c in check.cases if c.get("published")]
    simulated = [c for c in check.cases if not c.get("published")]
    groups = list(dict.fromkeys((c["model"], c["sp"]) for c in simulated))
    width = 0.27
    for j, recompute in enumerate(("none", "selective", "full")):
        rows = [next(c for c in simulated if (c["model"], c["sp"]) == g and c["recompute"] == recompute)
                for g in groups]
        left.bar([i + (j - 1) * width for i in range(len(groups))], [r["peak_gib"] for r in rows], width,
                 color=f"C{j}", label=f"recompute {recompute}")
    left.axhline(80, color=RULE, linestyle=":", linewidth=1)
    left.set_xticks(range(len(groups)))
    left.set_xticklabels([f"{m}\n{'SP' if sp else 'no SP'}" for m, sp in groups])
    left.set_ylabel("peak memory per GPU (GiB)")
    left.legend(loc="upper right")
    for recompute, marker in (("selective", "o"), ("full", "s")):
        rows = [c for c in simulated if c["recompute"] == recompute]
        right.plot([r["time_cost"] for r in rows], [r["peak_saved"] for r in rows], marker, color=SIM,
                   mfc=SIM if recompute == "selective" else "none", label=f"sim3d, {recompute}")
    for c in published:
        right.plot([c["time_cost"]], [c["peak_saved"]], "D", color=PUBLISHED, label=c["model"])
    right.plot([0.15], [0.30], "*", color=RULE, markersize=12, label="the rule: 15% time, 30% memory")
    right.set_xlabel("step time added")
    right.set_ylabel("memory saved (vs no recomputation)")
    right.set_xlim(0, None)
    right.set_ylim(0, None)
    _pcts(right)
    _pcts(right, "x")
    right.legend(loc="lower right")


def _gpt3_memory(check, axes) -> None:
    ax = axes[0]
    cases = check.cases
    left = [0.0] * len(cases)
    for key, color, label in (("states_gib", "C0", "weights + grads + optimizer"),
                              ("activations_gib", "C1", "activations"), ("reserve_gib", "C7", "reserve")):
        ax.barh(range(len(cases)), [c[key] for c in cases], left=left, color=color, label=label)
        left = [a + c[key] for a, c in zip(left, cases)]
    gib40 = 40e9 / 2**30
    ax.axvline(gib40, color=RULE, linestyle="--", linewidth=1)
    ax.annotate("rule: 40 GB", (gib40, len(cases) - 0.5), xytext=(3, 0), textcoords="offset points", color=RULE)
    ax.axvline(80e9 / 2**30, color=BAD, linestyle=":", linewidth=1)
    ax.set_yticks(range(len(cases)))
    ax.set_yticklabels([c["case"] for c in cases])
    ax.invert_yaxis()
    ax.set_xlabel("peak memory per GPU, worst pipeline rank (GiB; dotted: 80 GB HBM)")
    ax.legend(loc="center right")


def _scaling(check, axes) -> None:
    left, right = axes
    series = list(dict.fromkeys((c["model"], c["scaling"] if c["scaling"] not in ("both", "mfu") else None)
                                for c in check.cases))
    for i, (model, kind) in enumerate(s for s in series if s[1] is not None):
        rows = sorted((c for c in check.cases if c["model"] == model and c["scaling"] in (kind, "both")),
                      key=lambda c: c["gpus"])
        if "published" in model:
            left.plot([r["gpus"] for r in rows], [r["published_efficiency"] for r in rows], "D-", color=PUBLISHED,
                      mfc="none" if "MT-NLG" in model else PUBLISHED, label=f"{model} ({kind}, vs smallest)")
            continue
        left.plot([r["gpus"] for r in rows], [r["efficiency"] for r in rows], "o-" if kind == "weak" else "s--",
                  color=f"C{i}", label=f"{model}, {kind}")
    left.add_patch(_band(left, 8, 8, 0.85, 0.95))
    left.add_patch(_band(left, 2048, 16384, 0.65, 0.75))
    _log2(left, [8, 64, 512, 4096])
    left.set_xlim(5, 16384 * 1.5)
    left.set_xlabel("GPUs")
    left.set_ylabel("per-GPU throughput / one GPU alone")
    left.set_ylim(0, 1.1)
    _pcts(left)
    left.legend(loc="lower left")
    sim = [c["mfu"] for c in check.cases if c["published_step_s"] is None and c["scaling"] != "mfu"]
    published = [c["published_mfu"] for c in check.cases if c["published_mfu"] is not None]
    right.axhspan(0.45, 0.60, color=RULE, alpha=0.25, label="rule: 45-60%")
    right.plot([0] * len(sim), sim, "o", color=SIM, alpha=0.6, label="sim3d cases")
    right.plot([1] * len(published), published, "D", color=PUBLISHED, mfc="none", label="published runs")
    right.set_xticks([0, 1])
    right.set_xticklabels(["sim3d", "published"])
    right.set_xlim(-0.6, 1.6)
    right.set_ylabel("MFU")
    right.set_ylim(0, 0.8)
    _pcts(right)
    right.legend(loc="upper right")


def _band(ax, x0: float, x1: float, y0: float, y1: float):
    """The rule's claimed range as a grey box; a single GPU count gets a box a quarter-octave wide."""
    from matplotlib.patches import Rectangle
    lo, hi = x0 / 2**0.25, x1 * 2**0.25
    return Rectangle((lo, y0), hi - lo, y1 - y0, color=RULE, alpha=0.25, label="rule" if x0 == 8 else None)


_DRAW = {"01-microbatches": _microbatches, "02-interleaving": _interleaving, "03-parallelism-costs": _parallelism_costs,
         "04-tp-domain": _tp_domain, "05-dp-ethernet": _dp_ethernet, "06-tp8": _tp8, "07-even-split": _even_split,
         "08-selective-recompute": _selective, "09-gpt3-memory": _gpt3_memory, "10-scaling": _scaling}
_PANELS = {"02-interleaving": 2, "03-parallelism-costs": 3, "08-selective-recompute": 2, "10-scaling": 2}

"""The layout space `sim3d plan` searches: every dimension, its default values, the rules that
exclude a combination, and the scenario a layout makes.

A layout is the product of the dimensions below with dp derived (GPUs / (tp*cp*pp)). The
exclusions are the ones Megatron-LM itself enforces or that make two layouts the same run,
each named so that a search can count what it dropped and why:

- `gpus`: tp*cp*pp does not divide the GPUs;
- `batch`: micro_batch*dp does not divide the global batch;
- `shape`: tp does not divide heads, kv heads, ffn and vocab; pp*vpp does not divide the
  layers (uneven splits are for hand-made layouts; with the base scenario's Megatron split
  options, the split Megatron would refuse); cp does not divide seq_len/2 (Megatron's
  load-balanced ring); ep > 1 on a dense model, or ep not dividing the experts, or etp*ep not
  dividing tp*cp*dp (etp, the experts' tensor parallelism, is held at the base scenario's:
  tp unless it names one), or etp apart from tp > 1 without sequence parallelism (Megatron
  asserts it for MoE with TP); the shard group (`dp_shard`, HSDP) does not divide dp*cp, or
  its replicas do not divide the experts' data-parallel replicas (Megatron asserts it);
- `schedule`: a schedule's own rule (`ScheduleSpec.accepts`, schedule/specs.py: interleaved:
  vpp >= 2 and micro-batches a multiple of pp; zbv / dualpipev: vpp = 2, dualpipev at least
  2*pp micro-batches; the planner proposes the specs marked `planned`; every schedule but
  1f1b needs pp > 1, where they are all 1f1b; V schedules do not take Megatron's split
  options; a schedule whose replay exceeds SIM3D_MAX_ACTIONS);
- `order`: Megatron-LM allows --use-tp-pp-dp-mapping only with cp = ep = 1 (arguments.py);
  an MoE layout's expert grid must keep the dense pipelines, and with pp not last the dense
  data parallelism (parallel_state.py), and sim3d's pricing needs expert TP groups equal to
  the TP groups (Placement.expert_grid_problem);
- `same run`: a switch that changes nothing is held at its default (sequence parallelism and
  TP overlap without tp > 1, TP overlap without sequence parallelism, which Megatron asserts,
  the distributed optimizer without dp*cp > 1 or expert replicas, the rank order without both pp > 1 and
  dp > 1, a shard group that two values of `dp_shard` both name, e.g. 8 and `all` where dp*cp is
  8, and with ZeRO 0, which shards nothing, every value), so each run is counted once.
"""

from __future__ import annotations

import itertools
from operator import attrgetter
from dataclasses import dataclass, fields
from functools import cached_property, lru_cache
from types import SimpleNamespace

from ..scenario.comma_items import comma_items
from ..scenario.limits import PLAN_COMBINATIONS, PLAN_LAYOUTS, WorkLimitExceeded, check_schedule_size
from ..scenario.pipeline_split import layout_stages, megatron_stage_layers
from ..errors import ScenarioError
from ..scenario.checks import AXES
from ..scenario.load import canonical_key
from ..scenario.schema import Scenario
from ..scenario.sharding import SHARDING_SPELLINGS
from ..cluster.placement import Placement
from ..schedule.specs import SCHEDULES, planned_schedules

MICRO_BATCHES = tuple(range(1, 9))  # and every divisor of the global batch
RECOMPUTE = ("none", "selective", "full")
CONTEXT_PARALLEL = (1, 2, 4, 8)
SWITCHES = (False, True)


@dataclass(frozen=True, order=True)
class Layout:
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    vpp: int
    micro_batch: int
    schedule: str
    recompute: str
    sequence_parallel: bool
    zero: int  # ZeRO stage: what data parallelism shards
    tp_comm_overlap: bool
    order: str
    dp_shard: int  # ranks one shard of the sharded states spans: dp*cp, or fewer (HSDP)

    def row(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def values(self) -> tuple:
        """The fields in order (dataclasses.astuple, without its deep copy of each value)."""
        return _LAYOUT_FIELDS(self)


_LAYOUT_FIELDS = attrgetter(*(f.name for f in fields(Layout)))

# layout field -> scenario key (what --fix / --space and the overrides name)
KEYS = {"tp": "parallel.tp", "pp": "parallel.pp", "dp": "parallel.dp", "cp": "parallel.cp", "ep": "parallel.ep",
        "vpp": "parallel.vpp", "micro_batch": "training.micro_batch", "schedule": "schedule",
        "recompute": "training.recompute", "sequence_parallel": "parallel.sequence_parallel",
        "zero": "parallel.zero", "tp_comm_overlap": "training.tp_comm_overlap",
        "order": "parallel.order", "dp_shard": "parallel.dp_shard"}
FIELD_OF = {key: name for name, key in KEYS.items()} | {key.split(".")[-1]: name for name, key in KEYS.items()}
BOOLEAN = {"sequence_parallel", "tp_comm_overlap"}
# ZeRO stages the planner tries: replicas, then the optimizer state, gradients and parameters
# sharded over the shard group: every dp x cp rank (ALL_RANKS), or as many as the base
# scenario's HSDP groups hold; `--space parallel.dp_shard=8,all` tries both
ZERO_STAGES = (0, 1, 2, 3)
ALL_RANKS = "all"
TEXT = {"schedule", "recompute", "order"}
# Megatron-LM's rank orders: the default, and --use-tp-pp-dp-mapping (pipeline stages on
# neighbouring ranks, data-parallel replicas far apart; megatron/training/arguments.py)
ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")
PP_DP_ORDER = ORDERS[1]


def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def _value(name: str, text: str):
    text = text.strip()
    if name == "dp_shard" and text.lower() == ALL_RANKS:
        return ALL_RANKS
    if name in BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise ScenarioError(f"{KEYS[name]}: expected true or false, got {text!r}")
        return text.lower() == "true"
    if name in TEXT:
        return text
    try:
        value = int(text)
    except ValueError:
        also = f" or {ALL_RANKS!r}" if name == "dp_shard" else ""
        raise ScenarioError(f"{KEYS[name]}: expected a whole number{also}, got {text!r}") from None
    if value < 1:
        raise ScenarioError(f"{KEYS[name]}: expected a positive number, got {value}")
    return value


def parse_choices(fix: list[str], space: list[str]) -> dict[str, tuple]:
    """`--fix KEY=V` and `--space KEY=V1,V2` as {layout field: values}."""
    out: dict[str, tuple] = {}
    for option, items, many in (("--fix", fix, False), ("--space", space, True)):
        for item in items:
            key, sep, values = item.partition("=")
            name = FIELD_OF.get(key.strip())
            if not sep or not values.strip():
                raise ScenarioError(f"{option} {item!r}: expected KEY=VALUE{',VALUE...' if many else ''}")
            if name is None:
                raise ScenarioError(f"{option} {key!r}: not a layout dimension; known: {', '.join(KEYS.values())}")
            if name in out:
                raise ScenarioError(f"{option} {key}: given twice")
            parts = comma_items(values, option, item) if many else [values]
            if name == "schedule":
                unknown = [p for p in parts if p.strip() not in SCHEDULES]
                if unknown:
                    raise ScenarioError(f"{option} {key}: unknown schedule {unknown[0]!r}; known: "
                                        + ", ".join(SCHEDULES))
            if name == "order" and any(sorted(p.strip().split("-")) != sorted(AXES) for p in parts):
                raise ScenarioError(f"{option} {key}: a rank order lists each of {', '.join(AXES)} once, joined by '-' "
                                    f"(e.g. {ORDERS[0]}), got {values!r}")
            if name == "recompute" and any(p.strip() not in RECOMPUTE for p in parts):
                raise ScenarioError(f"{option} {key}: expected {', '.join(RECOMPUTE)}, got {values!r}")
            out[name] = tuple(dict.fromkeys(_value(name, p) for p in parts))
    return out


@dataclass
class Space:
    """The layouts of the base scenario's model on `gpus` GPUs of its cluster kind."""

    base: Scenario
    gpus: int
    choices: dict[str, tuple]  # --fix / --space, by layout field
    sets: tuple[str, ...] = ()  # the --set texts `base` was read with: every layout's overrides start with them

    def __post_init__(self):
        if self.base.faults:
            raise ScenarioError("plan searches layouts of a healthy cluster: faults name ranks, nodes and NICs of one "
                                "layout; remove them, plan, then run the pick with its faults")
        per_node = self.base.gpus_per_node
        if self.gpus % per_node and self.gpus > per_node:
            raise ScenarioError(f"--gpus {self.gpus} is not a whole number of {per_node}-GPU nodes")
        domain = self.base.cluster.intra_node.domain_nodes
        if domain > 1 and self.gpus % self.base.nvlink_domain_gpus:
            raise ScenarioError(f"--gpus {self.gpus} is not a whole number of {self.base.nvlink_domain_gpus}-GPU "
                                f"NVLink domains (cluster.intra_node.domain_nodes: {domain})")
        self.nodes, self.gpus_per_node = (self.gpus // per_node, per_node) if self.gpus >= per_node else (1, self.gpus)

    # ---- the dimensions -------------------------------------------------------------
    @cached_property
    def dimensions(self) -> dict[str, tuple]:
        """Values of each dimension before the exclusions (dp is derived, not a dimension)."""
        m = self.base.model
        domain = min(self.base.nvlink_domain_gpus, self.gpus)  # tensor parallelism stays on NVLink
        dims = {
            "tp": _divisors(domain),
            "cp": tuple(c for c in CONTEXT_PARALLEL if c <= self.gpus),
            "ep": _divisors(m.moe.experts) if m.moe else (1,),
            "pp": self._stage_counts(),
            "vpp": self._stage_counts(),
            "micro_batch": tuple(sorted(set(MICRO_BATCHES) | set(_divisors(self.base.training.global_batch)))),
            "schedule": planned_schedules(),
            "recompute": RECOMPUTE,
            "sequence_parallel": SWITCHES,
            # the flow network refuses per-unit sharding (scenario/checks.py): ZeRO 0 and 1 there
            "zero": ZERO_STAGES if self.base.costs.network != "flow" else tuple(z for z in ZERO_STAGES if z < 2),
            # Transformer Engine's userbuffers: a switch of the te stack alone (scenario/checks.py)
            "tp_comm_overlap": SWITCHES if self.base.training.kernels.stack == "te" else (False,),
            "order": ORDERS,
            "dp_shard": self._base_shard_group(),
        }
        dims.update({k: v for k, v in self.choices.items() if k != "dp"})
        return dims

    def _base_shard_group(self) -> tuple:
        """The base scenario's shard group, kept in every layout: all dp x cp ranks, or its HSDP
        groups' size (`parallel.dp_shard`, or dp x cp / `parallel.dp_replicate`)."""
        base = self.base
        return (base.shard_group,) if base.shard_group < base.dp * base.cp else (ALL_RANKS,)

    def _stage_counts(self) -> tuple[int, ...]:
        """Divisors of the layers, and with Megatron's split options of the layers counted with
        the embedding and loss too (Llama 3.1 405B: 126 + 2 = 128 over pp 8 x vpp 8); with a
        pipeline layout, of its stages (pp x vpp must make them: `_split_problem`)."""
        par, layers = self.base.parallel, self.base.model.layers
        if par.pipeline_layout is not None:
            return _divisors(len(layout_stages(par.pipeline_layout)))
        counted = layers + par.account_for_embedding_in_pipeline_split + par.account_for_loss_in_pipeline_split
        return tuple(sorted(set(_divisors(layers)) | set(_divisors(counted))))

    def size(self) -> int:
        """The product of the dimensions: what the exclusions are counted against."""
        n = 1
        for values in self.dimensions.values():
            n *= len(values)
        return n

    def check_size(self) -> None:
        """WorkLimitExceeded when the dimensions' product is too large to walk."""
        PLAN_COMBINATIONS.check(self.size(), " x ".join(f"{len(v)} {k}" for k, v in self.dimensions.items()))

    def layouts(self) -> tuple[list[Layout], dict[str, int]]:
        """Every valid layout, and how many combinations each exclusion dropped."""
        self.check_size()
        d, g = self.dimensions, self.gpus
        dropped = dict.fromkeys(("gpus", "batch", "shape", "schedule", "order", "same run", "fixed dp"), 0)
        out: list[Layout] = []
        rest = 1
        for key in ("micro_batch", "vpp", "schedule", "recompute", "sequence_parallel", "zero",
                    "tp_comm_overlap", "order", "dp_shard"):
            rest *= len(d[key])
        inner = rest // (len(d["micro_batch"]) * len(d["vpp"]) * len(d["schedule"]))
        shards = len(d["dp_shard"])
        want_dp = self.choices.get("dp")
        for tp, cp, ep, pp in itertools.product(d["tp"], d["cp"], d["ep"], d["pp"]):
            if g % (tp * cp * pp):
                dropped["gpus"] += rest
                continue
            dp = g // (tp * cp * pp)
            if want_dp is not None and dp not in want_dp:
                dropped["fixed dp"] += rest
                continue
            if not self._shape_ok(tp, cp, ep, pp, dp):
                dropped["shape"] += rest
                continue
            edp = (_expert_grid(tp, pp, dp, cp, ep, d["order"][0], self._expert_tp(tp)).expert_data_parallel
                   if self.base.model.moe is not None else 1)
            for mb in d["micro_batch"]:
                if self.base.training.global_batch % (mb * dp):
                    dropped["batch"] += rest // len(d["micro_batch"])
                    continue
                micro = self.base.training.global_batch // (mb * dp)
                for vpp, schedule in itertools.product(d["vpp"], d["schedule"]):
                    problem = self._schedule_problem(schedule, pp, vpp, micro)
                    if problem:
                        dropped[problem] += inner
                        continue
                    for recompute, sp, dist, overlap, order in itertools.product(
                            d["recompute"], d["sequence_parallel"], d["zero"], d["tp_comm_overlap"],
                            d["order"]):
                        if ((sp and tp == 1) or (overlap and not sp) or (dist and dp * cp == 1 and edp == 1)
                                or (order != d["order"][0] and (pp == 1 or dp == 1))):
                            dropped["same run"] += shards
                            continue
                        folded = self._expert_tp(tp) != tp
                        if (folded and not sp) or self._refused_switches(tp, ep, recompute, sp):
                            dropped["shape"] += shards
                            continue
                        if (order == PP_DP_ORDER and (cp > 1 or ep > 1)) or not self._experts_laid_out(
                                tp, pp, dp, cp, ep, order):
                            dropped["order"] += shards
                            continue
                        groups: set[int] = set()
                        for shard in d["dp_shard"]:
                            # with nothing sharded (ZeRO 0) there are no shard groups: one run
                            group = dp * cp if shard == ALL_RANKS or dist == 0 else shard
                            if (dp * cp) % group or (dp * cp > group and edp % (dp * cp // group)
                                                     and self.base.model.moe is not None):
                                dropped["shape"] += 1
                            elif group in groups:
                                dropped["same run"] += 1
                            else:
                                groups.add(group)
                                out.append(Layout(tp, pp, dp, cp, ep, vpp, mb, schedule, recompute, sp, dist, overlap,
                                                  order, group))
                if len(out) > PLAN_LAYOUTS.value:
                    PLAN_LAYOUTS.check(len(out), "valid layouts of this space, counted so far (narrow it with --fix or "
                                                  "--space)")
        return out, dropped

    def _shape_ok(self, tp: int, cp: int, ep: int, pp: int, dp: int) -> bool:
        m = self.base.model
        if m.heads % tp or m.num_kv_heads % tp or m.ffn % tp or m.vocab % tp:
            return False
        if cp > 1 and m.seq_len % (2 * cp):
            return False
        etp = self._expert_tp(tp)
        if etp not in (1, tp) or (tp * cp * dp) % (etp * ep) or (ep > 1 and (m.moe is None or m.moe.experts % ep)):
            return False
        return self.base.megatron_split or m.layers % pp == 0

    def _experts_laid_out(self, tp: int, pp: int, dp: int, cp: int, ep: int, order: str) -> bool:
        """The expert grid of this layout runs (Placement.expert_grid_problem; dense models: always)."""
        if self.base.model.moe is None:
            return True
        return _expert_grid(tp, pp, dp, cp, ep, order, self._expert_tp(tp)).expert_grid_problem is None

    def _expert_tp(self, tp: int) -> int:
        """The experts' tensor parallelism of a layout with this tp (the base's etp, else tp)."""
        etp = self.base.parallel.etp
        return tp if etp is None or self.base.model.moe is None else etp

    def _refused_switches(self, tp: int, ep: int, recompute: str, sp: bool) -> bool:
        """What Megatron refuses under the base scenario's MoE switches (scenario/checks.py): the
        EP all-to-all overlap without expert parallelism or under full or per-op recomputation,
        the allgather dispatcher's expert TP without sequence parallelism."""
        tr = self.base.training
        if tr.moe_a2a_overlap and (ep == 1 or recompute in ("full", "op")):
            return True
        return (self.base.model.moe is not None and tr.moe_dispatcher == "allgather" and self._expert_tp(tp) > 1
                and not sp)

    def _schedule_problem(self, schedule: str, pp: int, vpp: int, micro: int) -> str:
        if self._split_problem(pp, vpp):
            return "shape"
        if self.base.training.moe_a2a_overlap and (schedule not in ("1f1b", "interleaved-1f1b") or (pp > 1 and vpp == 1)):
            return "schedule"  # Megatron's combined 1F1B: a virtual pipeline wherever there is a pipeline
        if pp == 1:
            return "" if (schedule, vpp) == ("1f1b", 1) else "schedule"
        spec = SCHEDULES[schedule]
        if self.base.megatron_split and spec.placement == "v":
            return "schedule"
        try:
            check_schedule_size(pp, micro, vpp)
        except WorkLimitExceeded:
            return "schedule"
        return "" if spec.accepts(pp, vpp, micro) else "schedule"

    def _split_problem(self, pp: int, vpp: int) -> bool:
        """The layers do not split over pp*vpp stages (Megatron's rules when the base scenario
        uses its split options, evenly otherwise)."""
        if not self.base.megatron_split:
            return self.base.model.layers % (pp * vpp) != 0
        shape = SimpleNamespace(parallel=self.base.parallel, pp=pp, vpp=vpp, model=self.base.model)
        return megatron_stage_layers(shape)[1] is not None

    # ---- a layout as a scenario ---------------------------------------------------------
    def overrides(self, layout: Layout) -> tuple[str, ...]:
        """The `--set` texts that make `layout` of the base scenario's file (as `scenario` does)."""
        # the layout's parallel.zero replaces any spelling of the sharding the user's --set gave
        given = tuple(t for t in self.sets if canonical_key(t.partition("=")[0]).partition(".")[2]
                      not in SHARDING_SPELLINGS)
        sets = given + tuple(f"{key}={str(getattr(layout, name)).lower()}" for name, key in KEYS.items()
                             if name != "dp_shard")
        gather = self.base.training.overlap_param_gather and layout.zero >= 1
        return sets + (f"parallel.dp_shard={_dp_shard(layout) or 'null'}", "parallel.dp_replicate=null",
                       f"training.overlap_param_gather={str(gather).lower()}", f"cluster.nodes={self.nodes}",
                       f"cluster.gpus_per_node={self.gpus_per_node}",
                       f"training.recompute_num_layers={self.recomputed_layers(layout) or 'null'}",
                       f"training.recompute_modules={self._recomputed_modules_text(layout)}")

    def recomputed_layers(self, layout: Layout) -> int | None:
        """The base's count of recomputed layers per stage, kept for its own policy only: another
        policy the planner tries applies to every layer."""
        t = self.base.training
        return t.recompute_num_layers if layout.recompute == t.recompute else None

    def _recomputed_modules(self, layout: Layout) -> tuple[str, ...] | None:
        """The base's recompute modules, for the selective layouts alone (they name what
        selective recomputation runs again; null there is the attention core)."""
        return self.base.training.recompute_modules if layout.recompute == "selective" else None

    def _recomputed_modules_text(self, layout: Layout) -> str:
        modules = self._recomputed_modules(layout)
        return "null" if modules is None else f"[{','.join(modules)}]"

    def scenario(self, layout: Layout) -> Scenario:
        """The base scenario with this layout, built without re-validating (the space only
        holds layouts the scenario checks accept; the finalists are re-read from YAML)."""
        base = self.base
        parallel = base.parallel.model_copy(update={
            "tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "cp": layout.cp, "ep": layout.ep, "vpp": layout.vpp,
            "sequence_parallel": layout.sequence_parallel, "zero": layout.zero, "order": layout.order,
            "dp_shard": _dp_shard(layout), "dp_replicate": None})
        training = base.training.model_copy(update={
            "micro_batch": layout.micro_batch, "recompute": layout.recompute, "tp_comm_overlap": layout.tp_comm_overlap,
            "recompute_num_layers": self.recomputed_layers(layout),
            "recompute_modules": self._recomputed_modules(layout),
            "overlap_param_gather": base.training.overlap_param_gather and layout.zero >= 1})
        cluster = base.cluster.model_copy(update={"nodes": self.nodes, "gpus_per_node": self.gpus_per_node})
        s = base.model_copy(update={"parallel": parallel, "training": training, "cluster": cluster,
                                    "schedule": layout.schedule})
        for derived in ("stage_layers", "stage_mtp"):  # from the layout: never the base's
            s.__dict__.pop(derived, None)
        return s


def _dp_shard(layout: Layout) -> int | None:
    """`parallel.dp_shard` of a layout: None where its shard group is every dp x cp rank."""
    return None if layout.dp_shard == layout.dp * layout.cp else layout.dp_shard


@lru_cache(maxsize=4096)
def _expert_grid(tp: int, pp: int, dp: int, cp: int, ep: int, order: str, etp: int) -> Placement:
    return Placement(tp, pp, dp, cp, ep, order, etp)

"""Consistency of a parsed scenario: every problem as one line naming the field path and the
numbers involved (docs/contracts.md#scenario-file)."""

from __future__ import annotations

from dataclasses import replace

from ..cluster.gpus import PRESETS, attention_kernels, power_limit_problem, suggest
from .bounds import NICS_PER_GPU, SERVER_NICS
from .limits import FLOW_GPUS, GPUS, LAYERS, WorkLimitExceeded, check_schedule_size
from .moe_layers import moe_at
from .pipeline_split import megatron_stage_layers
from .sharding import ShardingPlan
from ..cluster.placement import Placement
from ..schedule.specs import SCHEDULES
AXES = ("tp", "cp", "ep", "dp", "pp")
# Flash attention needs Ampere or newer: FlashAttention-2 supports sm80+ (Dao-AILab/flash-attention README)
FLASH_ATTENTION_CAPABILITY = 8.0


def consistency_problems(s) -> list[str]:
    p: list[str] = []
    m, par, tr = s.model, s.parallel, s.training
    if not any(c.isalnum() for c in s.name):  # '..', '/', ' ' would all name reports/scenario/
        p.append(f"name: {s.name!r} has no letter or digit; it names the run's report folder (reports/<name>/)")
    if s.cluster.gpu not in PRESETS:
        p.append(f"cluster.gpu: unknown GPU preset {s.cluster.gpu!r}{suggest(s.cluster.gpu, PRESETS)}"
                 f"; known: {', '.join(PRESETS)}")
        if s.cluster.gpus_per_node is None:  # the node size comes from the preset
            return p
    size = _size_problems(s)
    if size:
        return p + size  # nothing else is worth deriving for a run this large
    if s.schedule not in SCHEDULES:
        p.append(f"schedule: unknown schedule {s.schedule!r}{suggest(s.schedule, SCHEDULES)}; known: {', '.join(SCHEDULES)}")
    if m.hidden % m.heads and m.kv_channels is None:
        p.append(f"model.hidden: {m.hidden} is not divisible by model.heads={m.heads} (set model.kv_channels "
                 "for a head dimension of its own)")
    if m.heads % m.num_kv_heads:
        p.append(f"model.kv_heads: model.heads={m.heads} is not divisible by kv_heads={m.num_kv_heads}")
    if m.heads % par.tp:
        p.append(f"parallel.tp: model.heads={m.heads} is not divisible by tp={par.tp}")
    if m.num_kv_heads != m.heads and m.num_kv_heads % par.tp:
        p.append(f"parallel.tp: model.kv_heads={m.num_kv_heads} is not divisible by tp={par.tp}")
    if m.ffn % par.tp:
        p.append(f"parallel.tp: ffn_hidden={m.ffn} is not divisible by tp={par.tp}")
    if m.vocab % par.tp:
        p.append(f"parallel.tp: model.vocab={m.vocab} is not divisible by tp={par.tp} (pad the vocabulary)")
    # Megatron may count the embedding and the loss as a layer each: a stage may then hold one alone
    counted = m.layers + par.account_for_embedding_in_pipeline_split + par.account_for_loss_in_pipeline_split
    if s.num_stages > counted and par.pipeline_layout is None:  # a layout says its own stages
        p.append(f"parallel.pp: pp={par.pp} * vpp={par.vpp} = {s.num_stages} stages exceeds {m.layers} layers"
                 + (f" (+ {counted - m.layers} counted for the embedding / loss)" if counted > m.layers else ""))
    elif s.megatron_split:
        if (s.schedule in SCHEDULES and SCHEDULES[s.schedule].placement == "v"
                and (par.decoder_first_pipeline_num_layers is not None or par.decoder_last_pipeline_num_layers is not None
                     or par.pipeline_layout is not None)):
            p.append(f"parallel: Megatron's first/last pipeline rank layer counts and pipeline layouts describe the "
                     f"loop placement (stage g on pipeline rank g % pp); schedule {s.schedule} places stages in a V")
        else:
            problem = megatron_stage_layers(s)[1]
            if problem:
                p.append(problem)
    if par.cp > 1 and m.seq_len % (2 * par.cp):
        p.append(f"parallel.cp: model.seq_len={m.seq_len} is not divisible by 2*cp={2 * par.cp} (load-balanced ring attention)")
    if par.ep > 1 and m.moe is None:
        p.append(f"parallel.ep: ep={par.ep} needs an MoE model (model.moe is null)")
    if m.moe is not None:
        if m.moe.experts % par.ep:
            p.append(f"parallel.ep: model.moe.experts={m.moe.experts} is not divisible by ep={par.ep}")
        if m.moe.top_k > m.moe.experts:
            p.append(f"model.moe.top_k: {m.moe.top_k} exceeds {m.moe.experts} experts")
        groups, chosen = m.moe.router_groups, m.moe.router_group_topk
        if (groups is None) != (chosen is None):
            p.append("model.moe.router_groups and router_group_topk: give both (group-limited routing) or neither")
        elif groups and (m.moe.experts % groups or chosen > groups or m.moe.top_k > chosen * m.moe.experts // groups
                         or chosen > m.moe.top_k):
            p.append(f"model.moe.router_groups: {m.moe.experts} experts in {groups} groups, each token's {m.moe.top_k} "
                     f"among {chosen} of them: the groups must divide the experts and hold the top_k, and a token "
                     "needs an expert in each chosen group (Megatron splits top_k over them)")
        if not any(moe_at(i, m.moe.every, m.moe.first_dense_layers) for i in range(m.layers)):
            p.append(f"model.moe.first_dense_layers: {m.moe.first_dense_layers} of {m.layers} layers, with an MoE "
                     f"layer every {m.moe.every}, leaves no MoE layer (set model.moe to null for a dense model)")
        expert_ffn = m.moe.expert_ffn_hidden or m.ffn
        if s.etp in (1, s.tp) and expert_ffn % s.etp:
            p.append(f"parallel.etp: the experts' ffn hidden size {expert_ffn} is not divisible by etp={s.etp} "
                     "(model.moe.expert_ffn_hidden; each expert's MLP is split over its tensor-parallel ranks)")
        if m.moe.shared_expert_ffn and m.moe.shared_expert_ffn % par.tp:
            # SharedExpertMLP's linears are column/row parallel over TP (Megatron divides the width by tp)
            p.append(f"parallel.tp: model.moe.shared_expert_ffn={m.moe.shared_expert_ffn} is not divisible by "
                     f"tp={par.tp} (the shared experts' MLP is split over the tensor-parallel ranks)")
    if par.sequence_parallel and par.tp > 1 and m.seq_len % (par.cp * par.tp):
        p.append(f"parallel.sequence_parallel: model.seq_len={m.seq_len} is not divisible by cp*tp = "
                 f"{par.cp}*{par.tp} (each tensor-parallel rank holds a whole slice of the sequence)")
    if sorted(par.order.split("-")) != sorted(AXES):
        p.append(f"parallel.order: {par.order!r} must order all of {', '.join(AXES)} separated by '-'")
    if s.world_size != s.num_gpus:
        how = "dp given" if par.dp is not None else "dp derived"
        p.append(f"parallel: tp*pp*dp*cp = {par.tp}*{par.pp}*{s.dp}*{par.cp} = {s.world_size} ({how}) "
                 f"but cluster has {s.num_gpus} GPUs ({s.cluster.nodes} nodes x {s.gpus_per_node})")
    p += _expert_grid_problems(s)
    unit = tr.micro_batch * s.dp
    if tr.global_batch % unit:
        p.append(f"training.global_batch: {tr.global_batch} is not divisible by micro_batch*dp = "
                 f"{tr.micro_batch}*{s.dp} = {unit}")
    if s.schedule in SCHEDULES:
        microbatches = None if tr.global_batch % unit else s.num_microbatches
        p += SCHEDULES[s.schedule].layout_problems(par.pp, par.vpp, microbatches)
    key = "tf32" if tr.precision == "fp32" else tr.precision
    if (s.cluster.gpu in PRESETS and getattr(PRESETS[s.cluster.gpu], f"{key}_tflops") is None
            and getattr(s.cluster, f"{key}_tflops") is None):
        p.append(f"training.precision: {tr.precision} needs {key} tensor cores, which {s.cluster.gpu} lacks")
    if (tr.attention_backend == "flash" and s.cluster.gpu in PRESETS
            and PRESETS[s.cluster.gpu].predates(FLASH_ATTENTION_CAPABILITY)):
        p.append("training.attention_backend: flash attention needs an Ampere or newer GPU (FlashAttention-2 "
                 f"supports sm80+); set training.attention_backend: unfused for {s.cluster.gpu}")
    if s.cluster.power_limit_w is not None and s.cluster.gpu in PRESETS and (
            problem := power_limit_problem(replace(PRESETS[s.cluster.gpu], power_limit_w=s.cluster.power_limit_w))):
        p.append(f"cluster.power_limit_w: {problem}")
    kernel, known = tr.kernels.attention, attention_kernels(s.cluster.gpu)
    if kernel != "default" and tr.attention_backend == "unfused":
        p.append(f"training.kernels.attention: {kernel} names a fused attention kernel, but "
                 "training.attention_backend is unfused (no fused kernel runs)")
    elif kernel not in known:
        p.append(f"training.kernels.attention: {kernel} has no figures for {s.cluster.gpu} (there: "
                 f"{', '.join(known)}; the preset's attention_kernels_with_figures, cluster/gpus.py)")
    if m.mla is not None:
        # priced as Megatron-Core's MLASelfAttention runs it (scenario/latent_attention.py)
        if tr.attention_backend == "unfused" or tr.kernels.mask == "materialized":
            p.append("model.mla: latent attention is priced with the fused kernel and a causal mask "
                     "(training.attention_backend: flash, training.kernels.mask: causal)")
        if tr.kernels.stack != "te" or tr.recompute == "op":
            p.append("model.mla: latent attention is priced as Megatron-Core runs it (training.kernels.stack: te; "
                     "torchtitan's per-op recomputation and the eager / compiled kernel counts are not modelled for it)")
        if m.kv_heads is not None and m.kv_heads != m.heads or m.kv_channels is not None:
            p.append("model.mla: every head has its own keys and values of the latent attention's head dims; "
                     "model.kv_heads and model.kv_channels do not apply (leave them out)")
    if tr.kernels.mask == "materialized" and tr.kernels.attention in ("fa2", "fa3", "triton"):
        p.append(f"training.kernels.mask: materialized runs SDPA with a mask, which {tr.kernels.attention} does not "
                 "take (torch dispatches a masked call to cuDNN's or the memory-efficient kernel): use attention "
                 "default or cudnn")
    # PyTorch's ring attention refuses a mask (torch/distributed/tensor/experimental/_attention.py:
    # "attn_bias is not supported yet")
    if tr.kernels.mask == "materialized" and (s.cp > 1 or tr.attention_backend == "unfused"):
        p.append("training.kernels.mask: materialized describes a mask handed to the fused SDPA kernel; "
                 + ("PyTorch's context parallelism runs causal attention only (no mask)" if s.cp > 1 else
                    "the unfused attention computes every score whatever the mask"))
    if tr.recompute_modules is not None:
        needs = {"mla_up_proj": (m.mla is not None, "model.mla (multi-head latent attention)"),
                 "moe": (m.moe is not None, "model.moe"), "moe_act": (m.moe is not None, "model.moe"),
                 "shared_experts": (m.moe is not None and bool(m.moe.shared_expert_ffn), "model.moe.shared_expert_ffn")}
        if tr.recompute != "selective":
            p.append(f"training.recompute_modules: names what selective recomputation runs again; training.recompute "
                     f"is {tr.recompute} (Megatron-Core reads --recompute-modules under --recompute-granularity "
                     "selective only)")
        for module in tr.recompute_modules:
            if module in needs and not needs[module][0]:
                p.append(f"training.recompute_modules: {module} needs {needs[module][1]}, which this model lacks")
    if tr.recompute_num_layers is not None and tr.recompute != "full":
        p.append(f"training.recompute_num_layers: {tr.recompute_num_layers} layers of each stage recompute whole, as "
                 f"Megatron's --recompute-method block and torchtitan's every n-th block do; training.recompute is "
                 f"{tr.recompute}: set it to full, or drop the count")
    if tr.moe_a2a_overlap:
        p += _a2a_overlap_problems(s)
    if tr.moe_dispatcher == "allgather" and m.moe is not None and s.etp > 1 and not par.sequence_parallel:
        p.append("training.moe_dispatcher: allgather with expert tensor parallelism (parallel.etp > 1) is priced "
                 "as Megatron's gather of sequence-parallel shards over TP x EP: set parallel.sequence_parallel: true")
    if tr.tp_comm_overlap and tr.kernels.stack != "te":
        p.append(f"training.tp_comm_overlap: Transformer Engine's userbuffer overlap runs under kernels.stack te, "
                 f"not {tr.kernels.stack} (torchtitan's async TP is priced as synchronous TP)")
    if tr.tp_comm_overlap and not (par.sequence_parallel and par.tp > 1):
        p.append("training.tp_comm_overlap: Transformer Engine's userbuffer overlap needs tp > 1 and "
                 f"parallel.sequence_parallel: true (Megatron asserts it), got tp={par.tp}, "
                 f"sequence_parallel={par.sequence_parallel}")
    p += _sharding_problems(s)
    if tr.overlap_param_gather and not par.distributed_optimizer:
        p.append("training.overlap_param_gather: needs parallel.distributed_optimizer: true "
                 "(there is no parameter all-gather without it)")
    domain = s.cluster.intra_node.domain_nodes
    if domain > 1 and s.cluster.nodes % domain:
        p.append(f"cluster.intra_node.domain_nodes: {s.cluster.nodes} nodes do not make whole NVLink domains of "
                 f"{domain} nodes")
    if domain > 1 and s.cluster.intra_node.fabric != "nvswitch":
        p.append("cluster.intra_node.domain_nodes: an NVLink domain across nodes needs NVLink switches "
                 f"(fabric: nvswitch), not {s.cluster.intra_node.fabric}")
    p += _fabric_problems(s)
    for i, fault in enumerate(s.faults):
        if fault.straggler and fault.straggler.rank >= s.num_gpus:
            p.append(f"faults.{i}.straggler.rank: {fault.straggler.rank} is not a rank of {s.num_gpus} GPUs")
        if fault.link and fault.link.node >= s.cluster.nodes:
            p.append(f"faults.{i}.link.node: {fault.link.node} is not a node of {s.cluster.nodes}")
        if fault.nic and fault.nic.node >= s.cluster.nodes:
            p.append(f"faults.{i}.nic.node: {fault.nic.node} is not a node of {s.cluster.nodes}")
        if fault.nic and fault.nic.nic >= s.nics_per_node:
            p.append(f"faults.{i}.nic.nic: {fault.nic.nic} is not one of the {s.nics_per_node} NICs of a node")
        for kind, where in (("uplink", fault.uplink), ("leaf", fault.leaf)):
            if where is not None and s.cluster.nodes > 1:
                from ..cluster.topology import leaf_count
                leaves = leaf_count(s)
                if where.leaf >= leaves:
                    p.append(f"faults.{i}.{kind}.leaf: {where.leaf} is not one of the {leaves} leaves of this "
                             f"{s.cluster.inter_node.fabric} fabric")
        if sum(x is not None for x in (fault.straggler, fault.link, fault.nic, fault.uplink, fault.leaf)) != 1:
            p.append(f"faults.{i}: give exactly one of straggler, link, nic, uplink or leaf")
    seen: dict[tuple, int] = {}
    for i, fault in enumerate(s.faults):
        target = (("straggler", fault.straggler.rank) if fault.straggler else ("link", fault.link.node) if fault.link
                  else ("nic", fault.nic.node, fault.nic.nic) if fault.nic else ("uplink", fault.uplink.leaf)
                  if fault.uplink else ("leaf", fault.leaf.leaf) if fault.leaf else None)
        if target is not None and target in seen:
            p.append(f"faults.{i}: the same {target[0]} as faults.{seen[target]} ({', '.join(map(str, target[1:]))}); "
                     "give one fault per rank, node, NIC or leaf")
        elif target is not None:
            seen[target] = i
    return p


def _size_problems(s) -> list[str]:
    """Work limits (sim3d/limits.py), checked before anything is built from the sizes."""
    checks = [("cluster", lambda: GPUS.check(s.num_gpus, f"{s.cluster.nodes:,} nodes x {s.gpus_per_node} GPUs")),
              ("model.layers", lambda: LAYERS.check(s.model.layers)),
              ("costs.network", lambda: FLOW_GPUS.check(s.num_gpus)
               if s.costs.network == "flow" else None),
              ("training.global_batch", lambda: check_schedule_size(s.pp, s.num_microbatches, s.vpp))]
    problems = []
    for field, check in checks:
        try:
            check()
        except WorkLimitExceeded as e:
            problems.append(f"{field}: {e}")
        except ZeroDivisionError:
            pass  # an inconsistent layout; reported by the checks that follow
    return problems


def _fabric_problems(s) -> list[str]:
    inter, p = s.cluster.inter_node, []
    if s.costs.network == "flow" and ShardingPlan.of(s).collectives_in_compute:
        # found by a hostile pass: the folded and the full-fidelity replays of the same layout
        # disagree (by up to 26%) when the units' gathers and reduce-scatters run inside the
        # compute actions on the flow network; refused until they agree, not answered wrongly
        p.append(f"costs.network: flow with parallel.zero {s.parallel.zero} (units gathered or reduce-scattered inside "
                 "every forward and backward) is not supported yet; use costs.network: analytical")
    # a what-if that shrinks a DGX's GPU count keeps its cabling: a server's 10 NICs stay allowed
    most = max(NICS_PER_GPU * s.gpus_per_node, SERVER_NICS)
    if inter.nics_per_node is not None and inter.nics_per_node > most:
        p.append(f"cluster.inter_node.nics_per_node: {inter.nics_per_node} NICs on a node of {s.gpus_per_node} GPUs; "
                 f"servers cable one or two NICs per GPU (a DGX H100 10 on 8), and sim3d takes at most "
                 f"{NICS_PER_GPU} per GPU or {SERVER_NICS} a server ({most} here)")
    if inter.nodes_per_pod is None:
        if inter.pod_oversubscription != 1.0:
            p.append("cluster.inter_node.pod_oversubscription: needs pods (cluster.inter_node.nodes_per_pod)")
        return p
    from ..cluster.fabric import Fabric
    per_leaf = Fabric(s).nodes_per_leaf
    if inter.nodes_per_pod % per_leaf:
        hint = ("; a rail-optimized fabric puts every server under its rail's leaf unless "
                "cluster.inter_node.nodes_per_leaf sets a scalable unit" if inter.nodes_per_leaf is None else "")
        p.append(f"cluster.inter_node.nodes_per_pod: {inter.nodes_per_pod} is not a whole number of leaves of "
                 f"{per_leaf} servers{hint}")
    return p


def _expert_grid_problems(s) -> list[str]:
    """The experts' grid etp x ep x edp must tile the tp*cp*dp ranks of a stage (Megatron-Core's
    expert RankGenerator, parallel_state.py), and sim3d prices expert tensor parallelism of 1
    or tp only: an expert's TP collectives then run on no group or on the tensor-parallel one."""
    par, problems = s.parallel, []
    stage = s.tp * s.cp * s.dp
    if par.etp is not None and s.model.moe is None and par.etp != par.tp:
        problems.append(f"parallel.etp: etp={par.etp} needs an MoE model (model.moe is null)")
    elif s.etp not in (1, s.tp):
        problems.append(f"parallel.etp: sim3d models expert tensor parallelism of 1 or tp={s.tp}, got {s.etp}")
    elif stage % (s.etp * s.ep):
        spread = "data-parallel" if s.etp == s.tp else "tensor-, context- and data-parallel"
        problems.append(f"parallel.ep: etp*ep = {s.etp}*{s.ep} must divide tp*cp*dp = {stage} "
                        f"(experts are spread over the stage's {spread} ranks)")
    elif s.model.moe is not None and (why := Placement.of(s).expert_grid_problem):
        problems.append(f"parallel.order: {par.order!r} with the experts' grid (etp={s.etp}, ep={s.ep}) {why}; "
                        "use Megatron's default order tp-cp-ep-dp-pp")
    if s.model.moe is not None and s.etp != s.tp and not (par.sequence_parallel or s.tp == 1):
        # Megatron's arguments.py: "When using MoE and tensor parallelism, sequence
        # parallelism must be used."
        problems.append(f"parallel.sequence_parallel: expert tensor parallelism {s.etp} apart from tp={s.tp} "
                        "needs sequence parallelism (Megatron requires it for MoE with tp > 1)")
    return problems


def _sharding_problems(s) -> list[str]:
    """HSDP's group sizes against the dp x cp grid, and switches that need sharding."""
    par, ranks, p = s.parallel, s.dp * s.cp, []
    if par.dp_shard is not None and ranks % par.dp_shard:
        p.append(f"parallel.dp_shard: {par.dp_shard} ranks do not divide the dp*cp = {s.dp}*{s.cp} = {ranks} "
                 "data-parallel ranks into whole shard groups")
    if par.dp_replicate is not None and ranks % par.dp_replicate:
        p.append(f"parallel.dp_replicate: {par.dp_replicate} replicas do not divide the dp*cp = {s.dp}*{s.cp} = "
                 f"{ranks} data-parallel ranks")
    if par.dp_shard is not None and par.dp_replicate is not None and par.dp_shard * par.dp_replicate != ranks:
        p.append(f"parallel.dp_shard and parallel.dp_replicate: {par.dp_shard} x {par.dp_replicate} replicas = "
                 f"{par.dp_shard * par.dp_replicate}, but dp*cp = {ranks}")
    stage = s.tp * s.cp * s.dp
    whole = s.shard_group and ranks % s.shard_group == 0 and stage % (s.etp * s.ep) == 0  # else refused above
    replicas = ranks // s.shard_group if whole else 1
    if s.model.moe is not None and par.zero >= 1 and replicas > 1 and s.edp % replicas:
        # Megatron's parallel_state.py: the expert data-parallel size must divide into the
        # distributed optimizer's instances too
        key = "parallel.dp_replicate" if par.dp_shard is None else "parallel.dp_shard"
        p.append(f"{key}: the {replicas} replicas of the shard groups do not divide the experts' "
                 f"{s.edp} data-parallel replicas (expert parallelism {s.ep}); shard over more ranks")
    if par.zero == 0 and s.shard_group < ranks:
        p.append(f"parallel.dp_shard: shard groups of {s.shard_group} ranks shard nothing with parallel.zero: 0 "
                 "(set zero 1-3, or leave dp_shard unset)")
    if par.reshard_after_forward is not None and par.zero < 3:
        p.append(f"parallel.reshard_after_forward: only ZeRO-3 gathers parameters per unit (parallel.zero is {par.zero})")
    if s.training.fp8_param_gather and s.training.precision != "fp8":
        p.append(f"training.fp8_param_gather: needs training.precision: fp8 (got {s.training.precision})")
    if s.training.fp8_param_gather and par.zero == 0:
        p.append("training.fp8_param_gather: there is no parameter all-gather with parallel.zero: 0")
    recipe = s.training.kernels.fp8
    if recipe is not None and s.training.precision != "fp8":
        p.append(f"training.kernels.fp8: {recipe} scales FP8 linears; training.precision is {s.training.precision}")
    # torchao gathers FP8 weights with one scale per tensor only (float8/fsdp_utils.py,
    # WeightWithDynamicFloat8CastTensor: its pre-all-gather cast is tensorwise)
    if (s.training.fp8_param_gather and s.training.precision == "fp8"
            and s.training.kernels.fp8_recipe in ("rowwise", "rowwise_with_gw_hp")):
        p.append(f"training.fp8_param_gather: torchao gathers FP8 weights under the tensorwise recipe only "
                 f"(training.kernels.fp8 is {s.training.kernels.fp8_recipe}; its weights are gathered in 16 bits)")
    return p


def _a2a_overlap_problems(s) -> list[str]:
    """What Megatron-Core asserts of --overlap-moe-expert-parallel-comm (transformer_config.py,
    __post_init__), in sim3d's keys."""
    tr, needs = s.training, []
    if s.model.moe is None or s.ep == 1:
        needs.append("an MoE model with parallel.ep > 1")
    if s.pp > 1 and s.vpp == 1:
        needs.append("a virtual pipeline (parallel.vpp > 1) when pp > 1")
    if s.schedule not in ("1f1b", "interleaved-1f1b"):
        needs.append(f"the 1f1b or interleaved-1f1b schedule (its combined 1F1B), not {s.schedule}")
    if tr.moe_dispatcher == "allgather":
        needs.append("the alltoall or flex (deepep) dispatcher, not allgather")
    if tr.recompute == "full" or "moe" in (tr.recompute_modules or ()):
        needs.append("no full recomputation and no `moe` in training.recompute_modules")
    if tr.precision == "fp32":
        needs.append("a bf16, fp16 or fp8 model")
    if (s.model.mtp_layers or 0) > 1:
        needs.append("at most one multi-token-prediction module")
    if tr.kernels.stack != "te" or tr.recompute == "op":
        needs.append("Megatron-Core under Transformer Engine (kernels.stack te, no per-op recomputation)")
    return [f"training.moe_a2a_overlap: Megatron-Core's EP all-to-all overlap needs {need}" for need in needs]

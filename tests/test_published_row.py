"""Rows of sources sim3d has no family rule for: other GPUs, fp8, experts, other metrics."""

import pytest

from sim3d.model.memory import fits_in_memory

from sim3d.cluster.gpus import PRESETS, preset_named_in
from sim3d.model.flops import model_flops_per_step
from sim3d.validation.era_rules import _year_of
from sim3d.validation.published_row import scenario_dict_of, scenario_of
from sim3d.scenario.load import ScenarioError
from sim3d.validation.published import validate_rows

HEADER = ("id,source,model,params_b,layers,hidden,heads,ffn_hidden,vocab,seq_len,gpu,num_gpus,tp,pp,dp,cp,ep,vp,"
          "micro_batch,global_batch,sequence_parallel,recompute,distributed_optimizer,metric,value,notes")


def row(**cells) -> dict:
    """A CSV row as pandas gives it: a small GPT on 8 H100 unless `cells` says otherwise."""
    base = dict(id="other_run", source="a source", model="GPT 1B", layers=4, hidden=1024, heads=16, ffn_hidden=None,
                vocab=32000, seq_len=2048, gpu="H100-SXM5-80GB", num_gpus=8, tp=2, pp=2, dp=2, cp=1, ep=1, vp=None,
                micro_batch=1, global_batch=16, sequence_parallel="true", recompute="none",
                distributed_optimizer="true", metric="step_time_s", value=1.0, notes="precision=bf16")
    return {**base, **cells}


@pytest.mark.parametrize("name, preset", [
    ("H100-SXM5-80GB", "h100-sxm"), ("H200-SXM-141GB", "h200"), ("H800", "h800"), ("8x H800 (DeepSeek)", "h800"),
    ("B200", "b200"), ("DGX GB200 NVL72", "gb200"), ("A100-SXM4-40GB", "a100-40gb"), ("A100 80GB", "a100-80gb"),
    ("V100-SXM3-32GB (DGX-2)", "v100"), ("MI300X", None), ("", None), ("H100-PCIe-80GB", None),
    ("H100 NVL", None), ("A100-PCIE-40GB", None), ("GB200 NVL72", "gb200"), ("H100 NVLink 8-GPU", "h100-sxm"),
    ("A100-SXM4-80GB (not the 40GB part)", "a100-80gb"), ("A100 40 GB", "a100-40gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("GH200 Grace Hopper", None)])
def test_gpu_names_find_their_preset(name, preset):
    assert preset_named_in(name) == preset


def test_each_gpu_comes_in_the_servers_its_maker_ships():
    v100 = scenario_dict_of(row(gpu="V100-SXM3-32GB", num_gpus=64, tp=8, pp=2, dp=4, global_batch=32,
                                notes="precision=fp16"))["cluster"]
    assert (v100["gpus_per_node"], v100["nodes"]) == (16, 4)  # a DGX-2
    assert v100["inter_node"]["nic_gbps"] == PRESETS["v100"].nic_gbps and v100["inter_node"]["nics_per_node"] == 8
    gb200 = scenario_dict_of(row(gpu="GB200", num_gpus=576, tp=4, pp=4, dp=36, global_batch=72))["cluster"]
    assert (gb200["gpus_per_node"], gb200["nodes"], gb200["intra_node"]["domain_nodes"]) == (4, 144, 18)
    small = scenario_dict_of(row(gpu="GB200", num_gpus=8))["cluster"]
    assert small["intra_node"]["domain_nodes"] == 2  # both trays of a partial rack share its switches
    pow2 = scenario_dict_of(row(gpu="GB200", num_gpus=512, tp=4, pp=4, dp=32, global_batch=64))["cluster"]
    assert pow2["intra_node"]["domain_nodes"] == 16  # 128 trays: 8 racks of 16 trays, not 64 pairs
    assert scenario_of(row(gpu="H800")).gpu.nvlink_gbps == 1600  # 400 GB/s bidirectional


def test_a_gpu_without_preset_is_not_expressible_and_says_which():
    [got] = _validate([row(gpu="MI300X")])
    assert got.predicted is None and "MI300X" in got.note


def test_fp8_rows_run_fp8_and_quote_mfu_against_the_bf16_peak(tmp_path):
    fp8 = row(id="other_fp8", metric="mfu", notes="precision=fp8")
    s = scenario_of(fp8)
    assert s.training.precision == "fp8"
    [mfu, own_peak, tokens] = _validate([fp8, {**fp8, "id": "other_fp8peak", "notes": "precision=fp8; mfu_peak=fp8"},
                                         {**fp8, "id": "other_tokens", "metric": "tokens_per_s_per_gpu"}])
    tokens_per_gpu = tokens.predicted
    step = 16 * 2048 / (tokens_per_gpu * 8)
    assert mfu.predicted == pytest.approx(model_flops_per_step(s) / step / 8 / 1e12 / 989.4, rel=1e-6)
    assert own_peak.predicted == pytest.approx(mfu.predicted * 989.4 / 1978.9, rel=1e-6)  # H100's dense peaks
    assert "bf16 peak" in mfu.note and "fp8 peak" in own_peak.note


def test_flop_rates_follow_what_the_source_counts():
    full = row(recompute="full", metric="tflops_per_gpu")
    [hardware, model, step] = _validate([full, {**full, "id": "other_m", "notes": "precision=bf16; model FLOPs"},
                                         {**full, "id": "other_s", "metric": "step_time_s"}])
    assert hardware.predicted > model.predicted  # the recomputed forward counted
    [negated] = _validate([{**full, "id": "other_n", "notes": "precision=bf16; hardware, not model FLOPs"}])
    assert negated.predicted == pytest.approx(hardware.predicted)
    s = scenario_of(full)
    assert model.predicted == pytest.approx(model_flops_per_step(s) / step.predicted / 8 / 1e12, rel=1e-6)


def test_experts_from_the_notes_or_the_model_name():
    mixtral = scenario_of(row(model="Mixtral 8x7B", ep=2, notes="precision=bf16"))
    assert (mixtral.model.moe.experts, mixtral.model.moe.top_k, mixtral.ep) == (8, 2, 2)
    assert mixtral.model.activation == "swiglu" and mixtral.model.hidden_dropout == 0.0
    fine = scenario_of(row(model="some MoE", ep=2, notes="precision=bf16; num_experts=64; moe_router_topk=6; "
                                                        "moe_ffn_hidden_size=768; kv_channels=128"))
    assert (fine.model.moe.experts, fine.model.moe.top_k, fine.model.moe.expert_ffn_hidden) == (64, 6, 768)
    assert fine.model.head_dim == 128  # Qwen3's heads are wider than hidden / heads
    with pytest.raises(ScenarioError, match="num_experts"):
        scenario_of(row(ep=2))


@pytest.mark.parametrize("cells, backend", [
    (dict(gpu="A100-SXM4-80GB", source="Narayanan et al. arXiv:2104.04473 Table 1"), "unfused"),
    (dict(gpu="A100-SXM4-80GB", source="a blog"), "unfused"),  # no year, no word: A100 is the unfused era
    (dict(gpu="A100-SXM4-80GB", source="a 2023 report"), "flash"),
    (dict(gpu="A100-SXM4-80GB", source="arXiv:2205.01068", notes="precision=bf16; FlashAttention-2"), "flash"),
    (dict(gpu="H100-SXM5-80GB", source="a blog"), "flash"),
    (dict(gpu="H100-SXM5-80GB", notes="precision=bf16; unfused attention"), "unfused"),
    (dict(gpu="H100-SXM5-80GB", notes="precision=bf16; flash_attention=false"), "unfused"),
    (dict(gpu="A100-SXM4-80GB", source="arXiv:2205.05198", notes="precision=bf16; flash_attention=no"), "unfused"),
    (dict(gpu="A100-SXM4-80GB", source="arXiv:2205.05198", notes="flash_attention=not stated"), "unfused"),
    (dict(gpu="A100-SXM4-80GB", source="NeMo Megatron, 2022"), "unfused"),  # NeMo predates flash
    (dict(gpu="A100-SXM4-80GB", source="a Nemotron-style model"), "unfused"),  # a word, not "NeMo"
    (dict(gpu="A100-SXM4-80GB", source="NeMo recipe"), "flash"),  # no year: today's software
    (dict(gpu="H100-SXM5-80GB", source="a blog", notes="without FlashAttention"), "unfused"),
])
def test_an_unknown_family_gets_its_era_from_the_row(cells, backend):
    assert scenario_of(row(**cells)).training.attention_backend == backend


def test_the_family_of_the_model_keeps_its_dropout_in_either_era():
    old_llama = scenario_of(row(model="Llama 2 70B", gpu="A100-SXM4-80GB", source="arXiv:2104.00001"))
    assert old_llama.training.attention_backend == "unfused" and old_llama.model.hidden_dropout == 0.0
    old_gpt = scenario_of(row(gpu="A100-SXM4-80GB", source="arXiv:2104.04473"))
    assert old_gpt.model.hidden_dropout == 0.1


def test_years_of_sources():
    assert _year_of("Narayanan et al. arXiv:2104.04473 Table 1") == 2021
    assert _year_of("NeMo performance summary, 2025; Llama 3 (arXiv:2407.21783)") == 2024  # the paper's own
    assert _year_of("https://arxiv.org/abs/2201.11990 (transcribed 2024)") == 2022
    assert _year_of("a 2022 run, re-read in 2024") == 2022  # the run's, not the transcription's
    assert _year_of("logs @a2024bc; 2016 GPUs; v24.11") is None  # a hash, a count, a version
    assert _year_of("dgxc-benchmarking @35a9aec (v24.11.1)") is None


def _validate(rows: list[dict]):
    import csv
    import io
    import tempfile
    from pathlib import Path
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=HEADER.split(","))
    writer.writeheader()
    writer.writerows(rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.csv"
        path.write_text(text.getvalue())
        return validate_rows(path)


def test_the_inferred_era_agrees_with_every_family_rule_on_the_dev_rows():
    """Renamed into a family sim3d has no rule for, each development row builds the same
    scenario from its source, notes and GPU alone: the inference is what the family rules
    encode, not a guess that happens to differ where nobody looks."""
    import pandas as pd
    from sim3d.validation.published import DEFAULT_CSV
    checked = 0
    for record in pd.read_csv(DEFAULT_CSV).to_dict("records"):
        try:
            known = scenario_of(record).model_dump()
        except ScenarioError:
            continue
        unknown = scenario_of({**record, "id": "unseen_" + record["id"]}).model_dump()
        assert {**unknown, "name": known["name"]} == known, record["id"]
        checked += 1
    assert checked >= 45  # the rest publish no batch sizes


def test_empty_cells_take_the_framework_defaults_and_say_so():
    quiet = row(micro_batch=None, sequence_parallel=None, vocab=None, distributed_optimizer="fsdp")
    s = scenario_of(quiet)
    assert s.training.micro_batch == 1 and s.model.vocab == 51200
    assert s.parallel.sequence_parallel is True  # the NeMo / Megatron-Bridge recipes' default with tp > 1
    assert s.parallel.distributed_optimizer is True  # FSDP moves a sharded optimizer's bytes
    notes = _validate([quiet])[0].note
    for said in ("micro-batch 1 assumed", "vocab 51200 assumed", "sequence parallelism assumed"):
        assert said in notes
    old = scenario_of(row(sequence_parallel=None, gpu="A100-SXM4-80GB", source="arXiv:2104.04473",
                          distributed_optimizer=None))
    assert old.parallel.sequence_parallel is False  # 2021 Megatron had none
    assert old.parallel.distributed_optimizer is False  # nor a distributed optimizer
    unsaid = row(distributed_optimizer=None, source="Megatron-Bridge 25.11")
    assert scenario_of(unsaid).parallel.distributed_optimizer is True  # the recipes' optimizer factory
    assert "distributed optimizer assumed" in _validate([unsaid])[0].note
    assert scenario_of(row(distributed_optimizer="false")).parallel.distributed_optimizer is False  # said: kept
    with pytest.raises(ScenarioError, match="global_batch"):
        scenario_of(row(global_batch=None))


def test_unsaid_recomputation_is_the_cheapest_that_fits():
    """A run that does not fit without recomputation must have recomputed: on the 2021-22
    stack full (the only kind then), on today's the cheaper of selective and full that fits."""
    big = dict(gpu="A100-SXM4-80GB", source="arXiv:2201.11990", model="GPT 530B", layers=105, hidden=20480,
               heads=128, num_gpus=2240, tp=8, pp=35, dp=8, global_batch=1920, recompute=None, notes="",
               sequence_parallel="false")
    assert scenario_of(row(**big)).training.recompute == "full"
    assert "recompute full assumed" in " ".join(_validate([row(**big)])[0].note.split())
    assert scenario_of(row(gpu="A100-SXM4-80GB", source="arXiv:2201.11990", recompute=None)).training.recompute == "none"
    modern = scenario_of(row(**{**big, "gpu": "H100-SXM5-80GB", "source": "NeMo 2025", "micro_batch": 2}))
    ladder = ["none", "selective", "full"]
    chosen = modern.training.recompute
    assert chosen != "none" and fits_in_memory(modern, check_schedule=False)[0]
    cheaper = modern.model_copy(update={"training": modern.training.model_copy(
        update={"recompute": ladder[ladder.index(chosen) - 1]})})
    assert not fits_in_memory(cheaper, check_schedule=False)[0]
    assert scenario_of(row(**{**big, "recompute": "selective"})).training.recompute == "selective"  # said: kept


def test_a_gated_mlp_named_in_the_notes_gets_three_gemms():
    grok = scenario_of(row(model="Grok-1 314B", notes="precision=bf16; GeGLU (fast-geglu)"))
    assert grok.model.activation == "swiglu"
    assert scenario_of(row(model="GPT 1B")).model.activation == "gelu"
    assert scenario_of(row(model="Gemma 7B")).model.activation == "swiglu"
    for negated in ("precision=bf16; non-gated MLP", "precision=bf16; GELU MLP, not SwiGLU"):
        assert scenario_of(row(model="GPT 1B", notes=negated)).model.activation == "gelu"


def test_gpt_oss_is_a_gated_dropout_free_moe_not_a_gpt3():
    """GPT-OSS (Megatron-Bridge GPTOSSProvider: gated_linear_unit=True, RMSNorm, no dropout): its
    experts run gate and up, so a 2880-wide expert's up GEMM is 2 x 2880 wide, three GEMMs of
    2 x h x 2880 FLOPs per token and expert (not GPT-3's two)."""
    from sim3d.model.ops import layer_ops
    oss = scenario_of(row(model="GPT-OSS 120B (MoE)", hidden=2880, heads=64, ffn_hidden=2880, ep=2, tp=1, pp=1,
                          dp=8, sequence_parallel=None,
                          notes="precision=bf16; num_experts=128; moe_router_topk=4; moe_ffn_hidden_size=2880; "
                                "num_query_groups=8; kv_channels=64"))
    assert (oss.model.activation, oss.model.hidden_dropout, oss.model.attention_dropout) == ("swiglu", 0.0, 0.0)
    ops = {o.name: o for o in layer_ops(oss, moe_layer=True)}
    tokens = 2048 * 4  # a 2048-token micro-batch, top-4
    assert ops["expert_up"].fwd_flops + ops["expert_down"].fwd_flops == tokens * 3 * 2 * 2880 * 2880


def test_yes_no_cells_however_spelt_and_v100_trains_fp16_unless_told():
    for spelling in ("1", " true", "yes", "TRUE"):
        s = scenario_of(row(sequence_parallel=spelling, distributed_optimizer=spelling))
        assert s.parallel.sequence_parallel and s.parallel.distributed_optimizer, spelling
    assert scenario_of(row(distributed_optimizer="ZeRO-1")).parallel.distributed_optimizer
    assert not scenario_of(row(sequence_parallel="0", distributed_optimizer="no")).parallel.distributed_optimizer
    v100 = row(gpu="V100-SXM3-32GB", num_gpus=16, tp=4, pp=2, dp=2, notes="")
    assert scenario_of(v100).training.precision == "fp16"  # no bf16 tensor cores


def test_every_held_out_row_becomes_a_scenario():
    """validation/published_extra.csv (sources sim3d has no family rule for) is expressible
    row by row: the inferred eras, presets, experts and defaults cover it, and so is the
    second batch, whose expert groups fold over TP x DP where the notes say
    expert_tensor_parallel_size=1."""
    import pandas as pd
    from sim3d.validation.published import REPO_ROOT
    table = pd.read_csv(REPO_ROOT / "validation" / "published_extra.csv")
    assert len(table) >= 30 and table["id"].is_unique
    for record in table.to_dict("records"):
        scenario_of(record)
    second = pd.read_csv(REPO_ROOT / "validation" / "published_extra2.csv")
    folded = {}
    for record in second.to_dict("records"):
        s = scenario_of(record)
        folded[record["id"]] = (s.tp, s.etp, s.ep, s.dp)
    # the three layouts whose expert groups span tensor-parallel ranks (ep > dp * cp)
    assert folded["mbridgemoe2511h_qwen3_235b_fp8cs_256"] == (2, 1, 32, 16)
    assert folded["dgxcnemo_dsv3_bf16_gb200_128"] == (2, 1, 32, 16)
    assert folded["dgxcnemo_dsv3_bf16_h100_1024"] == (2, 1, 64, 32)
    # a row that does not name it keeps Megatron's default, etp = tp
    assert folded["nemo2504gb_mixtral8x22b_fp8_256"][:2] == (2, 2)
    grok = scenario_of(table[table["id"] == "dgxc2411_grok1_314b_bf16_512"].to_dict("records")[0])
    assert (grok.model.moe.experts, grok.model.moe.top_k, grok.ep, grok.model.activation) == (8, 2, 8, "swiglu")


def test_a_rows_latent_attention_dense_first_layers_mtp_and_recompute_modules_come_from_its_notes():
    notes = ("precision=bf16; num_experts=256; moe_router_topk=8; moe_ffn_hidden_size=2048; "
             "moe_layer_freq=[0]*3+[1]*58 (first 3 dense); (MLA: q_lora_rank=1536 kv_lora_rank=512 qk_head_dim=128 "
             "qk_pos_emb_head_dim=64 v_head_dim=128); RecomputeModule=mla_up_proj; model label 'DeepSeekV3 (w/ MTP)'")
    cells = dict(model="DeepSeek-V3 671B (MoE)", layers=61, hidden=7168, heads=128, ffn_hidden=18432, vocab=129280,
                 seq_len=4096, num_gpus=64, tp=1, pp=8, dp=8, ep=8, global_batch=64, recompute=None, notes=notes)
    built = scenario_dict_of(row(**cells))
    assert built["model"]["mla"] == {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                                     "qk_rope_head_dim": 64, "v_head_dim": 128}
    assert (built["model"]["moe"]["every"], built["model"]["moe"]["first_dense_layers"]) == (1, 3)
    assert built["model"]["mtp_layers"] == 1  # DeepSeek-V3's one module (arXiv:2412.19437 sec. 2.2)
    assert (built["training"]["recompute"], built["training"]["recompute_modules"]) == ("selective", ["mla_up_proj"])
    plain = scenario_dict_of(row(**{**cells, "notes": notes.replace("(w/ MTP)", "").replace("RecomputeModule", "x")}))
    assert "mtp_layers" not in plain["model"] and "recompute_modules" not in plain["training"]
    listed = scenario_dict_of(row(**{**cells, "notes": notes + "; recompute_modules=[mla_up_proj,mlp]"}))
    assert listed["training"]["recompute_modules"] == ["mla_up_proj"]  # the first key said wins
    both = notes.replace("RecomputeModule=mla_up_proj", "recompute_modules=[mla_up_proj,mlp]")
    assert scenario_dict_of(row(**{**cells, "notes": both}))["training"]["recompute_modules"] == ["mla_up_proj", "mlp"]
    full = scenario_dict_of(row(**{**cells, "recompute": "full"}))  # the row's own column decides
    assert full["training"]["recompute"] == "full" and "recompute_modules" not in full["training"]


def test_what_a_note_says_of_other_runs_is_not_read_as_the_rows():
    notes = ("precision=bf16; recompute not stated; later recipe (configs.py@0426418) uses "
             "recompute_modules=[mla_up_proj], moe_a2a_overlap=True - not pinned to this run.")
    built = scenario_dict_of(row(recompute=None, notes=notes))
    assert "recompute_modules" not in built["training"] and built["training"]["precision"] == "bf16"
    # the run's own sentences of the same clause stay read
    notes = "recompute not stated. precision=fp16 on this run. recompute_modules=[mla_up_proj] - not pinned to this run."
    built = scenario_dict_of(row(recompute=None, notes=notes))
    assert built["training"]["precision"] == "fp16" and "recompute_modules" not in built["training"]


def test_a_release_preset_after_a_later_recipes_clause_is_read_as_the_rows():
    """A clause about a later recipe ends at its ';': the release's own preset said after it
    is the run's (validation/published_extra2_evidence.md, section C2)."""
    notes = ("precision=bf16; later recipe (configs.py@0426418) uses recompute_modules=[mlp] - not pinned to this run."
             "; the 25.11 release's preset for this layout: recompute_modules=[mla_up_proj] (configs.py@v0.2.0)")
    built = scenario_dict_of(row(recompute=None, notes=notes))
    assert (built["training"]["recompute"], built["training"]["recompute_modules"]) == ("selective", ["mla_up_proj"])


def test_deepseek_v3_on_256_gb200_fits_with_its_releases_recompute_modules():
    """The 25.11 run used its release's preset (PP4 VP4 EP64, recompute_modules=[mla_up_proj]):
    with those modules it fits in a GB200's 186 GiB; with Megatron's default selective set
    (the attention core only) it would not, which is why full recomputation had been assumed."""
    import pandas as pd
    from sim3d.validation.published import REPO_ROOT
    table = pd.read_csv(REPO_ROOT / "validation" / "published_extra2.csv")
    record = table[table["id"] == "mbridgemoe2511gb_dsv3_bf16_256"].to_dict("records")[0]
    s = scenario_of(record)
    assert (s.training.recompute, s.training.recompute_modules) == ("selective", ("mla_up_proj",))
    assert fits_in_memory(s)[0]
    default_modules = s.model_copy(update={"training": s.training.model_copy(update={"recompute_modules": None})})
    assert not fits_in_memory(default_modules)[0]

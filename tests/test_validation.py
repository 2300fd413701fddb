"""The validation command: CSV rows become scenarios, predictions and errors."""

import re
from pathlib import Path

import pandas as pd
import pytest

from sim3d.scenario.load import ScenarioError
from sim3d.validation.published_row import note_settings, scenario_of
from sim3d.validation.published import (DEFAULT_CSV, REPO_ROOT, Row, main, mape, mape_by_family, percent,
                                        validate_rows)

HEADER = ("id,source,model,params_b,layers,hidden,heads,ffn_hidden,vocab,seq_len,gpu,num_gpus,tp,pp,dp,cp,ep,vp,"
          "micro_batch,global_batch,sequence_parallel,recompute,distributed_optimizer,metric,value,notes")
# Korthikanti's rows: the kor22_ prefix gives them 2022 Megatron (unfused attention, dropout 0.1)
ROWS = [
    "kor22_layer,src,m,22,1,6144,64,24576,,2048,A100-SXM4-80GB,8,8,1,1,1,1,,4,,false,none,,layer_fwd_bwd_ms,19.6,x",
    "kor22_mem,src,m,22,48,6144,64,24576,,2048,A100-SXM4-80GB,8,8,1,1,1,1,1,4,4,false,none,false,"
    "activation_mem_gib_per_gpu,59.25,x",
    "kor22_nobatch,src,m,530,105,20480,128,81920,,2048,A100-SXM4-80GB,2240,8,35,8,1,1,,,,true,selective,,mfu,0.542,x",
]


def test_rows_become_predictions(tmp_path):
    csv = tmp_path / "runs.csv"
    csv.write_text("\n".join([HEADER, *ROWS]) + "\n")
    rows = {r.id: r for r in validate_rows(csv)}
    assert rows["kor22_layer"].predicted is not None and abs(rows["kor22_layer"].error) < 0.5
    # Korthikanti eq.: 22B, t=8, b=4, no recompute, 48 layers on one stage
    s, b, h, a, t, L = 2048, 4, 6144, 64, 8, 48
    formula = s * b * h * (10 + 24 / t + 5 * a * s / (h * t)) * L / 2**30
    assert rows["kor22_mem"].predicted == pytest.approx(formula, rel=0.02)
    assert rows["kor22_nobatch"].predicted is None and "not expressible" in rows["kor22_nobatch"].note
    assert mape(list(rows.values()), "layer_fwd_bwd_ms") == pytest.approx(abs(rows["kor22_layer"].error))


def test_command_writes_csv(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    csv.write_text("\n".join([HEADER, ROWS[0]]) + "\n")
    out = tmp_path / "out.csv"
    assert main([str(csv), "--out", str(out), "--markdown"]) == 0
    assert "| kor22_layer | layer_fwd_bwd_ms | 19.6 |" in capsys.readouterr().out
    assert len(pd.read_csv(out)) == 1


def test_missing_csv_is_bad_input(tmp_path):
    assert main([str(tmp_path / "nope.csv")]) == 2


def test_default_csv_is_in_the_repository():
    assert (REPO_ROOT / "pyproject.toml").is_file()
    path = Path(DEFAULT_CSV).resolve()
    assert path.is_relative_to(REPO_ROOT) and path.is_file()
    for name in ("nccl.csv", "hardware.csv", "README.md"):
        assert (path.parent / name).is_file()


def _published(row_id: str) -> dict:
    table = pd.read_csv(DEFAULT_CSV)
    return table[table["id"] == row_id].to_dict("records")[0]


def test_published_csv_rows_all_parse():
    table = pd.read_csv(DEFAULT_CSV)
    assert {"id", "source", "metric", "value", "notes"} <= set(table.columns)
    built = 0
    for row in table.to_dict("records"):
        try:
            scenario_of(row, layer_only=row["metric"].startswith("layer_"))
            built += 1
        except ScenarioError as e:  # only a missing batch size may stop a row
            assert "not published" in str(e), (row["id"], str(e))
    assert built >= len(table) - 2


def test_rows_run_the_software_of_their_era():
    llama = scenario_of(_published("dgxc2411_llama31_70b_64"))
    assert llama.model.activation == "swiglu" and llama.model.kv_heads == 8
    assert llama.model.hidden_dropout == 0 and llama.model.attention_dropout == 0
    assert llama.training.attention_backend == "flash" and llama.training.tp_comm_overlap
    assert llama.training.precision == "bf16"
    assert (llama.cluster.gpu, llama.nic_gbps, llama.nics_per_node) == ("h100-sxm", 400, 8)
    assert llama.cluster.inter_node.fabric == "rail-optimized"
    gpt3 = scenario_of(_published("dgxc2411_gpt3_175b_128"))
    assert gpt3.training.overlap_param_gather and gpt3.model.activation == "gelu"
    assert gpt3.training.grad_reduce_in_fp32 is False  # its recipe's grad_sync_dtype: bf16
    assert llama.training.grad_reduce_in_fp32 is None  # NeMo 2.0: Megatron's fp32 default
    assert scenario_of(_published("dgxc2411_nemotron4_15b_16")).model.activation == "squared-relu"
    kor = scenario_of(_published("kor22_22B_full"))
    assert kor.training.attention_backend == "unfused" and not kor.training.tp_comm_overlap
    assert kor.model.hidden_dropout == 0.1 and kor.model.attention_dropout == 0.1
    assert (kor.cluster.gpu, kor.nic_gbps) == ("a100-80gb", 200)
    for row_id in ("bloom176b_iter85376_step", "bloom176b_iter85376_tflops", "bloom176b_gbs16_step"):
        bloom = scenario_of(_published(row_id))  # Jean Zay, whether or not the notes say Omni-Path
        assert bloom.training.attention_backend == "unfused"
        assert (bloom.nics_per_node, bloom.nic_gbps, bloom.cluster.inter_node.fabric) == (4, 100, "fat-tree")


def test_runs_of_2021_trained_in_fp16_unless_their_notes_say():
    row = pd.read_csv(REPO_ROOT / "validation" / "published_extra.csv").set_index("id").loc["narayanan21_7p5B"]
    row = {"id": "narayanan21_7p5B", **row.to_dict()}
    assert scenario_of(row).training.precision == "fp16"  # Megatron-LM's examples of 2021-04
    assert scenario_of({**row, "notes": "precision=bf16"}).training.precision == "bf16"
    assert scenario_of(_published("kor22_22B_full")).training.precision == "bf16"  # 2022: as its notes allow


def test_the_2021_megatron_stack_blocks_on_pipeline_sends_and_overlaps_only_torch_ddp():
    """megatron/p2p_communication.py of 2021 waited for every exchange (interleaved schedule too);
    --DDP-impl torch (PyTorch's DDP, the sc21 script of the rows without a pipeline) all-reduced
    during the last backward, --DDP-impl local after it."""
    table = pd.read_csv(REPO_ROOT / "validation" / "published_extra.csv").set_index("id")
    small, big = ({"id": rid, **table.loc[rid].to_dict()} for rid in ("narayanan21_7p5B", "narayanan21_529p6B"))
    assert "DDP-impl=torch" in small["notes"] and "DDP-impl=local" in big["notes"]
    for row, overlapped in ((small, True), (big, False)):
        training = scenario_of(row).training
        assert training.overlap_p2p is False and training.overlap_grad_reduce is overlapped
    assert scenario_of(big).schedule == "interleaved-1f1b" and scenario_of(big).parallel.vpp == 3
    assert scenario_of(small).training.micro_batch == 16  # examples/sc21/run_table_1.sh
    assert scenario_of(_published("kor22_22B_full")).training.overlap_p2p is False


def test_megatron_runs_before_the_fused_loss_run_the_vocab_parallel_loss():
    """Megatron-LM fused the cross-entropy in 2024-06 (--cross-entropy-loss-fusion, 7b4a6d7);
    before, and on the 2021-22 stack, it ran vocab_parallel_cross_entropy on fp32 logits."""
    assert scenario_of(_published("kor22_22B_full")).training.kernels.loss == "vocab_parallel"
    nemo = _published("dgxc2411_llama31_70b_64")
    assert scenario_of(nemo).training.kernels.loss_kernels == "fused"  # NeMo 24.11
    dated_2023 = {**nemo, "source": "a NeMo run of October 2023"}
    assert scenario_of(dated_2023).training.kernels.loss == "vocab_parallel"
    said = {**dated_2023, "notes": f"{nemo['notes']}; cross_entropy_loss_fusion=true"}
    assert scenario_of(said).training.kernels.loss_kernels == "fused"
    assert scenario_of({**nemo, "notes": f"{nemo['notes']}; cross_entropy_loss_fusion=false"}
                       ).training.kernels.loss == "vocab_parallel"


def test_notes_parsing_ignores_what_it_does_not_know():
    settings = note_settings("precision=fp16/bf16-mixed (not stated); num_query_groups=8; tokens/s (x) = 5; "
                             "grad-accum=4; ub_tp_comm_overlap=true, whatever=1")
    assert settings["precision"] == "fp16/bf16-mixed" and settings["num_query_groups"] == "8"
    assert settings["ub_tp_comm_overlap"] == "true" and "tokens/s" not in settings
    row = _published("kor22_22B_full")
    assert scenario_of(row).training.precision == "bf16"
    assert scenario_of({**row, "notes": "precision=fp16; foo=bar"}).training.precision == "fp16"
    assert scenario_of({**row, "notes": float("nan")}).training.precision == "bf16"


def test_mape_per_row_family():
    rows = [Row("kor22_a", "step_time_s", 2.0, 2.2), Row("kor22_b", "step_time_s", 1.0, 0.7),
            Row("kor22_c", "mfu", 0.5, 0.45), Row("kor22_d", "mfu", 0.5, None),
            Row("dgxc2411_x", "step_time_s", 10.0, 12.5), Row("bloom176b_y", "mfu", 0.4, None)]
    by_family = mape_by_family(rows)
    assert set(by_family) == {"kor22", "dgxc2411"}  # bloom176b has no prediction
    assert by_family["kor22"]["step_time_s"] == (pytest.approx(0.2), 2)
    assert by_family["kor22"]["mfu"] == (pytest.approx(0.1), 1)
    assert by_family["dgxc2411"] == {"step_time_s": (pytest.approx(0.25), 1)}
    assert mape(rows, "step_time_s") == pytest.approx((0.1 + 0.3 + 0.25) / 3)


def test_command_prints_family_mape(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    csv.write_text("\n".join([HEADER, ROWS[0].replace("kor22_layer,", "fam_layer,", 1)]) + "\n")
    assert main([str(csv)]) == 0
    assert "mean absolute percentage error, fam_*, layer_fwd_bwd_ms:" in capsys.readouterr().out


def test_bad_cells_cost_their_row_not_the_run(tmp_path, capsys):
    """A user's own CSV: each bad row says what is wrong with it and the others still run;
    a file that is no CSV of runs is refused with exit code 2 and no traceback."""
    good = ROWS[0]
    cells = good.split(",")
    bad_tp = ",".join(["kor22_badtp", *cells[1:12], "eight", *cells[13:]])
    bad_value = ",".join([*cells[:24], "fast", *cells[25:]])
    no_metric = ",".join(["kor22_nometric", *cells[1:23], "", *cells[24:]])
    spaced = ",".join(["kor22_spaced", *cells[1:21], "", "", " layer_fwd_bwd_ms ", *cells[24:]])  # recompute empty
    csv = tmp_path / "runs.csv"
    unknown = ",".join(["kor22_unknown", *cells[1:23], "layer_joules", *cells[24:]])
    csv.write_text("\n".join([HEADER, good, bad_tp, bad_value.replace("kor22_layer", "kor22_badvalue", 1),
                              no_metric, spaced, unknown]) + "\n")
    rows = {r.id: r for r in validate_rows(csv)}
    assert rows["kor22_nometric"].predicted is None and rows["kor22_nometric"].note == "no metric named"
    assert rows["kor22_unknown"].predicted is None and rows["kor22_unknown"].note  # said, not a KeyError
    # a layer's timing needs neither batch nor a recomputation rule: its prediction stands
    assert rows["kor22_spaced"].predicted == pytest.approx(rows["kor22_layer"].predicted)
    assert rows["kor22_layer"].predicted is not None
    assert rows["kor22_badtp"].predicted is None and "tp: 'eight' is not a whole number" in rows["kor22_badtp"].note
    assert rows["kor22_badvalue"].error is None and "not a finite number" in rows["kor22_badvalue"].note
    assert mape(list(rows.values()), "layer_fwd_bwd_ms") == pytest.approx(abs(rows["kor22_layer"].error))
    no_columns = tmp_path / "other.csv"
    no_columns.write_text("a,b\n1,2\n")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    for path in (no_columns, binary):
        assert main([str(path)]) == 2
        assert "error:" in capsys.readouterr().out
    assert main([str(no_columns), "--write-scenarios", str(tmp_path / "out"), "--row", "a"]) == 2


def test_published_values_no_run_can_have_are_shown_but_never_scored(tmp_path, capsys):
    """-1, 0, an MFU of 1e-300 or of 1.5: each row says it is invalid and which column; no mean
    counts it, and no printed number runs to hundreds of digits."""
    def row(rid, metric, value, like=ROWS[0]):
        cells = like.split(",")
        return ",".join([rid, *cells[1:23], metric, value, *cells[25:]])

    csv = tmp_path / "runs.csv"
    tiny_mfu = row("kor22_tiny", "mfu", "1e-300", like=ROWS[1])  # a whole run: sim3d predicts its MFU
    csv.write_text("\n".join([HEADER, ROWS[0], row("kor22_neg", "layer_fwd_bwd_ms", "-1"),
                              row("kor22_zero", "layer_fwd_bwd_ms", "0"), tiny_mfu,
                              row("kor22_over", "mfu", "1.5"), row("kor22_slow", "step_time_s", "1e9")]) + "\n")
    rows = {r.id: r for r in validate_rows(csv)}
    for rid in ("kor22_neg", "kor22_zero", "kor22_tiny", "kor22_over", "kor22_slow"):
        assert rows[rid].invalid and rows[rid].error is None, rid
        assert "invalid" in rows[rid].note and "column value" in rows[rid].note, rows[rid].note
    assert "not positive" in rows["kor22_neg"].note and "mfu's range [0.0001, 1]" in rows["kor22_tiny"].note
    assert not rows["kor22_layer"].invalid
    assert mape(list(rows.values()), "layer_fwd_bwd_ms") == pytest.approx(abs(rows["kor22_layer"].error))
    assert main([str(csv)]) == 0
    out = capsys.readouterr().out
    assert "5 rows invalid, left out of every mean" in out and "kor22_neg" in out
    assert "layer_fwd_bwd_ms: " in out and " over 1 rows" in out
    assert not re.search(r"\d{20}", out)


def test_errors_past_ten_thousand_percent_print_in_powers_of_ten():
    assert percent(0.123) == "+12.3%" and percent(-0.5, sign=False) == "-50.0%"
    assert percent(5e297) == "+5.00e+299%" and percent(float("inf")) == "+inf%"


def test_repeated_row_ids_are_refused_by_name(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    csv.write_text("\n".join([HEADER, ROWS[0], ROWS[1], ROWS[0]]) + "\n")
    with pytest.raises(ScenarioError, match=r"'kor22_layer' on lines 2, 4"):
        validate_rows(csv)
    assert main([str(csv)]) == 2
    assert "row ids must be unique" in capsys.readouterr().out


@pytest.mark.parametrize("lines", [
    [ROWS[0].replace(",src,", ",Narayanan, et al.,", 1)],  # one row: pandas would take column 1 for an index
    [ROWS[0], ROWS[1].replace(",src,", ",Narayanan, et al.,", 1)],
    [ROWS[0], ROWS[1].rsplit(",", 1)[0]],  # a cell short: pandas would leave notes empty
], ids=["alone", "second", "short"])
def test_rows_whose_fields_do_not_match_the_header_are_refused_by_line(tmp_path, capsys, lines):
    csv = tmp_path / "runs.csv"
    csv.write_text("\n".join([HEADER, *lines]) + "\n")
    line = len(lines) + 1
    with pytest.raises(ScenarioError, match=rf"line {line} has 2[57] fields where the header has 26"):
        validate_rows(csv)
    assert main([str(csv)]) == 2
    assert f"line {line}" in capsys.readouterr().out
    if "Narayanan, et al." in lines[-1]:  # quoted, the comma is the cell's
        csv.write_text("\n".join([HEADER, *(x.replace("Narayanan, et al.", '"Narayanan, et al."') for x in lines)]))
        assert {r.id for r in validate_rows(csv)} == {line.split(",")[0] for line in lines}


def test_the_gradient_accumulation_follows_each_stacks_history():
    """Narayanan et al.'s fp16 runs of 2021 summed gradients with autograd (contiguous buffers
    were opt-in, the fusion into the GEMMs came in 2022-02), in bf16 Megatron's hook added them
    into its fp32 buffer; Korthikanti et al.'s bf16 runs of 2022 had the fusion; BLOOM's
    DeepSpeed pipeline upcast each bf16 gradient into its fp32 copy."""
    table = pd.read_csv(REPO_ROOT / "validation" / "published_extra.csv").set_index("id")
    narayanan = {"id": "narayanan21_76p1B", **table.loc["narayanan21_76p1B"].to_dict()}
    accumulation = lambda row: scenario_of(row).training.kernels.accumulation  # noqa: E731
    assert accumulation(narayanan) == "autograd"
    bf16 = narayanan["notes"].replace("precision=fp16", "precision=bf16")
    assert bf16 != narayanan["notes"] and accumulation({**narayanan, "notes": bf16}) == "main_grad"
    assert accumulation(_published("kor22_175B_seqsel")) == "fused"
    for row_id in ("bloom176b_iter85376_step", "bloom176b_iter85376_tflops", "bloom176b_gbs16_step"):
        assert accumulation(_published(row_id)) == "upcast"  # whether or not the row's notes name bf16
    mtnlg = {"id": "mtnlg22_530b_2240", **table.loc["mtnlg22_530b_2240"].to_dict()}
    # DeepSpeed's pipeline engine ran bf16 from 56c5223 (2022-04-19); MT-NLG (arXiv 2201) ran fp16
    assert (scenario_of(mtnlg).training.precision, accumulation(mtnlg)) == ("fp16", "autograd")

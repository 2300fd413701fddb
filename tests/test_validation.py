"""The validation command: CSV rows become scenarios, predictions and errors."""

from pathlib import Path

import pandas as pd
import pytest

from sim3d.validation import DEFAULT_CSV, main, mape, validate_rows

HEADER = ("id,source,model,params_b,layers,hidden,heads,ffn_hidden,vocab,seq_len,gpu,num_gpus,tp,pp,dp,cp,ep,vp,"
          "micro_batch,global_batch,sequence_parallel,recompute,distributed_optimizer,metric,value,notes")
ROWS = [
    "layer,src,m,22,1,6144,64,24576,,2048,A100-SXM4-80GB,8,8,1,1,1,1,,4,,false,none,,layer_fwd_bwd_ms,19.6,x",
    "mem,src,m,22,48,6144,64,24576,,2048,A100-SXM4-80GB,8,8,1,1,1,1,1,4,4,false,none,false,"
    "activation_mem_gib_per_gpu,59.25,x",
    "nobatch,src,m,530,105,20480,128,81920,,2048,A100-SXM4-80GB,2240,8,35,8,1,1,,,,true,selective,,mfu,0.542,x",
]


def test_rows_become_predictions(tmp_path):
    csv = tmp_path / "runs.csv"
    csv.write_text("\n".join([HEADER, *ROWS]) + "\n")
    rows = {r.id: r for r in validate_rows(csv)}
    assert rows["layer"].predicted is not None and abs(rows["layer"].error) < 0.5
    # Korthikanti eq.: 22B, t=8, b=4, no recompute, 48 layers on one stage
    s, b, h, a, t, L = 2048, 4, 6144, 64, 8, 48
    formula = s * b * h * (10 + 24 / t + 5 * a * s / (h * t)) * L / 2**30
    assert rows["mem"].predicted == pytest.approx(formula, rel=0.02)
    assert rows["nobatch"].predicted is None and "not expressible" in rows["nobatch"].note
    assert mape(list(rows.values()), "layer_fwd_bwd_ms") == pytest.approx(abs(rows["layer"].error))


def test_command_writes_csv(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    csv.write_text("\n".join([HEADER, ROWS[0]]) + "\n")
    out = tmp_path / "out.csv"
    assert main([str(csv), "--out", str(out), "--markdown"]) == 0
    assert "| layer | layer_fwd_bwd_ms | 19.6 |" in capsys.readouterr().out
    assert len(pd.read_csv(out)) == 1


def test_missing_csv_is_bad_input(tmp_path):
    assert main([str(tmp_path / "nope.csv")]) == 2


@pytest.mark.skipif(not Path(DEFAULT_CSV).is_file(), reason="shared/validation not beside the checkout")
def test_published_csv_rows_all_parse():
    table = pd.read_csv(DEFAULT_CSV)
    assert {"id", "metric", "value"} <= set(table.columns)

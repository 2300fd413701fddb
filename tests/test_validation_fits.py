"""A run that trained must be predicted to fit: every row of every validation file the
repository holds that reports a whole run (a step time, a throughput, an MFU) is laid out as
the validation lays it out, and the memory model must not say it overflows its card. Rows whose
layout sim3d cannot express (no batch size published) are skipped, and counted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sim3d.errors import ScenarioError
from sim3d.model.memory import memory_report
from sim3d.validation.published import LAYER_METRICS, MEMORY_METRICS, read_rows
from sim3d.validation.published_row import scenario_of

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "validation").glob("published_*.csv"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_run_that_ran_is_predicted_to_fit(path):
    table: pd.DataFrame = read_rows(path)
    ran = table[~table["metric"].isin(LAYER_METRICS + MEMORY_METRICS)]
    overflowing, expressed = [], 0
    for record in ran.to_dict("records"):
        try:
            scenario = scenario_of(record)
        except ScenarioError:
            continue
        expressed += 1
        report = memory_report(scenario, check_schedule=False)
        if not report.fits:
            overflowing.append(f"{record['id']}: {report.reason}")
    assert expressed > 0
    assert overflowing == [], "\n".join(overflowing)


def test_every_validation_file_is_checked():
    assert {p.name for p in FILES} >= {"published_dev.csv", "published_extra.csv", "published_extra2.csv",
                                       "published_fsdp_dev.csv"}

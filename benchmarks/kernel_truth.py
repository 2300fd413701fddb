"""The analytical kernel model beside a measured profile, per kernel class: MAPE, mean signed
error and the worst rows (sim3d/costs/truth.py says how a row is compared).

    python benchmarks/kernel_truth.py [PROFILE.csv] [--gpu h100-sxm] [--worst 12] [--fit] [--noise]

With no profile it reads the committed H100 profile. It also prints the profile's own noise
floor (sim3d/costs/truth.py noise_floor): the MAPE that even a perfect kernel model would show,
from the rows that timed the same kernels twice; `--noise` lists those pairs. `--fit` re-derives the constants that
were calibrated on that profile (the harness's clock time constant from the GEMM rows; the four
Hopper attention constants from the cuDNN attention rows, sim3d/costs/fit.py) and prints the
held-out error (GEMMs: fit on the generic grid, score on the layer shapes; attention: 5-fold by
shape).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from sim3d.cluster.gpus import gpu_preset
from sim3d.costs import truth
from sim3d.costs.fit import FOLDS, fit_attention, search
from sim3d.costs.harness import CLOCK_TAU_S

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "calibrate" / "profiles" / "h100-sxm5-80gb.csv"


def fit(table: pd.DataFrame, gpu) -> None:
    gemm = table[table["kind"] == "gemm"]
    grid = (gemm["op"] == "gemm").to_numpy()

    def gemm_loss(rows):
        def loss(c):
            compared = truth.compare(rows, gpu, tau=c["tau"])
            return truth.mape(compared[compared["device_bound"]]["error"])
        return loss
    tau = search(gemm_loss(gemm), {"tau": CLOCK_TAU_S})["tau"]
    held = search(gemm_loss(gemm[grid]), {"tau": CLOCK_TAU_S})["tau"]
    layer = truth.compare(gemm[~grid], gpu, tau=held)
    layer = layer[layer["device_bound"]]
    print(f"harness clock tau: {tau:.4f} s on all GEMM rows; fit on the grid alone {held:.4f} s -> layer-shape rows "
          f"held out: MAPE {truth.mape(layer['error']):.2%} (bf16 "
          f"{truth.mape(layer[layer['dtype'] != 'fp8']['error']):.2%}, fp8 "
          f"{truth.mape(layer[layer['dtype'] == 'fp8']['error']):.2%})")
    for c in fit_attention(table, gpu):
        print(f"{c.name}: {c.value:.4f} ({c.unit}); all rows {c.fit_mape:.2%}, {FOLDS}-fold by shape {c.cv_mape:.2%}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", nargs="?", default=str(PROFILE))
    ap.add_argument("--gpu", default="h100-sxm")
    ap.add_argument("--worst", type=int, default=12)
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--noise", action="store_true", help="list the pairs of rows that timed the same kernels")
    args = ap.parse_args(argv)
    table = pd.read_csv(args.profile)
    gpu = gpu_preset(args.gpu)
    if args.fit:
        fit(table, gpu)
        return 0
    rows = truth.compare(table, gpu, attention_ops=("attention", "attention.cudnn"))
    summ = truth.summary(rows)
    print(f"{args.profile} vs the analytical model of {gpu.name} (device-bound rows: >= {truth.DEVICE_BOUND:g}x "
          "the fastest row of their pass and dtype)")
    print(f"{'kernels':24} {'rows':>5} {'bound':>6} {'MAPE':>7} {'bias':>7} {'MAPE all rows':>14}")
    for _, r in summ.iterrows():
        print(f"{r['kernels']:24} {r['rows']:5d} {r['device_bound']:6d} {r['mape']:7.2%} {r['bias']:+7.2%} "
              f"{r['mape_all_rows']:14.2%}")
    gemm = rows[(rows["kind"] == "gemm") & rows["device_bound"]]
    att = rows[rows["op"] == "attention"]
    print(f"GEMMs, device-bound: MAPE {truth.mape(gemm['error']):.2%} over {len(gemm)} rows (bf16 "
          f"{truth.mape(gemm[gemm['dtype'] != 'fp8']['error']):.2%}, fp8 {truth.mape(gemm[gemm['dtype'] == 'fp8']['error']):.2%});"
          f" all {int((rows['kind'] == 'gemm').sum())} GEMM rows with the host floor: "
          f"{truth.mape(rows[rows['kind'] == 'gemm']['floored_error']):.2%}")
    print(f"attention (SDPA default = cuDNN): MAPE {truth.mape(att['error']):.2%} over {len(att)} rows")
    pairs = truth.repeat_pairs(rows)
    floor = truth.noise_floor(pairs)
    if len(floor):
        counts = gemm["dtype"].value_counts().reindex(floor["dtype"], fill_value=0).to_numpy()
        overall = float((floor["floor_mape"].to_numpy() * counts).sum() / max(1, counts.sum()))
        print("repeat noise floor (a perfect model's MAPE): " + ", ".join(
            f"{r['dtype']} {r['floor_mape']:.2%} (sigma {r['sigma']:.2%}, {r['pairs']} pairs; "
            f"{r['paired_bound']:.2%} at best on the paired rows)" for _, r in floor.iterrows())
            + f"; these dtypes' GEMMs, weighted by device-bound rows: {overall:.2%}")
    if args.noise:
        print("\nrows that timed the same kernels (spread: what no price of the kernel removes):")
        for _, r in pairs.iterrows():
            print(f"  {r['dtype']:5} {r['kind']:14} {r['a']:42} {r['error_a']:+6.1%}   {r['b']:42} {r['error_b']:+6.1%}"
                  f"   spread {r['spread']:+6.1%}")
    worst = rows[rows["device_bound"]].reindex(rows[rows["device_bound"]]["error"].abs().sort_values(ascending=False).index)
    print(f"\nworst {args.worst} device-bound rows:")
    for _, r in worst.head(args.worst).iterrows():
        print(f"  {r['class']:24} {r['op']:15} {r['shape']:28} measured {r['seconds'] * 1e6:9.1f} us  "
              f"model {r['model_s'] * 1e6:9.1f} us  as measured {r['predicted_s'] * 1e6:9.1f} us  {r['error']:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

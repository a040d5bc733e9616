"""Real single series, last horizon hidden: tsformer's defaults against AutoETS, AutoTheta and seasonal naive.

`make bench-single` first runs benchmarks/peers/single_series.py in the peers' environment, which writes each
series with its last horizon hidden and the peers' forecasts of it (its docstring lists the ten series:
weekly, yearly, quarterly, monthly and business-daily, 94 to 2271 rows). This script trains tsformer on each
visible CSV with the defaults and the horizon only (`tsformer train NAME.csv --horizon H`, through
`tsformer.fit`), forecasts the hidden horizon with `Predictor.predict`, and scores every forecaster by MASE
(the visible rows' in-sample seasonal-naive MAE as the scale; season 1 for yearly data) and by its MAE
relative to seasonal naive's. The summary is the geometric mean of those ratios over the series (below 1:
better than seasonal naive), M4's relative-MASE comparison. Results: benchmarks/results/single_series.md, .json.

One hidden horizon per series is a noisy judge of a change (ten windows in all). `--earlier K` also cuts each
visible series 1..K horizons before its end, trains on the rest with the same defaults and scores the horizon
after the cut against seasonal naive: K x 10 more windows, from the visible rows only, on which a change to the
package can be judged without reading the hidden horizon (`make bench-single` runs K = 3).

Example: .venv/bin/python benchmarks/single_series.py --series runs/bench/single_data --earlier 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
PEERS = ("AutoETS", "AutoTheta")


def mae(forecast: np.ndarray, truth: np.ndarray) -> float:
    seen = ~np.isnan(truth)
    return float(np.abs(forecast[seen] - truth[seen]).mean())


def seasonal_scale(values: np.ndarray, season: int) -> float:
    """The in-sample seasonal-naive MAE of the visible rows (pairs with a missing value skipped)."""
    change = np.abs(values[season:] - values[:-season])
    return float(np.nanmean(change))


def geometric_mean(values: list[float]) -> float | None:
    return float(np.exp(np.log(values).mean())) if values else None


def earlier_origin(tsformer, folder: Path, name: str, info: dict, k: int, runs_dir: Path, overrides: dict) -> dict:
    """tsformer trained on the visible rows of `name` less its last k horizons, scored on the first of them (MAE
    relative to seasonal naive's); the hidden horizon is not read."""
    visible = pd.read_csv(folder / f"{name}.csv")
    horizon, season = info["horizon"], info["season"]
    cut = len(visible) - k * horizon
    seen, truth = visible.iloc[:cut], visible["value"].to_numpy(dtype=float)[cut : cut + horizon]
    out = runs_dir / "earlier" / f"{name}_{k}"
    out.mkdir(parents=True, exist_ok=True)
    seen.to_csv(out / "visible.csv", index=False)
    started = time.monotonic()
    with contextlib.redirect_stderr(io.StringIO()):
        predictor = tsformer.fit(
            out / "visible.csv", horizon=horizon, config=overrides, out=out / "run", overwrite=True, notes=True
        )
        forecast = predictor.predict()
    values = seen["value"].to_numpy(dtype=float)
    naive = np.tile(values[-season:], -(-horizon // season))[:horizon]
    row = {
        "series": name,
        "horizons_before_end": k,
        "tsformer_relative": mae(forecast["value"].to_numpy(dtype=float), truth) / mae(naive, truth),
        "forecaster": "/".join(sorted(set(forecast["forecaster"]))),
        "train_predict_s": round(time.monotonic() - started, 1),
    }
    print(
        f"{name}, {k} horizon(s) before the visible end: tsformer MAE / seasonal naive's "
        f"{row['tsformer_relative']:.3f} ({row['forecaster']}); {row['train_predict_s']:.0f} s",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", required=True, help="the folder benchmarks/peers/single_series.py wrote")
    parser.add_argument("--runs-dir", default="runs/bench/single", help="where the run folders go")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="config override (repeatable)")
    parser.add_argument("--no-write", action="store_true", help="print the results only")
    parser.add_argument("--earlier", type=int, default=0, help="also score K earlier horizons of the visible rows")
    args = parser.parse_args()
    overrides = {key: yaml.safe_load(value) for key, value in (o.split("=", 1) for o in args.overrides)}

    import tsformer

    folder = Path(args.series)
    peers = json.loads((folder / "peers.json").read_text())
    rows = []
    for name, info in peers.items():
        visible = pd.read_csv(folder / f"{name}.csv")
        truth = pd.read_csv(folder / f"{name}_truth.csv")["value"].to_numpy(dtype=float)
        horizon, season = info["horizon"], info["season"]
        started = time.monotonic()
        with contextlib.redirect_stderr(io.StringIO()) as printed:
            predictor = tsformer.fit(
                folder / f"{name}.csv",
                horizon=horizon,
                config=overrides,
                out=Path(args.runs_dir) / name,
                overwrite=True,
                notes=True,
            )
            forecast = predictor.predict()
        wall = time.monotonic() - started
        if len(forecast) != horizon or "forecaster" not in forecast:
            raise SystemExit(f"Error: {name}: the forecast has {len(forecast)} rows, not {horizon}, or no forecaster")
        hidden_dates = pd.read_csv(folder / f"{name}_truth.csv")["date"]
        if list(pd.to_datetime(forecast["date"]).dt.strftime("%Y-%m-%d")) != list(
            pd.to_datetime(hidden_dates).dt.strftime("%Y-%m-%d")
        ):
            raise SystemExit(f"Error: {name}: the forecast's dates are not the hidden horizon's")
        scale = seasonal_scale(visible["value"].to_numpy(dtype=float), season)
        naive = mae(np.asarray(info["peers"]["SeasonalNaive"]["forecast"]), truth)
        shipped = forecast["value"].to_numpy(dtype=float)
        row = {
            "series": name,
            "freq": info["freq"],
            "rows": info["rows"],
            "horizon": horizon,
            "tsformer_mase": mae(shipped, truth) / scale,
            "tsformer_relative": mae(shipped, truth) / naive,
            "forecaster": "/".join(sorted(set(forecast["forecaster"]))),
            "train_predict_s": round(wall, 1),
            "model_val_mse": predictor.summary.best_val_mse,
            "seasonal_naive_mase": naive / scale,
            "notes": [line for line in printed.getvalue().splitlines() if line.startswith(("value:", "final model"))],
        }
        for peer in PEERS:
            error = mae(np.asarray(info["peers"][peer]["forecast"]), truth)
            row[f"{peer}_mase"], row[f"{peer}_relative"] = error / scale, error / naive
        rows.append(row)
        print(
            f"{name}: tsformer MASE {row['tsformer_mase']:.3f} ({row['forecaster']}), AutoETS "
            f"{row['AutoETS_mase']:.3f}, seasonal naive {row['seasonal_naive_mase']:.3f}; the model's validation "
            f"MSE {row['model_val_mse']:.4f}; {wall:.0f} s",
            flush=True,
        )
    table = pd.DataFrame(rows)
    summary = {who: float(np.exp(np.log(table[f"{who}_relative"]).mean())) for who in ("tsformer", *PEERS)}
    earlier = [
        earlier_origin(tsformer, folder, name, info, k, Path(args.runs_dir), overrides)
        for k in range(1, args.earlier + 1)
        for name, info in peers.items()
    ]
    result = {
        "series": rows,
        "geometric_mean_relative_mae": summary,
        "earlier_origins": earlier,
        "earlier_geometric_mean_relative_mae": geometric_mean([r["tsformer_relative"] for r in earlier]),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "wall_seconds": round(float(table["train_predict_s"].sum()), 1),
    }
    print(json.dumps({k: v for k, v in result.items() if k not in ("series", "earlier_origins")}, indent=2))
    if args.no_write:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "single_series.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "single_series.md").write_text(markdown(result))


def markdown(result: dict) -> str:
    lines = [
        "# Real single series, last horizon hidden",
        "",
        "Generated by `make bench-single` (benchmarks/single_series.py). tsformer with its defaults and the "
        "horizon only; the peers (statsforecast 2.0.3) on the same visible rows. MASE scaled by each series' "
        "in-sample seasonal-naive MAE; relative = MAE / seasonal naive's MAE.",
        "",
        "| series | freq | rows | horizon | tsformer MASE | shipped | AutoETS MASE | AutoTheta MASE | seasonal naive "
        "MASE | train + predict s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["series"]:
        lines.append(
            f"| {r['series']} | {r['freq']} | {r['rows']} | {r['horizon']} | {r['tsformer_mase']:.3f} | "
            f"{r['forecaster']} | {r['AutoETS_mase']:.3f} | {r['AutoTheta_mase']:.3f} | "
            f"{r['seasonal_naive_mase']:.3f} | {r['train_predict_s']:.0f} |"
        )
    summary = result["geometric_mean_relative_mae"]
    lines += [
        "",
        "Geometric mean over the series of MAE relative to seasonal naive (below 1: better than it): "
        + ", ".join(f"{who} **{value:.3f}**" for who, value in summary.items())
        + ".",
        f"Peak RSS {result['peak_rss_mib']:.0f} MiB; train + predict {result['wall_seconds']:.0f} s in all.",
        "",
    ]
    earlier = result["earlier_origins"]
    if earlier:
        ks = sorted({r["horizons_before_end"] for r in earlier})
        lines += [
            "Earlier origins, from the visible rows only (`--earlier`): each series cut 1 to "
            f"{ks[-1]} horizons before its visible end, trained with the same defaults, the horizon after the cut "
            "scored as tsformer's MAE relative to seasonal naive's. Geometric mean over these "
            f"{len(earlier)} windows: **{result['earlier_geometric_mean_relative_mae']:.3f}**.",
            "",
            "| series | " + " | ".join(f"{k} before the end" for k in ks) + " |",
            "|---|" + "---|" * len(ks),
        ]
        for name in dict.fromkeys(r["series"] for r in earlier):
            cells = {r["horizons_before_end"]: r for r in earlier if r["series"] == name}
            lines.append(f"| {name} | " + " | ".join(f"{cells[k]['tsformer_relative']:.3f}" for k in ks) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

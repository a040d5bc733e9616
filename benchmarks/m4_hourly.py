"""M4 Hourly: 414 series, horizon 48, the competition's own test set and metrics.

Protocol (../shared/data/README.md): train on m4_hourly_train.csv only (each series' last 48 steps
are tsformer's test split and the 144 before them validation, every origin there scored, chosen on
nothing else; the final model then trains on every row), forecast the 48 steps after each series
once with `Predictor.predict`, and score against m4_hourly_test.csv:
sMAPE (the M4 definition, in %) and MASE (season 24, scaled by each series' in-sample seasonal-naive
MAE), each averaged over the 48 steps, then over series. Seasonal naive is scored the same way as a
check on the scoring (the competition's figure is 13.912 / 1.193).

Train and predict run in this process through the Python API (`tsformer.fit`, `Predictor.predict`,
`tsformer.evaluate.evaluate`), timed; the peak RSS is this process's (after training, and after
predicting). The run folder and its forecast.csv are kept in --runs-dir. Results go to
benchmarks/results/m4_hourly.md and .json.

Example: .venv/bin/python benchmarks/m4_hourly.py                     (make bench-m4)
         .venv/bin/python benchmarks/m4_hourly.py --set model.d_model=128 --name m4_hourly_wide --no-write
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
HORIZON = 48
SEASON = 24
# (sMAPE %, MASE) of published entries on the same test set
REFERENCES = {
    "Doornik, Hendry & Castle (best M4 Hourly entry)": (8.913, 0.801),
    "ES-RNN (Smyl, M4 winner overall)": (9.328, 0.893),
    "NHITS (neuralforecast, input 144, 1000 steps; measured on 2 CPU cores, 13 min)": (12.70, 0.983),
    "AutoARIMA (statsforecast)": (13.8, 1.03),
    "Seasonal naive (M4 published)": (13.912, 1.193),
}


def data_dir(given: str | None) -> Path:
    folder = Path(given or os.environ.get("TSFORMER_DATA_DIR") or REPO.parent / "shared" / "data")
    for name in ("m4_hourly_train.csv", "m4_hourly_test.csv"):
        if not (folder / name).is_file():
            sys.exit(f"Error: {folder / name} not found; pass --data-dir or set TSFORMER_DATA_DIR")
    return folder


def m4_scores(forecast: pd.DataFrame, train: pd.DataFrame, test: pd.DataFrame) -> dict:
    """sMAPE and MASE of `forecast` (unique_id, ds, y) against `test`, per series then averaged."""
    from tsformer.metrics import mase_scale, smape

    smapes, mases = [], []
    truth_by_id = dict(tuple(test.groupby("unique_id", sort=False)))
    history_by_id = dict(tuple(train.groupby("unique_id", sort=False)))
    for uid, predicted in forecast.groupby("unique_id", sort=False):
        truth = truth_by_id[uid]["y"].to_numpy()
        values = predicted["y"].to_numpy()
        if len(values) != HORIZON or len(truth) != HORIZON:
            sys.exit(f"Error: series {uid} has {len(values)} forecasts and {len(truth)} test values, not {HORIZON}")
        scale = mase_scale(history_by_id[uid]["y"].to_numpy()[:, None], SEASON)[0]
        smapes.append(float(np.mean(smape(values, truth))))
        mases.append(float(np.mean(np.abs(values - truth)) / scale))
    if len(smapes) != test["unique_id"].nunique():
        sys.exit(f"Error: {len(smapes)} series forecast, {test['unique_id'].nunique()} in the test set")
    return {"smape": float(np.mean(smapes)), "mase": float(np.mean(mases)), "n_series": len(smapes)}


def m4_interval_scores(forecast: pd.DataFrame, train: pd.DataFrame, test: pd.DataFrame) -> dict:
    """Per interval level in `forecast` (y_lower_80, y_upper_80, ...): the share of test values inside,
    the mean width, and MSIS (M4: width plus 2/alpha times each miss, over the series' seasonal-naive
    MAE, averaged over steps then series); and the weighted quantile loss of the quantiles the intervals
    imply (the point forecast as the median), 2 x pinball summed over points / sum |y|."""
    from tsformer.metrics import mase_scale

    truth = test.groupby("unique_id", sort=False)["y"].apply(np.asarray).to_dict()
    scales = {uid: mase_scale(series["y"].to_numpy()[:, None], SEASON)[0] for uid, series in train.groupby("unique_id")}
    ids = forecast["unique_id"].to_numpy()
    y = np.concatenate([truth[uid] for uid in dict.fromkeys(ids)])  # the forecast's series order
    scale = np.array([scales[uid] for uid in ids])
    levels = sorted({int(c.rsplit("_", 1)[1]) for c in forecast.columns if c.startswith("y_lower_")})
    out: dict = {"levels": {}}
    quantiles = [(0.5, forecast["y"].to_numpy())]
    for level in levels:
        lower, upper = forecast[f"y_lower_{level}"].to_numpy(), forecast[f"y_upper_{level}"].to_numpy()
        alpha = 1 - level / 100
        penalty = (upper - lower) + 2 / alpha * (np.maximum(lower - y, 0) + np.maximum(y - upper, 0))
        per_series = pd.Series(penalty / scale).groupby(ids, sort=False).mean()
        out["levels"][str(level)] = {
            "coverage": float(np.mean((lower <= y) & (y <= upper))),
            "width": float(np.mean(upper - lower)),
            "msis": float(per_series.mean()),
        }
        quantiles += [(alpha / 2, lower), (1 - alpha / 2, upper)]
    pinball = sum(np.maximum(q * (y - v), (q - 1) * (y - v)).sum() for q, v in quantiles)
    out["wql"] = float(2 * pinball / len(quantiles) / np.abs(y).sum())
    out["wql_quantiles"] = sorted(q for q, _ in quantiles)
    return out


def seasonal_naive(train: pd.DataFrame) -> pd.DataFrame:
    """The last 24 values of each series, repeated over the horizon."""
    rows = []
    for uid, series in train.groupby("unique_id", sort=False):
        last = series["y"].to_numpy()[-SEASON:]
        rows.append(pd.DataFrame({"unique_id": uid, "y": np.tile(last, HORIZON // SEASON)}))
    return pd.concat(rows, ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder holding m4_hourly_train.csv and m4_hourly_test.csv")
    parser.add_argument("--runs-dir", default="runs/bench", help="where the run folder goes")
    parser.add_argument("--name", default="m4_hourly", help="run and results name")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="config override (repeatable)")
    parser.add_argument("--no-write", action="store_true", help="print the results only")
    args = parser.parse_args()

    folder = data_dir(args.data_dir)
    train_csv, test_csv = folder / "m4_hourly_train.csv", folder / "m4_hourly_test.csv"
    run = Path(args.runs_dir) / args.name
    config = {key: yaml.safe_load(value) for key, value in (o.split("=", 1) for o in args.overrides)}

    import tsformer
    from tsformer.evaluate import evaluate, format_report

    started = time.monotonic()
    with contextlib.redirect_stderr(io.StringIO()) as printed:  # its notes, as `tsformer train` prints them
        predictor = tsformer.fit(train_csv, horizon=HORIZON, config=config, out=run, overwrite=True, notes=True)
    trained = {"wall_seconds": round(time.monotonic() - started, 1), "peak_rss_mib": peak_rss_mib()}
    data = predictor.read()  # the data it was trained on
    report = evaluate(predictor, data)  # its own test split: each series' last 48 steps
    validation = evaluate(predictor, data, split="val").scores  # each series' validation window: for selection
    started = time.monotonic()
    forecast = predictor.predict()  # the 48 steps after each series
    predicted = {"wall_seconds": round(time.monotonic() - started, 1), "peak_rss_mib": peak_rss_mib()}
    forecast.to_csv(run / "forecast.csv", index=False)
    summary = predictor.summary
    train = pd.read_csv(train_csv)
    test = pd.read_csv(test_csv)
    model = m4_scores(forecast, train, test)
    naive = m4_scores(seasonal_naive(train), train, test)
    intervals = m4_interval_scores(forecast, train, test)
    sets = [f"--set {o}" for o in args.overrides]
    command = (
        f"tsformer.fit({train_csv.name!r}, horizon={HORIZON}, config={config!r}, out={str(run)!r}) "
        f"(= {' '.join(['tsformer train', train_csv.name, '--horizon', str(HORIZON), *sets])})"
    )
    result = {
        "name": args.name,
        "dataset": "M4 Hourly (414 series, horizon 48, official test set)",
        "overrides": args.overrides,
        "resolved": {  # what the automatic settings became for this data
            "train.loss": predictor.config.train.loss,
            "data.calendar": predictor.config.data.calendar,
            "data.val_horizons": predictor.config.data.val_horizons,
            "train.final_fit": predictor.config.train.final_fit,
            "train.epochs": predictor.config.train.epochs,
            "model.dropout": predictor.config.model.dropout,
            "model.cycle": predictor.config.model.cycle,
        },
        "final_model": _final(predictor.final),
        "model": model,
        "seasonal_naive": naive,
        "intervals": intervals,
        "references": {name: {"smape": s, "mase": m} for name, (s, m) in REFERENCES.items()},
        "best_val_mse": summary.best_val_mse,
        "best_val_score": summary.best_val_loss,
        "validation": {name: {k: v["mean"][k] for k in ("smape", "mase")} for name, v in validation.items()},
        "epochs_run": summary.epochs_run,
        "train": {"command": command, **trained},
        "predict": {"command": "predictor.predict()", **predicted},
        "train_output": [*printed.getvalue().strip().splitlines(), summary.trained_line(panel=True), *summary.lines],
        "evaluate_output": format_report(report).splitlines(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    print(
        f"{args.name}: sMAPE {model['smape']:.3f} MASE {model['mase']:.3f} on {model['n_series']} series "
        f"(seasonal naive {naive['smape']:.3f} / {naive['mase']:.3f}); "
        f"validation sMAPE {result['validation']['model']['smape']:.3f} "
        f"MASE {result['validation']['model']['mase']:.3f}; "
        f"train {trained['wall_seconds']:.0f} s, peak RSS {trained['peak_rss_mib']:.0f} MiB; "
        f"predict {predicted['wall_seconds']:.1f} s (peak RSS of the process then {predicted['peak_rss_mib']:.0f} MiB)"
    )
    if args.no_write:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(markdown(result))


def peak_rss_mib() -> float:
    """This process's peak resident set size so far, MiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _final(final) -> dict | None:
    """The final model's steps, windows and seconds; None when the held-out model forecast."""
    if final is None:
        return None
    return {"steps": final.steps, "windows": final.n_windows, "seconds": round(final.seconds)}


def markdown(result: dict) -> str:
    model, naive = result["model"], result["seasonal_naive"]
    val_steps = HORIZON * (result["resolved"]["data.val_horizons"] or 1)
    lines = [
        f"# {result['dataset']}",
        "",
        "Generated by `make bench-m4` (benchmarks/m4_hourly.py). Trained on the train file only; each series' "
        f"last {HORIZON} steps are tsformer's own test split and the {val_steps} "
        "before them validation, scored at every origin (selection used nothing else); "
        + (
            "the final model, trained on every row with the held-out run's recipe, forecasts"
            if result.get("final_model")
            else "the held-out model forecasts"
        )
        + " the 48 steps after each series once, scored against the official test set.",
        "",
        "| forecaster | sMAPE (%) | MASE |",
        "|---|---|---|",
        f"| **tsformer** ({', '.join(result['overrides']) or 'defaults'}) | **{model['smape']:.3f}** | "
        f"**{model['mase']:.3f}** |",
        f"| seasonal naive (scored here) | {naive['smape']:.3f} | {naive['mase']:.3f} |",
    ]
    for name, ref in result["references"].items():
        lines.append(f"| {name} | {ref['smape']:.3f} | {ref['mase']:.3f} |")
    intervals = result.get("intervals", {})
    if intervals.get("levels"):
        lines += [
            "",
            "Conformal intervals against the official test set, calibrated on each series' validation windows "
            "(each window's error that of the forecaster chosen on the other half of its series' origins):",
            "",
            "| level | coverage | mean width | MSIS |",
            "|---|---|---|---|",
            *[
                f"| {level} % | {100 * s['coverage']:.1f} % | {s['width']:.4g} | {s['msis']:.3f} |"
                for level, s in intervals["levels"].items()
            ],
            "",
            f"Weighted quantile loss over the quantiles {', '.join(f'{q:g}' for q in intervals['wql_quantiles'])} "
            f"(the point forecast as the median, the interval bounds as the others): {intervals['wql']:.4f}.",
        ]
    lines += [
        "",
        f"- Train: {result['train']['wall_seconds']:.0f} s wall, peak RSS {result['train']['peak_rss_mib']:.0f} MiB, "
        f"{result['epochs_run']} epochs, best validation MSE {result['best_val_mse']:.4f} (its score, the "
        f"geometric mean of the series' MSE that chose the epoch: {result['best_val_score']:.4f}; "
        f"{result['machine']}).",
        f"- Validation (each series' 48 steps before its own test split; what settings were chosen on): sMAPE "
        f"{result['validation']['model']['smape']:.3f}, MASE {result['validation']['model']['mase']:.3f} "
        f"(seasonal naive {result['validation']['seasonal_naive']['smape']:.3f} / "
        f"{result['validation']['seasonal_naive']['mase']:.3f}).",
        f"- Predict (414 series): {result['predict']['wall_seconds']:.1f} s wall (the process's peak RSS then "
        f"{result['predict']['peak_rss_mib']:.0f} MiB: train and predict run in one process).",
        f"- Call: `{result['train']['command']}`",
        "",
        "What training printed:",
        "",
        *[f"    {line}" for line in result["train_output"]],
        "",
        "`tsformer evaluate` of the run (its own test split: the last 48 steps of each training series):",
        "",
        *[f"    {line}" for line in result["evaluate_output"]],
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

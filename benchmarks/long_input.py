"""Long-format scale: 20,000 series x 500 hourly steps (10,000,000 rows) train one epoch and predict
every series under 6 GiB peak RSS.

The CSV (`unique_id, ds, y`, each series a noisy daily cycle with its own level, scale and start) is
generated under --workdir, never in the repository. Load (`tsformer.data.training_data`), train (one
epoch over every `--stride`-th training window) and predict (all series) each run in their own
process under `/usr/bin/time -v`. Reported: rows/s loaded, windows/s trained, series/s predicted, and
each step's peak RSS. Results: benchmarks/results/long_input.md and .json; exits 1 over the limit.

Example: .venv/bin/python benchmarks/long_input.py                       (make perf)
         .venv/bin/python benchmarks/long_input.py --series 500 --no-write   (a quick dry run)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from large_input import timed  # noqa: E402  (the same /usr/bin/time wrapper)

RESULTS = Path(__file__).resolve().parent / "results"
LIMIT_GIB = 6.0
TRAIN_FLAGS = [
    "--horizon", "24", "--context-len", "96", "--epochs", "1", "--quiet", "--overwrite",
    "--set", "model.patch_len=24", "--set", "train.num_threads=2",
]  # fmt: skip

LOAD_PROBE = """
import json, sys, time
from tsformer.config import load_config
from tsformer.data import training_data
cfg = load_config(None, [f"data.path={sys.argv[1]}", "model.context_len=96", "model.patch_len=24", "model.horizon=24"])
started = time.perf_counter()
data = training_data(cfg)
seconds = time.perf_counter() - started
print(json.dumps({"prepare_s": seconds, "rows": data.frame.n_rows, "series": data.frame.n_ids,
                  "train_windows": len(data.split_windows("train"))}))
"""


def write_csv(path: Path, n_series: int, length: int, seed: int = 0, chunk: int = 1000) -> float:
    """`unique_id, ds, y` for n_series hourly series of `length` steps; returns seconds taken."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    t = np.arange(length)
    with path.open("w", newline="") as handle:
        for first in range(0, n_series, chunk):
            ids = np.arange(first, min(n_series, first + chunk))
            level = rng.uniform(10, 1000, len(ids))[:, None]
            y = level * (1 + 0.3 * np.sin(2 * np.pi * t / 24 + rng.uniform(0, 6.3, (len(ids), 1))))
            y += rng.normal(0, 1, y.shape) * level * 0.05
            start = pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 1000, len(ids)), unit="h")
            stamps = (start.to_numpy()[:, None] + t[None, :] * np.timedelta64(1, "h")).ravel()
            frame = pd.DataFrame({"unique_id": np.repeat([f"s{i}" for i in ids], length), "ds": stamps, "y": y.ravel()})
            frame.to_csv(handle, index=False, header=first == 0, float_format="%.3f", date_format="%Y-%m-%d %H:%M:%S")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=20_000)
    parser.add_argument("--length", type=int, default=500)
    parser.add_argument("--stride", type=int, default=100, help="train.train_stride: every n-th training window")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tsformer-long-input"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    csv, run, forecast = args.workdir / "long.csv", args.workdir / "run", args.workdir / "forecast.csv"
    generate_s = write_csv(csv, args.series, args.length)
    tsformer = [sys.executable, "-m", "tsformer"]
    load = timed([sys.executable, "-c", LOAD_PROBE, str(csv)], args.workdir, "load")
    probe = json.loads(load["stdout_tail"][-1]) if load["exit_code"] == 0 else {}
    train = timed(
        [*tsformer, "train", str(csv), "--out", str(run), *TRAIN_FLAGS, "--set", f"train.train_stride={args.stride}"],
        args.workdir,
        "train",
    )
    predict = timed([*tsformer, "predict", str(run), str(csv), "--out", str(forecast)], args.workdir, "predict")
    steps = {"load": load, "train": train, "predict": predict}
    trained = re.search(r"on (\d+) windows", " ".join(train["stdout_tail"]))
    epoch_s = float(pd.read_csv(run / "history.csv")["seconds"].iloc[0]) if (run / "history.csv").exists() else None
    n_rows = args.series * args.length
    result = {
        "series": args.series,
        "length": args.length,
        "rows": n_rows,
        "csv_mib": round(csv.stat().st_size / 2**20, 1),
        "csv_generate_s": round(generate_s, 1),
        "train_stride": args.stride,
        "load": probe,
        "rows_per_s_loaded": round(n_rows / probe["prepare_s"]) if probe else None,
        "train_epoch_s": epoch_s,
        "windows_per_s_trained": round(int(trained.group(1)) / epoch_s) if trained and epoch_s else None,
        "series_per_s_predicted": round(args.series / predict["wall_s"]),
        "forecast_rows": sum(1 for _ in forecast.open()) - 1 if forecast.exists() else 0,
        "steps": steps,
        "peak_rss_mib": max(s["peak_rss_mib"] or 0 for s in steps.values()),
        "limit_mib": LIMIT_GIB * 1024,
    }
    result["passed"] = (
        all(s["exit_code"] == 0 for s in steps.values())
        and result["peak_rss_mib"] <= LIMIT_GIB * 1024
        and result["forecast_rows"] == 24 * args.series
    )
    text = markdown(result)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "long_input.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "long_input.md").write_text(text)
    return 0 if result["passed"] else 1


def markdown(result: dict) -> str:
    lines = [
        f"# Long format at scale: {result['series']:,} series x {result['length']} steps ({result['rows']:,} rows)",
        "",
        f"`unique_id, ds, y`, {result['csv_mib']} MiB, generated under /tmp. One epoch over every "
        f"{result['train_stride']}th training window, then a forecast of every series. Limit {LIMIT_GIB:g} GiB peak "
        f"RSS per process: **{'passed' if result['passed'] else 'FAILED'}** (highest {result['peak_rss_mib']:,.0f} "
        "MiB).",
        "",
        "| step | wall (s) | peak RSS (MiB) | exit |",
        "|---|---:|---:|---:|",
        *[f"| {n} | {s['wall_s']} | {s['peak_rss_mib']} | {s['exit_code']} |" for n, s in result["steps"].items()],
        "",
        f"- Loaded (read, grid, split, scale: `training_data`): {result['rows_per_s_loaded']:,} rows/s.",
        f"- Trained: {result['windows_per_s_trained']:,} windows/s (train output: "
        f"{' / '.join(result['steps']['train']['stdout_tail'])}).",
        f"- Predicted: {result['series_per_s_predicted']:,} series/s ({result['forecast_rows']:,} forecast rows, "
        "the whole `tsformer predict` command).",
        "",
        "Reproduce: `make perf` (or `.venv/bin/python benchmarks/long_input.py`).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

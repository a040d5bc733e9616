"""Large input: a 2,000,000-row hourly CSV trains for one epoch and predicts in under 4 GiB peak RSS.

Also inference throughput: windows forecast per second by the ETTh1 default model (context 336,
horizon 96, 7 columns) on 2 torch threads, batch by batch as `evaluate` and validation run it; and
training throughput: windows per second of the training step for the M4 Hourly and ETTh1 default models.

The CSV (8 columns: `date` plus 7 numeric series) is generated under --workdir, never in the
repository. Each step runs in its own process under `/usr/bin/time -v`, whose peak RSS and wall
time are recorded; the CSV load (`tsformer.data.read_series`) is timed on its own. Results go to
benchmarks/results/large_input.md and .json. Exits 1 if a step fails or exceeds the limit.

Example: .venv/bin/python benchmarks/large_input.py            (make perf)
         .venv/bin/python benchmarks/large_input.py --rows 50000 --no-write   (a quick dry run)
         .venv/bin/python benchmarks/large_input.py --inference-only   (a minute; updates the results' inference part)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tsformer.config import AUTO_DROPOUT, LONG_EPOCH_DROPOUT

RESULTS = Path(__file__).resolve().parent / "results"
LIMIT_GIB = 4.0
N_SERIES = 7  # plus the date column: 8 columns; also ETTh1's
INFERENCE_BATCHES = (64, 128, 256, 512)  # windows, besides the package's own (`inference_batch`: 292 for 7 columns)
CHUNK_ROWS = 250_000
TRAIN_FLAGS = [
    "--epochs", "1", "--context-len", "96", "--horizon", "24", "--quiet", "--overwrite",
    "--set", "model.patch_len=16", "--set", "model.d_model=32", "--set", "model.n_heads=4",
    "--set", "model.n_layers=2", "--set", "model.d_ff=64",
]  # fmt: skip

LOAD_PROBE = """
import json, sys, time
csv = sys.argv[1]
from tsformer.config import load_config
from tsformer.data import read_series, training_data
cfg = load_config(None, [f"data.path={csv}", "model.context_len=96", "model.horizon=24"])
started = time.perf_counter()
frame = read_series(csv, cfg.data)
read_s = time.perf_counter() - started
shape, dtype = frame.values.shape, str(frame.values.dtype)
del frame
started = time.perf_counter()
data = training_data(cfg)
prepare_s = time.perf_counter() - started
windows = data.windows("train")
strided = windows[::100]
scaled = data.inputs.target
base = scaled.untyped_storage().data_ptr()
print(json.dumps({
    "read_series_s": read_s, "prepare_s": prepare_s, "rows": shape[0], "series": shape[1], "values_dtype": dtype,
    "scaled_dtype": str(scaled.dtype), "train_windows": len(windows),
    "windows_are_views": windows.untyped_storage().data_ptr() == base and strided.untyped_storage().data_ptr() == base,
    "scaled_mib": scaled.numel() * scaled.element_size() / 2**20,
    "windows_as_copies_mib": windows.numel() * windows.element_size() / 2**20,
}))
"""


def write_csv(path: Path, rows: int, seed: int = 0) -> float:
    """Hourly `date` plus N_SERIES daily/weekly seasonal series with noise; returns seconds taken."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    phases = rng.uniform(0, 2 * np.pi, N_SERIES)
    columns = [f"s{j}" for j in range(N_SERIES)]
    with path.open("w", newline="") as handle:
        for first in range(0, rows, CHUNK_ROWS):
            t = np.arange(first, min(rows, first + CHUNK_ROWS))
            dates = pd.date_range("2000-01-01", periods=len(t), freq="h") + pd.Timedelta(hours=first)
            daily = np.sin(2 * np.pi * t[:, None] / 24 + phases)
            weekly = 0.5 * np.sin(2 * np.pi * t[:, None] / 168 + phases)
            values = 10 + 3 * daily + weekly + rng.normal(0, 0.3, (len(t), N_SERIES))
            chunk = pd.DataFrame(values, columns=columns)
            chunk.insert(0, "date", dates.strftime("%Y-%m-%d %H:%M:%S"))
            chunk.to_csv(handle, index=False, header=first == 0, float_format="%.4f")
    return time.perf_counter() - started


def timed(command: list[str], workdir: Path, name: str) -> dict:
    """Run `command` under /usr/bin/time -v; its peak RSS, wall time, exit code and output tail."""
    report = workdir / f"{name}.time"
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", "-o", str(report), *command], capture_output=True, text=True)
    wall = time.perf_counter() - started
    stats = report.read_text() if report.exists() else ""
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stats)
    return {
        "command": shlex.join(command),
        "exit_code": done.returncode,
        "wall_s": round(wall, 2),
        "peak_rss_mib": round(int(peak.group(1)) / 1024, 1) if peak else None,
        "stdout_tail": done.stdout.strip().splitlines()[-3:],
        "stderr_tail": done.stderr.strip().splitlines()[-3:],
    }


def run(rows: int, workdir: Path, stride: int) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    csv, run_dir, forecast = workdir / f"large_{rows}.csv", workdir / "run", workdir / "forecast.csv"
    generate_s = write_csv(csv, rows)
    tsformer = [sys.executable, "-m", "tsformer"]
    load = timed([sys.executable, "-c", LOAD_PROBE, str(csv)], workdir, "load")
    probe = json.loads(load["stdout_tail"][-1]) if load["exit_code"] == 0 else {}
    train = timed([*tsformer, "train", str(csv), "--out", str(run_dir), *TRAIN_FLAGS, "--set",
                   f"train.train_stride={stride}"], workdir, "train")  # fmt: skip
    predict = timed([*tsformer, "predict", str(run_dir), str(csv), "--out", str(forecast)], workdir, "predict")
    steps = {"load": load, "train": train, "predict": predict}
    inference, training = measure_inference(), measure_training()
    peaks = [s["peak_rss_mib"] or 0 for s in steps.values()]
    return {
        "rows": rows,
        "columns": 1 + N_SERIES,
        "csv_mib": round(csv.stat().st_size / 2**20, 1),
        "csv_generate_s": round(generate_s, 1),
        "train_stride": stride,
        "load": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in probe.items()},
        "steps": steps,
        "peak_rss_mib": max(peaks),
        "limit_mib": LIMIT_GIB * 1024,
        "passed": all(s["exit_code"] == 0 for s in steps.values()) and max(peaks) <= LIMIT_GIB * 1024,
        "inference": inference,
        "training": training,
        "machine": {
            "python": platform.python_version(),
            "torch": _version("torch"),
            "pandas": pd.__version__,
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
    }


def measure_inference(n_windows: int = 4096, repeats: int = 5, threads: int = 2) -> dict:
    """Windows per second of `Forecaster.predict_batches` for the ETTh1 default model, per batch size.

    Random weights and contexts (the cost does not depend on the values); best and median of
    `repeats` passes over `n_windows` windows after a warm-up pass, the batch sizes taking turns
    so that a busy spell on a shared machine does not favour one of them.
    """
    import torch

    from tsformer.config import ModelConfig
    from tsformer.layout import Layout
    from tsformer.model import Forecaster
    from tsformer.model.precision import resolve_precision

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    precision = resolve_precision("auto", torch.device("cpu"))  # as `train` chooses it on this machine
    cfg = ModelConfig(context_len=336, patch_len=24, precision=precision)  # what ETTh1's automatic choice gives
    model = Forecaster(cfg, Layout(tuple(f"s{j}" for j in range(N_SERIES)))).eval()
    contexts = torch.randn(n_windows, cfg.context_len, N_SERIES)
    own_batch = model.inference_batch  # what evaluate, validation and predict use
    rates: dict[int, list[float]] = {batch: [] for batch in sorted({*INFERENCE_BATCHES, own_batch})}
    for _ in range(repeats + 1):
        for batch, batch_rates in rates.items():
            started = time.perf_counter()
            for _ in model.predict_batches(contexts, batch_size=batch):
                pass
            batch_rates.append(n_windows / (time.perf_counter() - started))
    by_batch = {
        str(batch): {"best": round(max(r[1:])), "median": round(statistics.median(r[1:]))} for batch, r in rates.items()
    }
    return {
        "model": f"ModelConfig defaults, {N_SERIES} columns",
        "precision": precision,
        "context_len": cfg.context_len,
        "horizon": cfg.horizon,
        "columns": N_SERIES,
        "batch": own_batch,
        "threads": threads,
        "windows": n_windows,
        "repeats": repeats,
        "windows_per_s": by_batch[str(own_batch)],
        "by_batch": by_batch,
    }


# name: (context_len, patch_len, horizon, columns, loss, learned cycle, dropout), as their benchmarks resolve them:
# M4 Hourly's default model subtracts a weekly cycle, which puts gradients on its series and statistics, and its
# long epochs train with dropout 0.1
TRAINING_MODELS = {
    "M4 Hourly": (336, 24, 48, 1, "mae", 168, LONG_EPOCH_DROPOUT),
    "ETTh1 default": (336, 24, 96, N_SERIES, "mse", 0, AUTO_DROPOUT),
}


def measure_training(steps: int = 30, batch: int = 128, threads: int = 2) -> dict:
    """Training windows per second of the M4 Hourly and the ETTh1 default models (M4's with its weekly cycle): the
    step `train` takes (every token's targets, forward, backward, gradient clipping, AdamW) on random batches of
    `batch` windows, the median of `steps` steps after three warm-up steps."""
    import torch

    from tsformer.config import ModelConfig, TrainConfig
    from tsformer.layout import Layout
    from tsformer.model import Covariates, Forecaster
    from tsformer.model.precision import resolve_precision
    from tsformer.train import build_optimizer

    torch.set_num_threads(threads)
    precision = resolve_precision("auto", torch.device("cpu"))  # as `train` chooses it on this machine
    out = {}
    for name, (context_len, patch_len, horizon, columns, loss, cycle, dropout) in TRAINING_MODELS.items():
        torch.manual_seed(0)
        cfg = ModelConfig(
            context_len=context_len, patch_len=patch_len, horizon=horizon, cycle=cycle, dropout=dropout,
            precision=precision,
        )  # fmt: skip
        model = Forecaster(cfg, Layout(tuple(f"s{j}" for j in range(columns)), cycle=cycle), loss).train()
        tc = TrainConfig()
        optimizer = build_optimizer(model, tc)
        windows = torch.randn(batch, context_len + horizon, columns)
        covariates = None
        if cycle:
            phases = torch.randint(0, cycle, (batch, 1)) + torch.arange(context_len + horizon)  # (B, L + H)
            covariates = Covariates(phase=phases.float())
        seconds = []
        for _ in range(steps + 3):
            started = time.perf_counter()
            targets = model.token_targets(windows)
            _, value = model(windows[:, :context_len], None, target=targets, covariates=covariates)
            optimizer.zero_grad(set_to_none=True)
            value.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            optimizer.step()
            seconds.append(time.perf_counter() - started)
        median = statistics.median(seconds[3:])
        params = sum(p.numel() for p in model.parameters())
        out[name] = {"windows_per_s": round(batch / median), "step_ms": round(1000 * median, 1), "parameters": params}
    return {"batch": batch, "threads": threads, "steps": steps, "precision": precision, "models": out}


def training_line(training: dict) -> str:
    rates = ", ".join(f"{name} {m['windows_per_s']:,}" for name, m in training["models"].items())
    return (
        f"training windows/s (batch {training['batch']}, {training['threads']} torch threads, "
        f"{training.get('precision', 'float32')}): {rates}"
    )


def inference_line(inference: dict) -> str:
    rate = inference["windows_per_s"]
    return (
        f"inference windows/s (ETTh1 default model, context {inference['context_len']}, {inference['columns']} "
        f"columns, batch {inference['batch']}, {inference.get('precision', 'float32')}): best {rate['best']:,}, "
        f"median {rate['median']:,}"
    )


def inference_markdown(inference: dict) -> list[str]:
    by_batch = ", ".join(f"{b}: {r['best']:,}" for b, r in inference["by_batch"].items())
    return [
        f"Inference: **{inference_line(inference)}**, {inference['threads']} torch threads, horizon "
        f"{inference['horizon']}, {inference['repeats']} passes over {inference['windows']:,} random windows "
        f"(`Forecaster.predict_batches`). Best by batch size: {by_batch}.",
        "",
    ]


def _version(module: str) -> str:
    return __import__(module).__version__


def markdown(result: dict) -> str:
    load, steps = result["load"], result["steps"]
    lines = [
        f"# Large input: {result['rows']:,} rows",
        "",
        f"A {result['rows']:,}-row, {result['columns']}-column hourly CSV (`date` + {result['columns'] - 1} numeric "
        f"series, {result['csv_mib']} MiB, generated under /tmp, not committed) trained for one epoch "
        f"(`train.train_stride={result['train_stride']}`) and predicted. Limit: {LIMIT_GIB:g} GiB peak RSS "
        f"per process. **{'Passed' if result['passed'] else 'FAILED'}**: highest peak "
        f"{result['peak_rss_mib']:,.0f} MiB.",
        "",
        "| step | wall (s) | peak RSS (MiB) | exit |",
        "|---|---:|---:|---:|",
    ]
    for name, step in steps.items():
        lines.append(f"| {name} | {step['wall_s']} | {step['peak_rss_mib']} | {step['exit_code']} |")
    lines += [
        "",
        f"CSV load (`tsformer.data.read_series`, in the load step): **{load.get('read_series_s')} s**; "
        f"`training_data` (read again + split + scale): {load.get('prepare_s')} s.",
        f"Values dtype: {load.get('values_dtype')} (scaled: {load.get('scaled_dtype')}, "
        f"{load.get('scaled_mib')} MiB). {load.get('train_windows'):,} training windows are views of the scaled "
        f"series: {load.get('windows_are_views')} (as copies: {load.get('windows_as_copies_mib'):,} MiB).",
        "",
        *(inference_markdown(result["inference"]) if "inference" in result else []),
        *([f"Training: **{training_line(result['training'])}** (the step `train` takes, random batches, "
           "M4's default model with its weekly cycle; `measure_training`).", ""] if "training" in result else []),
        "Commands (each under `/usr/bin/time -v`):",
        "",
        "```",
        *[step["command"] if name != "load" else "python -c <LOAD_PROBE in benchmarks/large_input.py> CSV"
          for name, step in steps.items()],
        "```",
        "",
        f"Train output: {' / '.join(steps['train']['stdout_tail'])}",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in result["machine"].items()),
        "",
        "Reproduce: `make perf` (or `.venv/bin/python benchmarks/large_input.py`).",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tsformer-large-input"))
    parser.add_argument("--stride", type=int, default=100, help="train.train_stride: every n-th training window")
    parser.add_argument("--no-write", action="store_true", help="print the results; leave benchmarks/results alone")
    parser.add_argument(
        "--inference-only", action="store_true", help="only measure inference throughput (into the existing results)"
    )
    args = parser.parse_args(argv)
    if args.inference_only:
        return inference_only(write=not args.no_write)
    result = run(args.rows, args.workdir, args.stride)
    text = markdown(result)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "large_input.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "large_input.md").write_text(text)
    return 0 if result["passed"] else 1


def inference_only(write: bool) -> int:
    """Measure inference, print it, and put it into the saved large-input results (if there are some)."""
    inference = measure_inference()
    print(inference_line(inference))
    print(json.dumps(inference, indent=2))
    saved = RESULTS / "large_input.json"
    if write and saved.exists():
        result = {**json.loads(saved.read_text()), "inference": inference}
        saved.write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "large_input.md").write_text(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

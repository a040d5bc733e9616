"""The benchmark: train, evaluate and check one config, then rewrite the dataset's results table.

Each config writes `<results>/<config name>.json`; the Markdown table `<results>/<dataset>.md`
is regenerated from every JSON of that dataset plus the published reference rows of a CSV
(`--reference`, default `benchmarks/published_etth1.csv` relative to the current directory;
when that file is absent the table says so and has no published rows).

Beside the model, the same config is trained without the Transformer (`model.transformer=false`: the
linear skips and the learned cycle, if any, alone), so the table shows what the Transformer adds.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from tsformer.check import check_predictor
from tsformer.config import Config, load_config, to_dict, with_data_path
from tsformer.datasets import beside_config, resolve_data_path
from tsformer.errors import ConfigError, DataError
from tsformer.evaluate import evaluate, write_report
from tsformer.files import atomic_write_text
from tsformer.train import train

DEFAULT_REFERENCE = Path("benchmarks") / "published_etth1.csv"
REFERENCE_COLUMNS = ("dataset", "model", "lookback", "horizon", "mse", "mae", "source")
ABLATION_SUFFIX = "_no_transformer"  # the ablation's run folder: the config's name and this


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark config, read and checked before anything trains."""

    name: str  # the config file's stem: its run folder and result JSON
    config: Config  # its data path resolved
    dataset: str
    data: dict  # what its results are comparable on (`data_identity`), read once


def read_bench_configs(
    paths: list[Path],
    data_dir: str | Path | None = None,
    reference: str | Path = DEFAULT_REFERENCE,
    results_dir: str | Path | None = None,
) -> list[BenchConfig]:
    """Every config read, its CSV found and the reference file read, before any config trains: a mistake in the
    last one is reported at once, naming its file. A config's relative data path is taken from the current
    folder, else from the config's own folder, else by file name from the data directories. With `results_dir`,
    a config whose results would share a table with results of other data or another split is refused."""
    read, names = [], {}
    for path in map(Path, paths):
        try:
            if not path.is_file():
                raise ConfigError("no such config file; give the path of a benchmark's YAML file")
            given = load_config(path)
            if not given.data.path:
                raise ConfigError("it sets no data.path; give the CSV it benchmarks as data.path")
            cfg = with_data_path(given, resolve_data_path(beside_config(given.data.path, path), data_dir))
            if not Path(cfg.data.path).is_file():
                raise DataError(
                    f"its data.path {given.data.path} is not a file here, beside the config, or in the data "
                    "directories (--data-dir, $TSFORMER_DATA_DIR, the cache: tsformer datasets fetch NAME)"
                )
        except (ConfigError, DataError) as exc:  # each names the config it is about
            raise type(exc)(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
        ablation = path.stem.removesuffix(ABLATION_SUFFIX)
        taken = names.get(path.stem) or names.get(path.stem + ABLATION_SUFFIX) or names.get(ablation)
        if taken is not None:
            what = (
                "is given twice" if taken.resolve() == path.resolve() else f"and {taken} share the name {path.stem!r}"
            )
            raise ConfigError(
                f"{path} {what}, so one run and its results would overwrite the other's (a config's ablation runs "
                f"as NAME{ABLATION_SUFFIX}); give each config once, under its own name"
            )
        names[path.stem] = path
        dataset = Path(cfg.data.path).stem.lower()
        _reference_rows(dataset, Path(reference))  # a malformed reference file fails now, not after training
        identity = data_identity(cfg)
        for other in read:  # configs of one call share a table too
            if other.dataset == dataset and other.data != identity:
                raise ConfigError(
                    f"{path} and {names[other.name]} benchmark {dataset} on other data or another split, and their "
                    "results would share one table; bench them into separate --results-dir folders"
                )
        if results_dir is not None:
            _require_comparable(Path(results_dir), dataset, identity, path)
        read.append(BenchConfig(path.stem, cfg, dataset, identity))
    return read


def data_identity(cfg: Config) -> dict:
    """What makes two results of one dataset comparable: the lines of its file and the split."""
    with open(cfg.data.path, "rb") as handle:
        lines = sum(1 for _ in handle)
    data = cfg.data
    return {
        "lines": lines,
        "split_borders": list(data.split_borders),
        "split_ratios": list(data.split_ratios),
        "val_horizons": data.val_horizons,
    }


def _require_comparable(results_dir: Path, dataset: str, identity: dict, config: Path) -> None:
    """Refuse to write a result into a table whose results of `dataset` read other data or another split (a
    result saved before `data` was recorded is compared on its config's split; the config's own earlier result,
    which it replaces, is not compared)."""
    for path in sorted(results_dir.glob("*.json")):
        result = json.loads(path.read_text())
        if result.get("dataset") != dataset or path.stem == config.stem:
            continue
        split = {key: result.get("config", {}).get("data", {}).get(key) for key in ("split_borders", "split_ratios")}
        theirs = result.get("data") or split
        differ = [key for key in identity if key in theirs and theirs[key] != identity[key]]
        if differ:
            said = ", ".join(f"{key} {theirs[key]} against {identity[key]}" for key in differ)
            raise ConfigError(
                f"{config}: {results_dir} holds {dataset} results of other data or another split ({path.name}: "
                f"{said}), and they would share one table; write these elsewhere with --results-dir"
            )


def run_benchmark(
    config: str | Path | BenchConfig,
    runs_dir: str | Path,
    results_dir: str | Path,
    data_dir: str | Path | None = None,
    show_progress: bool = True,
    reference: str | Path = DEFAULT_REFERENCE,
) -> dict:
    """Train from the config file `config` (or one `read_bench_configs` read, its data found already, so
    `data_dir` is not read) into runs_dir/<name>, score the test split, check leakage, write JSON.

    Then regenerate the dataset's table beside it, with the published rows of `reference`.
    """
    bench = (
        config
        if isinstance(config, BenchConfig)
        else read_bench_configs([Path(config)], data_dir, reference, results_dir)[0]
    )
    name, cfg, dataset = bench.name, bench.config, bench.dataset
    given = cfg
    run_dir = Path(runs_dir) / name
    started = time.monotonic()
    predictor = train(cfg, run_dir, overwrite=True, show_progress=show_progress)
    train_wall = time.monotonic() - started
    trained, cfg = predictor.summary, predictor.config  # as trained: automatic values resolved
    data = predictor.read()
    report = evaluate(predictor, data)
    write_report(report, data, run_dir)
    checks = check_predictor(predictor, data)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    scores = {k: {"mse": v["mean"]["mse"], "mae": v["mean"]["mae"]} for k, v in report.scores.items()}
    # under the same selection: a searched run's ablation searches from the same given config within the same budget
    ablated = given if cfg.train.time_limit else cfg
    ablation = _ablation(ablated, Path(runs_dir) / f"{name}{ABLATION_SUFFIX}", show_progress)
    result = {
        "name": name,
        "dataset": dataset,
        "horizon": cfg.model.horizon,
        "context_len": cfg.model.context_len,
        "n_test_windows": report.n_windows,
        "test": scores,
        "best_val_mse": trained.best_val_mse,
        "train_wall_seconds": round(train_wall, 1),
        "epochs_run": trained.epochs_run,
        "best_epoch": trained.best_epoch,
        "n_parameters": trained.n_parameters,
        "peak_rss_mib": round(peak_mib, 1),
        "leakage_checks_passed": all(c.passed for c in checks),
        "leakage_checks_skipped": [c.name for c in checks if c.skipped],  # not run: they prove nothing
        "intervals": {
            tag: {key: value for key, value in scores.items() if key != "per_column"}
            for tag, scores in report.intervals.items()
        },
        "quantile_loss": report.quantile_loss,
        "ablation_no_transformer": ablation,
        "data": bench.data,  # as given: a split left automatic is recorded as such
        "config": to_dict(cfg),
    }
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(results_dir / f"{name}.json", json.dumps(result, indent=2))
    write_table(results_dir, result["dataset"], reference)
    return result


def _ablation(cfg: Config, run_dir: Path, show_progress: bool) -> dict:
    """The same config without the Transformer (the linear skips and the cycle alone; past-only covariates,
    which only the Transformer reads, go unused): its validation and test MSE, with the same fallback."""
    model = dataclasses.replace(cfg.model, transformer=False)
    ablated = dataclasses.replace(cfg, model=model, train=dataclasses.replace(cfg.train, quantiles=()))
    predictor = train(ablated, run_dir, overwrite=True, show_progress=show_progress)
    trained, report = predictor.summary, evaluate(predictor, predictor.read())
    return {
        "best_val_mse": trained.best_val_mse,
        "test_mse": report.scores["model"]["mean"]["mse"],
        "test_mae": report.scores["model"]["mean"]["mae"],
        "n_parameters": trained.n_parameters,
    }


def write_table(results_dir: Path, dataset: str, reference: str | Path = DEFAULT_REFERENCE) -> Path:
    """Regenerate <dataset>.md from every result JSON of that dataset and the published rows of `reference`."""
    results = sorted(
        (r for r in (json.loads(p.read_text()) for p in results_dir.glob("*.json")) if r.get("dataset") == dataset),
        key=lambda r: (r["horizon"], r["name"]),
    )
    lines = [
        f"# {dataset}: tsformer against naive baselines and published results",
        "",
        "Regenerated by `tsformer bench`. Test MSE/MAE on standardised values (scaler fit on training rows only),",
        "averaged over all columns and **every** stride-1 test window (none dropped). Trained on this machine's CPU.",
        "",
        "tsformer is the shipped forecast: per column the model, a classical candidate or a weighted mean of",
        "them, as validation chose (model alone: the model's own forecast, where the two differ). The ablation",
        "is the same config without the Transformer (the linear skips and the learned cycle alone); the",
        "published best is the lowest MSE of the reference rows at that horizon. Peak RSS is the bench",
        "process's peak up to that config (`make bench` runs one config per process).",
        "",
        "| horizon | context | tsformer MSE | tsformer MAE | no Transformer (ablation) MSE | published best MSE "
        "| repeat-last MSE | seasonal-naive MSE | test windows | train wall (s) | epochs (best) | parameters "
        "| peak RSS (MiB) | leakage checks | config | model alone MSE |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    reference = Path(reference)
    published = _reference_rows(dataset, reference)
    for r in results:
        t = r["test"]
        ablation = r.get("ablation_no_transformer")
        best = _published_best(published, r["horizon"])
        lines.append(
            f"| {r['horizon']} | {r['context_len']} | **{t['model']['mse']:.3f}** | {t['model']['mae']:.3f} "
            f"| {'-' if ablation is None else format(ablation['test_mse'], '.3f')} "
            f"| {best} "
            f"| {t['repeat_last']['mse']:.3f} | {t['seasonal_naive']['mse']:.3f} | {r['n_test_windows']} "
            f"| {r['train_wall_seconds']:.0f} | {r['epochs_run']} ({r['best_epoch']}) | {r['n_parameters']:,} "
            f"| {r['peak_rss_mib']:.0f} | {checks_verdict(r)} | {r['name']} "
            f"| {_model_alone(t)} |"
        )
    lines += _interval_table(results)
    if not reference.is_file():
        lines += ["", f"No published results: the reference file {reference} was not found (see `--reference`)."]
    elif published:
        lines += [
            "",
            "## Published results (as reported; several drop the last incomplete test batch)",
            "",
            "| model | lookback | horizon | MSE | MAE | source |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['model']} | {r['lookback']} | {r['horizon']} | {r['mse']} | {r['mae']} | {r['source']} |"
            for r in published
        ]
    path = results_dir / f"{dataset}.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def _model_alone(test: dict) -> str:
    """The model's own test MSE where the shipped forecast is not the model alone everywhere; "-" where it is."""
    alone = test.get("model_alone")
    return "-" if alone is None else f"{alone['mse']:.3f}"


def _published_best(published: list[dict], horizon: int) -> str:
    """The lowest published MSE at `horizon`, with its model and lookback; "-" when none is listed."""
    rows = [p for p in published if int(p["horizon"]) == horizon]
    if not rows:
        return "-"
    best = min(rows, key=lambda p: float(p["mse"]))
    return f"{float(best['mse']):.3f} ({best['model']}, L={best['lookback']})"


def _interval_table(results: list[dict]) -> list[str]:
    """Coverage, mean width (original units), MSIS and weighted quantile loss of the conformal intervals
    (calibrated on validation), beside seasonal naive's intervals from its in-sample errors."""
    rows = [r for r in results if r.get("intervals")]
    if not rows:
        return []
    lines = [
        "",
        "## Intervals on the test split (conformal, calibrated on validation windows only)",
        "",
        "| horizon | level | coverage | mean width | MSIS | seasonal-naive coverage | seasonal-naive width "
        "| seasonal-naive MSIS | WQL | config |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        wql = r.get("quantile_loss", {}).get("wql")
        for tag, s in r["intervals"].items():
            naive = s.get("seasonal_naive", {})
            lines.append(
                f"| {r['horizon']} | {tag} % | {100 * s['coverage']:.1f} % | {s['width']:.3g} | {s['msis']:.3f} "
                f"| {100 * naive.get('coverage', float('nan')):.1f} % | {naive.get('width', float('nan')):.3g} "
                f"| {naive.get('msis', float('nan')):.3f} | {'-' if wql is None else format(wql, '.4f')} "
                f"| {r['name']} |"
            )
    return lines


def _reference_rows(dataset: str, reference: Path) -> list[dict]:
    """The rows of the published-results CSV for `dataset`; none when the file is absent."""
    if not reference.is_file():
        return []
    with reference.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in REFERENCE_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise _bad_reference(reference, f"no column {', '.join(missing)}")
        rows = [r for r in reader if (r["dataset"] or "").lower() == dataset.lower()]
    try:
        return sorted(rows, key=lambda r: (int(r["horizon"]), float(r["mse"])))
    except (TypeError, ValueError) as exc:
        raise _bad_reference(reference, str(exc)) from None


def _bad_reference(reference: Path, problem: str) -> DataError:
    return DataError(
        f"reference file {reference} cannot be used ({problem}); it needs the columns "
        f"{','.join(REFERENCE_COLUMNS)} with an integer horizon and a numeric mse"
    )


def checks_verdict(result: dict) -> str:
    """A result's leakage checks in a word: pass, FAIL, or pass with how many could not run."""
    if not result["leakage_checks_passed"]:
        return "FAIL"
    skipped = result.get("leakage_checks_skipped", [])  # results written before skips were counted have none
    return f"pass ({len(skipped)} skipped)" if skipped else "pass"

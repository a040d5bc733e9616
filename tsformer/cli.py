"""The command line: thin commands over the library. The only module that imports typer."""

from __future__ import annotations

import atexit
import functools
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import typer

from tsformer.config import AUTO_MAX_EPOCHS, AUTO_MIN_EPOCHS, AUTO_MIN_STEPS, LONG_EPOCH_STEPS, LONG_EPOCHS, Config
from tsformer.errors import TsformerError, stop_code

DEFAULTS = Config()  # what a flag left out gives, for --help
QUIET_HELP = "No progress lines (epochs); the notes on what was chosen stay."

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Forecast time series from a CSV with a causal-masked Transformer.",
)
_debug = {"on": False}


def fail(message: str, code: int = 2) -> None:
    rank, world = os.environ.get("RANK", "0"), os.environ.get("WORLD_SIZE", "1")
    where = f" (rank {rank} of {world})" if rank != "0" else ""  # under torchrun: which process, as each may fail
    typer.echo(f"Error{where}: {message}", err=True)
    raise typer.Exit(code)


def domain_errors(command: Callable) -> Callable:
    """Turn a TsformerError into one `Error:` line and exit 2 (130 for Ctrl-C, 143 for SIGTERM); --debug shows the
    traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except TsformerError as exc:
            if _debug["on"]:
                traceback.print_exc()
            fail(str(exc), getattr(exc, "exit_code", 2))
        except KeyboardInterrupt as stop:
            fail("interrupted; nothing more was written", stop_code(stop))
        except BrokenPipeError:  # the reader closed stdout (`| head`): not an error, stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            raise typer.Exit(0) from None
        except RuntimeError as exc:
            if not _peer_stopped(exc):
                raise
            if _debug["on"]:
                traceback.print_exc()
            fail("another process of this torchrun job stopped (its own Error line says why), so this one stopped too")
        except OSError as exc:  # the file system refused: a path, a permission, a full disk
            if _debug["on"]:
                traceback.print_exc()
            where = f" ({exc.filename})" if exc.filename else ""
            fail(f"{exc.strerror or exc}{where}; check the path, its permissions and the free disk space")

    return wrapper


def _peer_stopped(exc: RuntimeError) -> bool:
    """Whether `exc` is torch.distributed's word that another rank of a torchrun job went away mid-collective
    (that rank prints why; this one should say only that it stopped with it)."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return False
    gone = ("Connection closed by peer", "Connection reset by peer")  # not a refused or failed connection: its own
    return any(text in str(exc) for text in gone)


def _print_version(value: bool) -> None:
    if value:
        from tsformer import __version__

        typer.echo(f"tsformer {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    debug: bool = typer.Option(False, "--debug", help="Show the traceback behind an error."),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    _debug["on"] = debug


FLAG_SPELLINGS = {  # config keys (within a section) whose train flag is not "--" + the key with dashes
    "path": "the CSV",
    "id_cols": "--id-col",
    "future_covs": "--future-cov",
    "past_covs": "--past-cov",
    "static_path": "--static",
    "static_covs": "--static-cov",
    "calendar": "--no-calendar",
    "targets": "--target",
    "fallback": "--no-fallback",
    "intervals": "--interval",
}


def _flag_of(key: str) -> str:
    """The train flag that sets config key `key` (within its section)."""
    return FLAG_SPELLINGS.get(key, "--" + key.replace("_", "-"))


@app.command()
@domain_errors
def train(
    csv: Path | None = typer.Argument(None, help="CSV with a time column and numeric columns."),
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML config; flags override it."),
    out: Path = typer.Option(Path("runs/latest"), "--out", "-o", help="Run folder to create."),
    target: list[str] = typer.Option(
        [], "--target", "-t", help="Column to forecast (repeatable); default: all numeric."
    ),
    time_col: str | None = typer.Option(None, "--time-col", help="Time column (default: found by name)."),
    id_col: list[str] = typer.Option(
        [],
        "--id-col",
        help="Long format: the column naming each series (repeatable for a compound id; default: unique_id, "
        "series_id, item_id, ts_id or id when present).",
    ),
    future_cov: list[str] = typer.Option(
        [],
        "--future-cov",
        help="Known-future covariate column (repeatable): known up to the end of the forecast, e.g. a load forecast.",
    ),
    past_cov: list[str] = typer.Option(
        [], "--past-cov", help="Past-only covariate column (repeatable): observed with the target, unknown ahead."
    ),
    static: Path | None = typer.Option(
        None, "--static", help="CSV of static covariates: one row per series, its id column(s) and the covariates."
    ),
    static_cov: list[str] = typer.Option(
        [],
        "--static-cov",
        help="Static covariate (repeatable): a column of --static, or of the data holding one value per series.",
    ),
    no_calendar: bool = typer.Option(
        False, "--no-calendar", help="No calendar features (hour, weekday, ...) as known-future covariates."
    ),
    context_len: int | None = typer.Option(
        None, "--context-len", help="Input steps the model sees (default: chosen from the data's length and frequency)."
    ),
    horizon: int | None = typer.Option(
        None, "--horizon", help=f"Steps to forecast (default: {DEFAULTS.model.horizon}, model.horizon)."
    ),
    epochs: int | None = typer.Option(
        None,
        "--epochs",
        help=f"Maximum epochs (default: from the training windows, {AUTO_MIN_EPOCHS} to {AUTO_MAX_EPOCHS}, enough for "
        f"{AUTO_MIN_STEPS} optimiser steps, or {LONG_EPOCHS} where an epoch takes {LONG_EPOCH_STEPS:,} steps or more; "
        f"training stops earlier after {DEFAULTS.train.patience} epochs without a better validation loss, "
        "train.patience).",
    ),
    seed: int | None = typer.Option(
        None, "--seed", help=f"Random seed (default: {DEFAULTS.train.seed}; exactly reproducible on CPU)."
    ),
    freq: str | None = typer.Option(
        None, "--freq", help="State the frequency (h, D, B, 15min, ...) instead of inferring it (the default)."
    ),
    time_unit: str | None = typer.Option(
        None,
        "--time-unit",
        help="The unit of integer (Unix epoch) timestamps: s, ms, us or ns (default: read from their magnitude).",
    ),
    sort: bool = typer.Option(False, "--sort", help="Accept unsorted rows by sorting on the time column."),
    dayfirst: bool = typer.Option(False, "--dayfirst", help="Read ambiguous dates such as 01/02/2024 as day/month."),
    fill: str | None = typer.Option(
        None,
        "--fill",
        help="Fill NaN/inf cells from earlier rows: ffill, or zero (default: none, they stay unobserved and masked).",
    ),
    overrides: list[str] = typer.Option([], "--set", help="Override any config key: --set train.lr=3e-4 (repeatable)."),
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        help="Where to find a CSV given by bare file name (default: $TSFORMER_DATA_DIR, then the cache).",
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last checkpoint."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing run folder."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
    interval: list[float] = typer.Option(
        [], "--interval", help="Prediction interval level (repeatable; default 0.8 and 0.95), calibrated on validation."
    ),
    no_fallback: bool = typer.Option(
        False, "--no-fallback", help="Always forecast with the model, even where a naive forecaster did better."
    ),
    quantiles: str | None = typer.Option(
        None, "--quantiles", help="Also forecast these quantiles, e.g. 0.1,0.5,0.9 (pinball loss; default: none)."
    ),
    time_limit: str | None = typer.Option(
        None,
        "--time-limit",
        help="Seconds for the whole run, e.g. 900, 90s, 15m or 1h: within them a recipe search on validation tries a "
        "longer context, a weekly cycle, another loss and more members, and keeps the best (default: none, the one "
        "default recipe).",
    ),
    candidates: str | None = typer.Option(
        None,
        "--candidates",
        help="The candidates the fallback scores beside the model, e.g. seasonal_naive,seasonal_drift (default: "
        "those of repeat_last, seasonal_naive, drift, seasonal_drift, weekly_naive, weekly_drift the data have, the "
        "linear one where the model has a context skip, and ets and theta where their fits cost little; croston and "
        "tsb, for intermittent demand, only when named).",
    ),
) -> None:
    """Train a model on a CSV into a run folder.

    Example: tsformer train data/sample.csv --target OT --context-len 96 --horizon 24 --out runs/demo
    """
    from tsformer.config import config_from_flags, given_flags, seconds_of, with_data_path
    from tsformer.data.loader import read_series
    from tsformer.datasets import find_data_file

    flags = {
        "data": {
            "path": str(csv) if csv else None,
            "time_col": time_col,
            "id_cols": list(id_col) or None,
            "future_covs": list(future_cov) or None,
            "past_covs": list(past_cov) or None,
            "static_path": str(static) if static else None,
            "static_covs": list(static_cov) or None,
            "calendar": False if no_calendar else None,
            "freq": freq,
            "time_unit": time_unit,
            "fill": fill,
            "sort": sort or None,
            "dayfirst": dayfirst or None,
            "targets": list(target) or None,
        },
        "model": {"context_len": context_len, "horizon": horizon},
        "train": {
            "epochs": epochs,
            "seed": seed,
            "fallback": False if no_fallback else None,
            "intervals": list(interval) or None,
            "quantiles": quantiles,
            "candidates": candidates,
            "time_limit": None if time_limit is None else seconds_of(time_limit),
        },
    }
    if resume:  # the CSV (found as ever, in --data-dir too) may say where the run's data lie now
        given = [_flag_of(key) for values in given_flags(flags).values() for key in values if key != "path"]
        given += ["--config"] * (config is not None) + ["--set"] * bool(overrides)
        given += ["--data-dir"] * (data_dir is not None and csv is None) + ["--overwrite"] * overwrite
        if given:
            fail(
                f"--resume continues {out} with its saved config and data; drop {', '.join(given)} (keep --out, and "
                "the CSV where the data moved)"
            )
        cfg = Config() if csv is None else with_data_path(Config(), find_data_file(csv, data_dir))
    else:
        cfg = config_from_flags(config, flags, overrides)
    frame = None
    if not resume and cfg.data.path:  # read it before torch loads, so a bad CSV is a quick error
        from_config = None if csv else config  # a config's relative data path may lie beside it
        cfg = with_data_path(cfg, find_data_file(cfg.data.path, data_dir, config=from_config))
        frame = read_series(cfg.data.path, cfg.data)
    from tsformer.train import train as train_run

    predictor = train_run(
        cfg, out, resume=resume, overwrite=overwrite, show_progress=not quiet, source=frame, show_notes=True
    )
    if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 reports
        return
    typer.echo(f"{predictor.summary.trained_line(predictor.data.frame.n_ids > 1)}\nrun folder: {out}")
    for line in predictor.summary.lines:
        typer.echo(line)


@app.command()
@domain_errors
def evaluate(
    run: Path = typer.Argument(..., help="Run folder (or its model.pt)."),
    csv: Path | None = typer.Option(
        None, "--csv", help="Read the run's data from this CSV instead of the training CSV (its test split is scored)."
    ),
    split: str = typer.Option("test", "--split", help="test, or val to compare runs on validation (writes nothing)."),
) -> None:
    """Score the model on every test window, beside repeat-last and seasonal-naive baselines.

    Example: tsformer evaluate runs/demo
    """
    if _another_rank():
        return
    from tsformer.config import check_split

    check_split(split)
    _check_inputs(run, csv)
    from tsformer.evaluate import format_report
    from tsformer.runs import evaluate_run

    report = evaluate_run(run, csv, split=split)
    typer.echo(format_report(report))


@app.command()
@domain_errors
def predict(
    run: Path = typer.Argument(..., help="Run folder (or its model.pt)."),
    csv: Path = typer.Argument(..., help="CSV whose last rows are the history to forecast from."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the forecast CSV here (default: stdout)."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG of recent history and the forecast."),
    future: Path | None = typer.Option(
        None, "--future", help="CSV of the known-future covariates for the horizon after each series' last row."
    ),
    static: Path | None = typer.Option(
        None, "--static", help="CSV of static covariates, one row per series (needed for series not trained on)."
    ),
) -> None:
    """Forecast the next horizon steps after the CSV's last row, in original units.

    One row per future time step (and series, for a long file) at the series' own future timestamps: each
    target's forecast, its interval bounds (<target>_lower_80 ... _upper_95), its quantiles (<target>_q0.1 ...,
    when trained with --quantiles) and the forecaster that made it (forecaster, or <target>_forecaster). Notes
    on what was used go to stderr.

    Example: tsformer predict runs/demo data/sample.csv --out forecast.csv --plot forecast.png
    """
    if _another_rank():
        return
    _check_inputs(run, csv, future, static)
    from tsformer.runs import predict_run

    forecast = predict_run(run, csv, out=out, plot=plot, future=future, static=static)
    for note in forecast.notes:
        typer.echo(note, err=True)
    if out is None:
        sys.stdout.write(forecast.to_csv())
        sys.stdout.flush()
    else:
        typer.echo(f"wrote {len(forecast.frame)} rows x {forecast.frame.shape[1]} columns to {out}", err=True)


@app.command()
@domain_errors
def backtest(
    run: Path | None = typer.Argument(
        None, help="Run folder (or its model.pt); with --refit and --config, a folder for the folds."
    ),
    config: Path | None = typer.Option(
        None, "--config", "-c", help="With --refit: the config to train each fold (default: the run's own)."
    ),
    csv: Path | None = typer.Option(None, "--csv", help="Backtest on this CSV instead of the run's (or config's)."),
    windows: int | None = typer.Option(
        None,
        "--windows",
        min=1,
        help="How many origins (default: every one that fits after the run's validation; with --refit, 5).",
    ),
    step: int = typer.Option(0, "--step", min=0, help="Steps between origins; 0: the horizon.", show_default=False),
    start: str | None = typer.Option(
        None,
        "--start",
        help="The first forecast's first step: the first at or after this date (its origin is the step before; "
        "default: back from the end).",
    ),
    refit: bool = typer.Option(False, "--refit", help="Train a new model at each origin on the data before it."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write every forecast and its truth (long CSV)."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG of the error by origin."),
) -> None:
    """Forecast at rolling origins in the past and score each, beside the naive forecasters.

    Example: tsformer backtest runs/demo --windows 10 --step 24 --out backtest.csv
    """
    into_folds = refit and config is not None  # then RUN is a folder for the folds, not a trained run
    if not refit and _another_rank():
        return
    _check_inputs(None if into_folds or run is None else run, csv, config)
    from tsformer.backtest import format_summary
    from tsformer.runs import backtest_run, refit_backtest

    if refit:
        from tsformer.config import load_config, with_data_path
        from tsformer.datasets import find_data_file
        from tsformer.predictor import load_predictor

        if run is None:
            fail("--refit trains a model per origin: tsformer backtest RUN --refit (the run's config), or "
                 "tsformer backtest FOLDS_DIR --config CONFIG --refit")  # fmt: skip
        folds = run if config is not None else None  # with the run's own config, the folds stay in memory
        cfg, note = (load_config(config), "") if config is not None else load_predictor(run).refit_config()
        if csv is not None:
            cfg = with_data_path(cfg, csv)
        elif config is not None and cfg.data.path:  # a config's relative data path may lie beside it
            cfg = with_data_path(cfg, find_data_file(cfg.data.path, flag="", config=config))
        result = refit_backtest(cfg, folds, windows, step, start, out=out, plot=plot, note=note, report=_on_stderr)
    else:
        if run is None or config is not None:
            fail("give a trained run folder (tsformer backtest RUN), or --config with --refit")
        result = backtest_run(run, csv, windows, step, start, out=out, plot=plot)
    if _another_rank():  # every rank trained the folds; rank 0 reports them
        return
    for note in result.notes:
        typer.echo(note, err=True)
    typer.echo(format_summary(result))


@app.command()
@domain_errors
def check(
    run: Path = typer.Argument(..., help="Run folder (or its model.pt)."),
    csv: Path | None = typer.Option(None, "--csv", help="CSV for the data checks (default: the training CSV)."),
) -> None:
    """Prove the trained model and its data pipeline cannot see the future; exit 1 if any check fails.

    Example: tsformer check runs/demo
    """
    if _another_rank():
        return
    _check_inputs(run)
    from tsformer.runs import check_run

    results, note = check_run(run, csv, report=lambda result: typer.echo(result.line()))
    if note:
        typer.echo(note)
    failed = [r.name for r in results if not r.passed]
    if failed:
        typer.echo(f"Error: leakage check failed: {', '.join(failed)}", err=True)
        raise typer.Exit(1)
    skipped = sum(r.skipped for r in results)
    if not skipped:
        typer.echo(f"all {len(results)} checks passed")
        return
    typer.echo(f"{len(results) - skipped} checks passed, {skipped} skipped (not run, so they prove nothing; see SKIP)")


@app.command()
@domain_errors
def bench(
    configs: list[Path] = typer.Argument(..., help="Benchmark configs, e.g. configs/etth1_96.yaml."),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Folder holding the datasets (default: $TSFORMER_DATA_DIR, then the cache)."
    ),
    runs_dir: Path = typer.Option(Path("runs/bench"), "--runs-dir", help="Where the benchmark runs go."),
    results_dir: Path = typer.Option(Path("benchmarks/results"), "--results-dir", help="Where results are written."),
    reference: Path = typer.Option(
        Path("benchmarks/published_etth1.csv"),
        "--reference",
        help="CSV of published results for the table; when absent the table says so and omits them.",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP),
) -> None:
    """Train, evaluate and check each config; write <results>/<name>.json and regenerate <dataset>.md.

    Example: tsformer bench configs/etth1_96.yaml --data-dir ../shared/data
    """
    from tsformer.bench import checks_verdict, read_bench_configs, run_benchmark

    if not reference.is_file():
        typer.echo(f"note: {reference} not found; the table gets no published rows (see --reference)", err=True)
    for config in read_bench_configs(configs, data_dir, reference, results_dir):  # all checked before any trains
        r = run_benchmark(config, runs_dir, results_dir, data_dir, show_progress=not quiet, reference=reference)
        typer.echo(
            f"{r['name']}: test MSE {r['test']['model']['mse']:.4f} MAE {r['test']['model']['mae']:.4f} "
            f"(repeat-last {r['test']['repeat_last']['mse']:.4f}, "
            f"seasonal-naive {r['test']['seasonal_naive']['mse']:.4f}) "
            f"on {r['n_test_windows']} windows; trained {r['train_wall_seconds']:.0f} s, {r['epochs_run']} epochs, "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB; leakage checks {checks_verdict(r)}"
        )


datasets_app = typer.Typer(help="Known benchmark datasets: list them, fetch them into the cache.", no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")


@datasets_app.command("list")
@domain_errors
def datasets_list(
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Folder holding the datasets (default: $TSFORMER_DATA_DIR, then the cache)."
    ),
) -> None:
    """List the registered datasets and where each is found.

    Example: tsformer datasets list
    """
    from tsformer.datasets import REGISTRY, resolve_data_path

    for entry in REGISTRY.values():
        path = resolve_data_path(entry.file, data_dir)
        where = str(path) if path.is_file() else "not found (tsformer datasets fetch " + entry.name + ")"
        typer.echo(f"{entry.name:<10}{entry.file:<24}{where}\n          {entry.about}")


@datasets_app.command("fetch")
@domain_errors
def datasets_fetch(
    name: str = typer.Argument(..., help="Dataset name, e.g. etth1."),
    dest: Path | None = typer.Option(None, "--dest", help="Folder to download into (default: the cache)."),
) -> None:
    """Download a dataset into the cache and verify its checksum.

    Example: tsformer datasets fetch etth1
    """
    from tsformer.datasets import fetch

    typer.echo(f"{name}: {fetch(name, dest)}")


def _on_stderr(line: str) -> None:
    typer.echo(line, err=True)


def _another_rank() -> bool:
    """Under torchrun, a rank other than 0: a command that trains nothing runs on rank 0 alone (the others would
    print and write the same again), and a refit backtest's folds train on every rank and rank 0 reports them."""
    return os.environ.get("RANK", "0") != "0"


def _check_inputs(run: Path | None, *files: Path | None) -> None:
    """The run folder and the input files exist, checked before the command loads torch (a quick error)."""
    from tsformer.files import require_file
    from tsformer.runfolder import resolve_checkpoint

    if run is not None:
        resolve_checkpoint(run)
    for path in files:
        if path is not None:
            require_file(path)


def main() -> None:
    """Run the command, then leave without the interpreter's teardown.

    Tearing down the modules torch loads takes about as long again as a whole command's own work (a second on
    this machine, after `predict` has written everything); the exit handlers still run and the streams are
    flushed first, so nothing a command wrote or registered is lost.
    """
    leave(run_cli(sys.argv[1:]))


def run_cli(args: list[str]) -> int:
    """Run the command line `args` and give its exit status. A usage mistake (an unknown option or command, a
    missing argument, a value of the wrong kind) is one `Error:` line naming the help to read, exit 2, as every
    other bad input is; running with no arguments still prints the help."""
    command = typer.main.get_command(app)
    try:
        status = command.main(args, prog_name="tsformer", standalone_mode=False)
    except typer.TyperException as exc:  # typer's command-line errors: usage mistakes and their kin
        context = getattr(exc, "ctx", None)
        if context is None or not hasattr(exc, "format_message") or exc.format_message() == context.get_help():
            exc.show()  # no command line to point at, or the help that a command without arguments prints
        else:
            message = exc.format_message().rstrip(".")
            joint = " " if message.endswith("?") else "; "
            typer.echo(f"Error: {message}{joint}run '{context.command_path} --help' for the options", err=True)
        return getattr(exc, "exit_code", 2)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        return 1
    except SystemExit as exc:
        return exit_status(exc.code)
    return status if isinstance(status, int) else 0


def exit_status(code: object) -> int:
    """The process status sys.exit(code) gives: 0 for None, the number itself, 1 (message printed) otherwise."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def leave(code: int) -> None:
    """Flush, run the exit handlers, and end the process with `code` at once.

    Python's own exit would also join non-daemon threads; the commands start none that outlive them (the
    classical fits' pool closes inside its `with`).
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)

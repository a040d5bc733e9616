"""Training: leakage checks, then AdamW with early stopping, then the choices made on validation.

`train(cfg, out_dir)` returns the trained `Predictor` (fallback chosen, intervals calibrated, and with
train.final_fit the final model trained on every row). With a run folder it writes config.yaml
(resolved), model.pt (the best weights, then the calibrated predictor with its final model), last.pt
(latest epoch with optimizer and RNG state, for --resume), history.csv and loss.png. Without one it
trains in memory and writes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from tsformer import distributed, runfolder
from tsformer.calibration import choose_and_calibrate, fit_linear
from tsformer.checkpoint import save_predictor
from tsformer.config import MAX_SEED, Config, TrainConfig, save_config, with_data_path
from tsformer.data import Prepared, Source, WindowIndex, Windows, training_data
from tsformer.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    Interrupted,
    Terminated,
    TrainingError,
    TsformerError,
)
from tsformer.fallback import Decision
from tsformer.files import atomic_write_text
from tsformer.final import FinalFit, every_row, last_timestamps
from tsformer.intervals import CHUNK_WINDOWS
from tsformer.leakage import check_data, check_model, require_passed
from tsformer.metrics import ValidationScore, squared_error_sums, validation_score
from tsformer.model import Ensemble, ForecasterBase, build_forecaster, linear_candidate
from tsformer.model.precision import resolve_precision
from tsformer.predictor import Predictor, load_predictor, load_train_state
from tsformer.progress import Progress
from tsformer.results import TrainSummary
from tsformer.runfolder import CONFIG_FILE, LAST_FILE, MODEL_FILE
from tsformer.schedule import lr_at
from tsformer.search import Candidate, HeldOut, search, validation_targets

SEARCH_FILE = "search.csv"  # the recipe search's log (train.time_limit)
CALIBRATION_SAMPLE = 32  # validation windows timed to plan the search's room for the fallback and calibration
OVERRUN = 0.1  # a search past its train.time_limit by more than this share says so (the budget is held to 10 %)


@dataclass
class LoopState:
    """Everything that changes between epochs; saved in last.pt so a resumed run continues exactly."""

    epoch: int = 0
    step: int = 0
    best_val: float = math.inf  # the best validation score (`metrics.validation_score`)
    best_val_mse: float = math.inf  # the plain validation MSE of that epoch
    best_epoch: int = 0
    bad_epochs: int = 0
    train_seconds: float = 0.0
    finished: bool = False
    stopped_by: str = ""  # what ended training: "patience", "epochs" or "time"
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)


def resolve(cfg: Config) -> Config:
    """The config as saved in the run: a CSV path made absolute (`data.resolve_from_data` then chooses the rest)."""
    return with_data_path(cfg, Path(cfg.data.path).resolve()) if cfg.data.path else cfg


def train(
    cfg: Config,
    out_dir: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    show_progress: bool = True,
    source: Source | None = None,
    static: Source | None = None,
    show_notes: bool | None = None,
    spelled: Callable[[str], str] | None = None,
) -> Predictor:
    """Train on `source` (a path or DataFrame; default cfg.data.path) and return the Predictor; into the run
    folder `out_dir` (a new run, replacing one only with `overwrite`, or continuing one with `resume`), or
    in memory when it is None. `static`: a table of static covariates, one row per series. `show_notes`: print
    how the data was read and what was chosen (None: where a folder is written or progress shown), each note
    through `spelled` where given (the Python API names its options so; default: as the command line does).

    The folder is claimed first: a second writer is refused, a new run is staged beside it and moved
    into place when its first epoch is saved, so a failure leaves the old run, a resumable run, or none.
    """
    out_dir = None if out_dir is None else Path(out_dir)
    if resume and out_dir is None:
        raise ConfigError("resuming needs the run folder to continue (--out)")
    claim = out_dir is not None and distributed.is_main_process()
    searched = bool(cfg.train.time_limit)  # written once at the end: nothing to resume
    try:
        folder = runfolder.claim(out_dir, overwrite, resume, resumable=not searched) if claim else None
    except (TsformerError, OSError):
        distributed.could_not_start(cfg.train.device)  # under torchrun the other ranks wait for rank 0
        raise
    threads = torch.get_num_threads()  # train.num_threads holds for the run, not for the caller's process after it
    # the run seeds torch (each GPU's generator too); the caller's random streams go on after it as they were
    caller_streams = torch.random.fork_rng(
        devices=range(torch.cuda.device_count()) if torch.cuda.is_available() else []
    )
    try:
        with caller_streams, _terminate_as_interrupt():
            shown = (out_dir is not None or show_progress) if show_notes is None else show_notes
            say = _sayer(spelled or str) if shown else None
            predictor = _train(cfg, out_dir, folder, resume, show_progress, source, static, say)
        distributed.together()  # every rank got here
        return predictor
    except BaseException:
        distributed.abandon()  # after a failure, without waiting for ranks that may never arrive
        raise
    finally:
        torch.set_num_threads(threads)
        if folder is not None:
            folder.release()


def _device_notes(ctx: distributed.Dist, train_state: dict[str, Any] | None) -> list[str]:
    """What the user should hear about where the run trains: a GPU left idle, a resume on another number of
    processes (its windows are dealt out otherwise from there, so it cannot end where the run would have)."""
    notes = []
    if ctx.device.type == "cpu" and torch.cuda.is_available():
        notes.append("training on the CPU though torch finds a GPU: --set train.device=cuda (or auto) trains on it")
    before = None if train_state is None else train_state.get("world_size")
    if before is not None and before != ctx.world_size:
        notes.append(
            f"resumed on {ctx.world_size} process{'es' * (ctx.world_size > 1)} where it trained on {before}: it goes "
            "on from the saved epoch, but not exactly as an uninterrupted run would (resume on as many for that)"
        )
    return notes


def _sayer(spelled: Callable[[str], str]) -> Callable[[str], None]:
    """Print a note, as `spelled` words it, on stderr."""
    return lambda note: print(spelled(note), file=sys.stderr)


def _train(
    cfg: Config,
    out_dir: Path | None,
    folder: runfolder.RunFolder | None,
    resume: bool,
    show_progress: bool,
    source: Source | None,
    static: Source | None,
    say: Callable[[str], None] | None,
) -> Predictor:
    started = time.monotonic()
    if resume and (out_dir / SEARCH_FILE).exists():
        raise ConfigError(
            f"{out_dir} holds a recipe search (train.time_limit), written once when it finished: there is no epoch "
            "of it to resume; train again, with --overwrite"
        )
    previous, train_state = load_train_state(out_dir / LAST_FILE) if resume else (None, None)
    if previous is not None:
        previous = _reading_from(previous, cfg.data.path, source, out_dir)
    saved = load_predictor(out_dir / MODEL_FILE) if resume else None
    best_so_far = None if saved is None else saved.model.state_dict()  # before any seeding
    given = previous.config if previous else resolve(cfg)
    ctx = distributed.setup(given.train.device)
    distributed.started_on_main(ctx)
    given = _with_precision(given, ctx.device)
    if given.train.num_threads:
        torch.set_num_threads(given.train.num_threads)
    if given.train.time_limit and ctx.world_size > 1:
        raise ConfigError("train.time_limit searches on one process; run it without torchrun, or drop --time-limit")
    data = training_data(given, source, static)
    if not distributed.same_on_every_rank(str(data.fingerprint["sha256"]), ctx):  # else collectives pair wrongly
        raise DataError(
            f"the processes read different data (this is rank {ctx.rank} of {ctx.world_size}); under torchrun every "
            "process must read the same file: give each node the same copy (--data-dir, TSFORMER_DATA_DIR)"
        )
    if previous is not None:  # resumed: trained on its resolved config; as given, it was
        data = dataclasses.replace(data, given=previous.given)
    cfg = data.config  # every automatic setting chosen
    if ctx.is_main and say is not None:
        for note in (folder.notes if folder is not None else []) + list(data.notes) + _device_notes(ctx, train_state):
            say(note)
    if previous is not None:
        _require_same_data(previous, data, out_dir)
    if saved is not None and saved.summary is not None:  # finished: its fallback and final model are made
        finished = _reading_from(saved, previous.config.data.path, source, out_dir)  # where its data lie now
        if folder is not None:  # its history and config written again (a kill may have cut history.csv short)
            if say is not None:
                say(f"{out_dir} is a finished run: nothing to resume (--overwrite trains it again)")
            _write_history(folder, pd.DataFrame(train_state["loop"]["history"]))
            save_config(finished.config, folder.path / CONFIG_FILE)
            if finished.config.data.path != saved.config.data.path:  # the data moved: the checkpoints say where
                save_predictor(finished, folder.path / MODEL_FILE)
                save_predictor(previous, folder.path / LAST_FILE, train_state)
        return finished.replace(data=data)
    if cfg.train.time_limit:
        return _searched(given, data, ctx, started, out_dir, folder, show_progress)
    torch.manual_seed(cfg.train.seed)
    model = build_forecaster(cfg.model, data.layout, cfg.train.loss, cfg.train.quantiles)
    _run_leakage_checks(model, data, cfg)
    train_windows = data.split_windows("train", cfg.train.train_stride)
    val_windows = data.split_windows("val")
    model.to(ctx.device)
    optimizer = build_optimizer(model, cfg.train)
    state = _restore(train_state, previous, model, optimizer) if previous is not None else LoopState()
    runner = _Runner(cfg, data, model, optimizer, out_dir, folder, ctx, show_progress)
    runner.best_state = best_so_far  # a resumed run's best weights are its model.pt
    runner.saved_epoch = state.epoch
    try:  # a stop from the staged config on is told what was kept, as within the epochs
        if folder is not None and previous is None:
            save_config(cfg, folder.path / CONFIG_FILE)
        if not state.finished:
            runner.loop(state, train_windows, val_windows)
    except KeyboardInterrupt as stop:
        raise runner.interrupted(stop) from None
    model.load_state_dict(runner.best_state)
    model.eval()
    try:
        linear, cfg, linear_line = _linear_candidate(cfg, data, model)
        predictor, decision = choose_and_calibrate(
            _uncalibrated(cfg, data, model, linear), val_windows, data, runner.best_val_outputs
        )
    except KeyboardInterrupt as stop:
        kept = _kept_after_epochs(out_dir, "its epochs are saved")
        raise Interrupted(
            f"training stopped while the candidates were scored after the last epoch ({kept})", stop
        ) from None
    final = None
    if cfg.train.final_fit:
        final = _final_fit(cfg, data, ctx, state.best_epoch, out_dir, show_progress)
        final = _with_final_linear(final, predictor, data)
    summary = TrainSummary(
        state.best_epoch,
        state.best_val,
        state.epoch,
        state.train_seconds,
        sum(p.numel() for p in model.parameters()),
        len(train_windows),
        len(val_windows),
        linear_line + _lines(decision, predictor, final, state.best_epoch),
        _stopped(state, cfg),
        state.best_val_mse,
    )
    predictor = predictor.replace(summary=summary, data=data, final=final)
    if folder is not None:
        history = pd.DataFrame(state.history)  # from last.pt: whole, even after a kill before its last write
        _write_run(folder, predictor, history)
    return predictor


def _with_precision(cfg: Config, device: torch.device) -> Config:
    """cfg with model.precision chosen for `device` when it is auto (the saved config says which)."""
    precision = resolve_precision(cfg.model.precision, device)
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, precision=precision))


def _searched(
    given: Config,
    data: Prepared,
    ctx: distributed.Dist,
    started: float,
    out_dir: Path | None,
    folder: runfolder.RunFolder | None,
    show_progress: bool,
) -> Predictor:
    """train.time_limit: the recipe search (`tsformer.search`), the fallback and calibration of the members chosen,
    their final fits, all within the budget; the run is written once, at the end (no epoch of it to resume)."""
    budget_end = started + given.train.time_limit

    def held_out(candidate: Candidate, deadline: float) -> HeldOut:
        cfg, prepared = candidate.config, candidate.data
        torch.manual_seed(cfg.train.seed)
        model = build_forecaster(cfg.model, prepared.layout, cfg.train.loss, cfg.train.quantiles)
        _run_leakage_checks(model, prepared, cfg)  # on the CPU, where the checks' probes are made
        model.to(ctx.device)
        train_windows = prepared.split_windows("train", cfg.train.train_stride)
        shown = show_progress and ctx.is_main
        if shown:
            print(f"search: {candidate.name} (context {cfg.model.context_len}, loss {cfg.train.loss})", file=sys.stderr)
        runner = _Runner(cfg, prepared, model, build_optimizer(model, cfg.train), None, None, ctx, shown, deadline)
        state, val_windows = LoopState(), prepared.split_windows("val")
        runner.loop(state, train_windows, val_windows)
        model.load_state_dict(runner.best_state)
        model.eval()
        to_best = state.history[state.best_epoch - 1]["seconds"] if state.best_epoch else 0.0
        to_best *= _final_share(cfg, prepared)  # its final fit: those epochs over every row's windows
        steps_per_epoch = _steps_per_epoch(_epoch_size(len(train_windows), cfg), cfg.train.batch_size)
        steps_to_best = min(state.best_epoch * steps_per_epoch, state.step)  # the deadline may cut the last epoch
        return HeldOut(
            candidate, model, runner.best_val_outputs, len(train_windows), state.best_epoch, state.epoch,
            state.train_seconds, to_best, state.stopped_by, state.history, steps_to_best,
        )  # fmt: skip

    searched = search(given, data, budget_end, _calibration_seconds(data), held_out, _final_share(data.config, data))
    cfg, chosen = searched.config, dataclasses.replace(searched.data, given=data.given)
    members = [m.model for m in searched.members]
    model = members[0] if len(members) == 1 else Ensemble(members)
    val_windows = chosen.split_windows("val")
    linear, cfg, linear_line = _linear_candidate(cfg, chosen, model)
    predictor, decision = choose_and_calibrate(
        _uncalibrated(cfg, chosen, model, linear), val_windows, chosen, searched.outputs
    )
    final, cut_short = None, ()
    if cfg.train.final_fit:
        fits = [
            _final_fit(m.candidate.config, chosen, ctx, m.best_epoch, out_dir, show_progress, budget_end)
            for m in searched.members
        ]
        cut_short = _cut_short(fits, searched.members)
        if not cut_short:
            final = fits[0] if len(fits) == 1 else FinalFit(
                Ensemble([f.model for f in fits]), fits[0].until, sum(f.steps for f in fits), fits[0].n_windows,
                sum(f.seconds for f in fits),
            )  # fmt: skip
            final = _with_final_linear(final, predictor, chosen)
    first = searched.members[0]
    seconds = time.monotonic() - started
    summary = TrainSummary(
        first.best_epoch,
        searched.val_loss,
        first.epochs_run,
        seconds,
        sum(p.numel() for p in model.parameters()),
        first.n_train_windows,
        len(val_windows),
        (searched.line(), *_overrun(seconds, given.train.time_limit), *linear_line)
        + _lines(decision, predictor, final, first.best_epoch)
        + cut_short,
        f"each candidate stopped by patience or the search's deadline (search.csv); {len(members)} member"
        + "s" * (len(members) > 1),
        validation_targets(chosen).of(searched.outputs[0]).mse,
    )
    predictor = predictor.replace(summary=summary, data=chosen, final=final)
    if folder is not None:
        atomic_write_text(folder.path / SEARCH_FILE, searched.log.to_csv(index=False))
        history = pd.concat(
            [pd.DataFrame(m.history).assign(member=i) for i, m in enumerate(searched.members)], ignore_index=True
        )
        _write_run(folder, predictor, history)
        folder.publish()
    return predictor


def _kept_after_epochs(out_dir: Path | None, saved: str) -> str:
    """What a stop after the epochs keeps: nothing of a run in memory, else what is `saved` and how to resume."""
    return (
        "in memory: nothing kept"
        if out_dir is None
        else f"{saved}; resume with: tsformer train --resume --out {out_dir}"
    )


def _overrun(seconds: float, time_limit: float) -> tuple[str, ...]:
    """A line where the search took more than OVERRUN past its time limit: the least a run takes did not fit."""
    if seconds <= (1 + OVERRUN) * time_limit:
        return ()
    return (
        f"the run took {seconds:.1f} s, past train.time_limit ({time_limit:g} s) by more than {OVERRUN:.0%}: the "
        "least a run takes (an optimiser step, the candidates' scores, the final fit) did not fit in it; give a "
        "longer --time-limit",
    )


def _calibration_seconds(data: Prepared) -> float:
    """What the fallback and calibration after the search are expected to take: every forecaster of a sample of
    validation windows, timed and scaled to all of them (twice where they come in several blocks: the choice,
    then the cross-fitted forecast; one block's forecasts are kept)."""
    val_windows = data.split_windows("val")
    n = len(val_windows)
    if not n:
        return 0.0
    sample = val_windows.take(torch.arange(min(n, CALIBRATION_SAMPLE)))
    windows = sample.split(data.config.model.context_len)
    cfg = data.config
    probe = _uncalibrated(cfg, data, build_forecaster(cfg.model, data.layout, cfg.train.loss, cfg.train.quantiles))
    started = time.monotonic()
    probe.forecasters(windows, None, (torch.zeros_like(windows.target), None))
    passes = 1 if n <= CHUNK_WINDOWS else 2
    return passes * (time.monotonic() - started) * n / len(sample)


def _lines(decision: Decision, predictor: Predictor, final: FinalFit | None, best_epoch: int) -> tuple[str, ...]:
    """The summary's lines: the fallback's choice, the calibration's note, the final fit."""
    note = predictor.calibration.note()
    return (
        tuple(decision.lines())
        + ((note,) if note else ())
        + ((_final_line(final, best_epoch),) if final is not None else ())
    )


def _write_run(folder: runfolder.RunFolder, predictor: Predictor, history: pd.DataFrame) -> None:
    """The finished run's history, its plot, the config resolved to the end (train.linear_rows) and, last, model.pt,
    whose summary marks the run finished: a kill before it leaves a run that --resume finishes."""
    _write_history(folder, history)
    save_config(predictor.config, folder.path / CONFIG_FILE)
    save_predictor(predictor, folder.path / MODEL_FILE)


def _write_history(folder: runfolder.RunFolder, history: pd.DataFrame) -> None:
    """history.csv and its plot."""
    from tsformer.plots import plot_history

    atomic_write_text(folder.path / "history.csv", history.to_csv(index=False))
    plot_history(history[history["member"] == 0] if "member" in history else history, folder.path / "loss.png")


def _final_fit(
    cfg: Config,
    data: Prepared,
    ctx: distributed.Dist,
    best_epoch: int,
    out_dir: Path | None,
    show_progress: bool,
    deadline: float = math.inf,
) -> FinalFit:
    """The final model: from the held-out model's initial weights and recipe, its epochs up to its best over
    windows drawn from every row (an epoch as many windows as every row gives, under train.epoch_windows; the
    schedule of train.epochs such epochs, so each step's learning rate is where the held-out run's was at the
    same share of its epochs)."""
    all_rows = every_row(data)
    windows = all_rows.split_windows("train", cfg.train.train_stride)
    torch.manual_seed(cfg.train.seed)  # the held-out model's initial weights
    model = build_forecaster(cfg.model, data.layout, cfg.train.loss, cfg.train.quantiles).to(ctx.device)
    started = time.monotonic()
    runner = _Runner(cfg, all_rows, model, build_optimizer(model, cfg.train), None, None, ctx, show_progress, deadline)
    steps_per_epoch = _steps_per_epoch(_epoch_size(len(windows), cfg), cfg.train.batch_size)
    try:
        steps = runner.fit_steps(windows, best_epoch, steps_per_epoch, cfg.train.epochs * steps_per_epoch)
    except KeyboardInterrupt as stop:
        kept = _kept_after_epochs(out_dir, "the held-out model is saved")
        raise Interrupted(f"training stopped during the final fit on every row ({kept})", stop) from None
    model.eval()
    until = last_timestamps(data.frame.through_last_value(cfg.data.fill))  # blank rows at the end taught nothing
    return FinalFit(model, until, steps, len(windows), time.monotonic() - started)


def _cut_short(fits: list[FinalFit], members: list[HeldOut]) -> tuple[str, ...]:
    """Where the search's deadline stopped a member's final fit before the optimiser steps its held-out model took
    to its best: a line saying that predict keeps the held-out models (a final fit of a step or two is an untrained
    model), else nothing."""
    pairs = zip(fits, members, strict=True)
    short = [(fit.steps, member.steps_to_best) for fit, member in pairs if fit.steps < member.steps_to_best]
    if not short:
        return ()
    took, needed = short[0]
    held_out = "the held-out models" if len(members) > 1 else "the held-out model"
    return (
        f"final fit: stopped by the time budget after {took} optimiser steps, fewer than the {needed} its held-out "
        f"model took to its best, so predict forecasts with {held_out} (a longer --time-limit leaves room for the "
        "final fit)",
    )


def _final_share(cfg: Config, data: Prepared) -> float:
    """The final fit's epochs against the held-out run's: every row's windows an epoch over the training rows'."""
    stride = cfg.train.train_stride
    every, held_out = every_row(data).split_windows("train", stride), data.split_windows("train", stride)
    return _epoch_size(len(every), cfg) / max(1, _epoch_size(len(held_out), cfg))


def _epoch_size(n_windows: int, cfg: Config) -> int:
    """Windows an epoch trains on: train.epoch_windows of them when set and fewer than all."""
    budget = cfg.train.epoch_windows
    return min(n_windows, budget) if budget else n_windows


def _steps_per_epoch(n_windows: int, batch_size: int) -> int:
    """Optimiser steps in an epoch over `n_windows` windows in batches of train.batch_size, on any number of
    ranks (each takes its share of every batch)."""
    return math.ceil(n_windows / batch_size)


def _final_line(final: FinalFit, best_epoch: int) -> str:
    linear = " and the linear candidate fitted again on them" if final.linear is not None else ""
    return (
        f"final model: the held-out run's {best_epoch} epochs (to its best) in {final.steps} optimiser steps on "
        f"{final.n_windows} windows from every row, validation and test included,{linear} in {final.seconds:.0f} s; "
        "predict forecasts with it, evaluate, backtest and check score the held-out model (train.final_fit=false "
        "skips it)"
    )


def _with_final_linear(final: FinalFit, predictor: Predictor, data: Prepared) -> FinalFit:
    """`final` with the predictor's linear candidate fitted again on windows from every row (none without one)."""
    if predictor.linear is None:
        return final
    started = time.monotonic()
    train = predictor.config.train
    windows = every_row(data).split_windows("train", train.train_stride)
    linear = linear_candidate.fit(final.model, windows, train.seed, train.linear_rows, train.linear_ridge)
    return dataclasses.replace(final, linear=linear, seconds=final.seconds + time.monotonic() - started)


def _linear_candidate(
    cfg: Config, data: Prepared, model: ForecasterBase
) -> tuple[ForecasterBase | None, Config, tuple[str, ...]]:
    """The linear candidate of `model` (`calibration.fit_linear`) or None, `cfg` with train.linear_rows and
    linear_ridge resolved, and a summary line on it."""
    fitted = fit_linear(cfg, data, model)
    if fitted is None:
        return None, cfg, ()
    read = linear_candidate.ROWS_READ
    line = f"linear candidate: the model's context skip alone, fitted by least squares on {read[fitted.rows]} of the "
    line += f"training windows with ridge {fitted.ridge:g}"
    notes = []
    if fitted.ridge_scores:
        notes.append("chosen on each series' last fifth of them")
    elif cfg.train.linear_ridge is None:
        notes.append("too few training windows to choose one on")
    if fitted.scores:
        other = next(rows for rows in fitted.scores if rows != fitted.rows)
        notes.append(
            f"validation score {fitted.scores[fitted.rows]:.4g} against {fitted.scores[other]:.4g} on {read[other]}"
        )
    line += f" ({'; '.join(notes)})" if notes else ""
    line += ", weighed beside the model per series and column (--candidates without linear leaves it out)"
    chosen = dataclasses.replace(cfg.train, linear_rows=fitted.rows, linear_ridge=fitted.ridge)
    return fitted.model, dataclasses.replace(cfg, train=chosen), (line,)


def _stopped(state: LoopState, cfg: Config) -> str:
    """What ended training, in words: convergence (patience), or a limit while validation may still improve."""
    tc = cfg.train
    if state.stopped_by == "patience":
        return f"stopped when validation stopped improving ({tc.patience} epochs without a better loss, train.patience)"
    if state.stopped_by == "time" and tc.time_limit:
        return f"stopped at the search's deadline (train.time_limit={tc.time_limit:g} s), not by convergence"
    if state.stopped_by == "time":
        return f"stopped at the time limit (train.max_minutes={tc.max_minutes:g}), not by convergence"
    limit = f"stopped at the epoch limit ({tc.epochs}, --epochs)"
    return (
        f"{limit} while validation was still improving: more epochs may help"
        if state.best_epoch == state.epoch
        else limit
    )


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's stop) ends training like Ctrl-C, cleanly, keeping what was saved; the exit code is
    still SIGTERM's (143)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _reading_from(previous: Predictor, moved_to: str, source: Source | None, out_dir: Path) -> Predictor:
    """The resumed run `previous`, its data read at `moved_to` where given (their fingerprint still says whether
    they are the data it started on), else where it read them, which must still be there."""
    if moved_to:
        moved_to = str(Path(moved_to).resolve())  # as `resolve` saves it
        given = None if previous.given is None else with_data_path(previous.given, moved_to)
        return previous.replace(config=with_data_path(previous.config, moved_to), given=given)
    path = previous.config.data.path
    if source is None and path and not Path(path).exists():
        raise DataError(
            f"run {out_dir} trained on {path}, which is not there now; if the file moved, give its new path: "
            f"tsformer train --resume --out {out_dir} NEW_PATH"
        )
    return previous


def _require_same_data(previous: Predictor, data: Prepared, out_dir: Path) -> None:
    """A resumed run must see the data it started on, or its splits and scaler would silently differ."""
    was, now = previous.data_fingerprint, data.fingerprint
    if was != now:
        changes = [f"{key} {was.get(key)} -> {now[key]}" for key in now if was.get(key) != now[key]]
        raise DataError(
            f"{previous.config.data.path or 'the data'} changed since run {out_dir} started ({'; '.join(changes)}), "
            f"so it cannot be resumed exactly; start a new run instead (tsformer train ... --out NEW_FOLDER, or "
            f"--overwrite to replace {out_dir})"
        )


def _run_leakage_checks(model: ForecasterBase, data: Prepared, cfg: Config) -> None:
    require_passed(check_model(model) + check_data(data, cfg))


def build_optimizer(model: ForecasterBase, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW, fused (one kernel for every parameter: 10 % of the CPU step was the per-tensor update); no weight
    decay on biases, normalisation gains and the learned cycle (a level, not a map)."""
    decay = [p for name, p in model.named_parameters() if p.dim() >= 2 and not name.endswith("cycle.values")]
    chosen = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in chosen]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, fused=True)


def _restore(
    train_state: dict[str, Any], previous: Predictor, model: ForecasterBase, optimizer: torch.optim.Optimizer
) -> LoopState:
    """Weights, optimizer, RNG and loop state of last.pt; a state that does not fit is a CheckpointError."""
    try:
        model.load_state_dict(previous.model.state_dict())
        optimizer.load_state_dict(train_state["optimizer"])
        torch.set_rng_state(train_state["rng"])
        if train_state.get("cuda_rng") and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(train_state["cuda_rng"])
        return LoopState(**train_state["loop"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"the training state in {LAST_FILE} does not fit this run ({str(exc).splitlines()[0][:160]}); "
            "start a new run"
        ) from None


def validation_of(
    model: ForecasterBase, val_windows: WindowIndex, context_len: int
) -> tuple[ValidationScore, tuple[torch.Tensor, torch.Tensor | None] | None]:
    """The score (`metrics.validation_score`) of the last token's forecast (the real forecast) over every observed
    validation target, and the forecasts (N, H, C) with their quantiles (N, H, C, Q) or None (None: no window)."""
    windows = val_windows.split(context_len)
    targets, target_observed = windows.target, windows.target_observed
    start, sums, counts, points, quantiles = 0, [], [], [], []
    batches = model.output_batches(windows.context, windows.context_observed, windows.covariates)
    for forecast, quantile in batches:  # (b, H, C) and (b, H, C, Q) or None each, in order
        end = start + len(forecast)
        observed = None if target_observed is None else target_observed[start:end]
        squared, steps = squared_error_sums(forecast.cpu(), targets[start:end], observed)  # (b, C) each
        sums.append(squared)
        counts.append(steps)
        start = end
        points.append(forecast.cpu())
        quantiles.append(None if quantile is None else quantile.cpu())
    if not points:
        return ValidationScore(0.0, 0.0), None
    outputs = (torch.cat(points), None if quantiles[0] is None else torch.cat(quantiles))
    return validation_score(torch.cat(sums), torch.cat(counts), val_windows.series(), val_windows.n_series), outputs


class _Runner:
    """The epoch loop: one instance per call of `train`."""

    def __init__(
        self,
        cfg: Config,
        data: Prepared,
        model: ForecasterBase,
        optimizer: torch.optim.Optimizer,
        out_dir: Path | None,
        folder: runfolder.RunFolder | None,
        ctx: distributed.Dist,
        show_progress: bool,
        deadline: float = math.inf,
    ):
        self.cfg, self.data, self.model, self.optimizer = cfg, data, model, optimizer
        self.deadline = deadline  # time.monotonic() at which training stops (the search's budget), as max_minutes
        self.out_dir, self.folder, self.ctx = out_dir, folder, ctx  # folder: None on ranks that do not write
        self.wrapped = distributed.wrap(model, ctx)
        self.show_progress = show_progress and ctx.is_main
        self.saved_epoch = 0  # the epoch in last.pt, for messages
        self.best_state: dict[str, torch.Tensor] | None = None  # the best epoch's weights, kept in memory
        # the model's validation forecasts (N, H, C) and quantiles or None: of the last epoch, of the best
        self.epoch_val_outputs: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self.best_val_outputs: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def loop(self, state: LoopState, train_windows: WindowIndex, val_windows: WindowIndex) -> None:
        tc = self.cfg.train
        n_windows = len(train_windows)
        steps_per_epoch = _steps_per_epoch(_epoch_size(n_windows, self.cfg), tc.batch_size)
        if state.step != state.epoch * steps_per_epoch and not state.finished:
            raise CheckpointError(
                f"{self.out_dir} took {state.step} optimiser steps to the end of epoch {state.epoch}, where this "
                f"version takes {steps_per_epoch} an epoch (it batches windows differently), so it cannot be resumed "
                "exactly; train it again with --overwrite"
            )
        total_steps = tc.epochs * steps_per_epoch
        then = " (then the final fit)" if tc.final_fit else ""  # about as long again as the epochs to the best
        progress = Progress(tc.epochs, steps_per_epoch, enabled=self.show_progress, then=then)
        started = time.monotonic() - state.train_seconds
        self.saved_epoch = state.epoch
        try:
            while state.epoch < tc.epochs and not state.finished:
                train_loss, lr = self._train_epoch(state, train_windows, total_steps, started, progress)
                self._end_epoch(state, train_loss, lr, self._val_loss(val_windows), started, progress)
        except KeyboardInterrupt as stop:
            raise self.interrupted(stop) from None

    def interrupted(self, stop: KeyboardInterrupt) -> Interrupted:
        """The error a stop during the epochs ends the run with: what was kept, and how to resume."""
        if not self.saved_epoch or self.out_dir is None:
            return Interrupted(f"training stopped during epoch {self.saved_epoch + 1}; {self._kept()}", stop)
        return Interrupted(
            f"training stopped during epoch {self.saved_epoch + 1}; {self._kept()}. "
            f"Resume with: tsformer train --resume --out {self.out_dir}",
            stop,
        )

    def fit_steps(self, windows: WindowIndex, epochs: int, steps_per_epoch: int, total_steps: int) -> int:
        """`epochs` epochs of `steps_per_epoch` steps each, no validation, on the schedule of `total_steps` (the
        final fit: the held-out run's epochs, its windows drawn from every row); returns the steps taken (fewer
        when train.max_minutes ends it)."""
        progress = Progress(epochs, steps_per_epoch, enabled=self.show_progress, label="final fit: ")
        state, started = LoopState(), time.monotonic()
        while state.epoch < epochs and not state.finished:
            train_loss, lr = self._train_epoch(state, windows, total_steps, started, progress)
            state.epoch += 1
            progress.epoch(state.epoch, train_loss, None, lr)
        return state.step

    def _train_epoch(
        self,
        state: LoopState,
        train_windows: WindowIndex,
        total_steps: int,
        started: float,
        progress: Progress,
    ) -> tuple[float, float]:
        """One pass over this rank's share of the windows, in an order fixed by (seed, epoch).

        train.batch_size is a step's batch over every rank: under torchrun each step's batch of the one order
        is dealt out among the ranks (each takes every world_size-th window of it), so the steps an epoch, the
        schedule and the automatic settings that count them are those of one process, and each rank's loss is
        weighed by its share, so the all-reduced gradient is the batch's. Where the last batch would leave a
        rank without a window, the order is padded by wrapping around (as torch's DistributedSampler does),
        so every rank takes every step and their all-reduces pair up; each rank's dropout is seeded from
        (seed, epoch, rank), so a resumed run repeats it exactly.
        """
        tc = self.cfg.train
        epoch = state.epoch + 1
        epoch_seed = tc.seed * 1_000_003 + epoch
        generator = torch.Generator().manual_seed(epoch_seed)
        order = train_windows.epoch_draw(_epoch_size(len(train_windows), self.cfg), generator)
        world, rank = self.ctx.world_size, self.ctx.rank
        if world > 1:
            last = len(order) % tc.batch_size  # the last batch's windows (0: a whole one)
            order = torch.cat([order, order[: world - last if 0 < last < world else 0]])
            torch.manual_seed((epoch_seed * 1_009 + rank) % MAX_SEED)
        self.model.train()
        losses, lr = [], tc.learning_rate
        for i, start in enumerate(range(0, len(order), tc.batch_size), start=1):
            shared = order[start : start + tc.batch_size]  # this step's batch, over every rank
            batch = train_windows.take(shared[rank::world], self.ctx.device)
            lr = lr_at(state.step, total_steps, tc.learning_rate, tc.warmup_frac, tc.min_lr_ratio)
            losses.append(self._step(batch, lr, epoch, i, share=len(batch) * world / len(shared)))
            state.step += 1
            progress.step(epoch, i, losses[-1])
            now = time.monotonic()
            out_of_time = now > self.deadline or bool(tc.max_minutes and now - started > 60 * tc.max_minutes)
            if distributed.any_rank(out_of_time, self.ctx):  # every rank stops at the same step, or none does
                state.finished, state.stopped_by = True, "time"
                break
        return distributed.mean_over_ranks(sum(losses) / len(losses), self.ctx), lr  # the epoch's loss, every rank's

    def _end_epoch(
        self, state: LoopState, train_loss: float, lr: float, val: ValidationScore, started: float, progress: Progress
    ) -> None:
        """Early-stopping bookkeeping (on the validation score), history, checkpoints."""
        epoch = state.epoch + 1
        val_loss = val.score
        if not math.isfinite(val_loss):
            raise TrainingError(
                f"the validation loss became {val_loss} at epoch {epoch}; {self._kept()}. "
                "Lower the learning rate (--set train.lr=...) or check the data"
            )
        state.epoch = epoch
        state.train_seconds = time.monotonic() - started
        improved = val_loss < state.best_val
        if improved:
            state.best_val, state.best_val_mse, state.best_epoch, state.bad_epochs = val_loss, val.mse, epoch, 0
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.best_val_outputs = self.epoch_val_outputs
        else:
            state.bad_epochs += 1
        if not state.finished and state.bad_epochs >= self.cfg.train.patience:
            state.finished, state.stopped_by = True, "patience"
        elif not state.finished and epoch == self.cfg.train.epochs:
            state.finished, state.stopped_by = True, "epochs"
        state.history.append(
            {
                "epoch": epoch,
                "train_loss": train_loss,
                "val_loss": val_loss,
                "val_mse": val.mse,
                "lr": lr,
                "seconds": state.train_seconds,
            }
        )
        self._save(state, improved)
        progress.epoch(epoch, train_loss, val_loss, lr, improved)

    def _kept(self) -> str:
        if self.out_dir is None:
            return "it trained in memory, so nothing was kept"
        if not self.saved_epoch:
            return f"no epoch was saved and {self.out_dir} was left as it was, so start again"
        return f"epoch {self.saved_epoch} is saved in {self.out_dir / LAST_FILE}"

    def _step(self, batch: Windows, lr: float, epoch: int, step: int, share: float = 1.0) -> float:
        """One optimiser step on a batch of windows (B, L + H, C) and their observed mask (or None); `share`: the
        rank's windows over the step's mean share (1 on one process), which its loss is weighed by."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        windows = batch.split(self.cfg.model.context_len)  # the last token's target
        target, target_observed = windows.target, windows.target_observed
        if self.cfg.train.all_positions:
            target = self.model.token_targets(batch.target)  # (B, T, H, C): after every token
            if batch.observed is not None:
                target_observed = self.model.token_targets(batch.observed)
        _, loss = self.wrapped(
            windows.context,
            windows.context_observed,
            target=target,
            target_observed=target_observed,
            covariates=windows.covariates,
        )
        if not torch.isfinite(loss):
            raise TrainingError(
                f"the training loss became {loss.item()} at epoch {epoch}, step {step}; {self._kept()}. "
                "Lower the learning rate (--set train.lr=...) or check the data"
            )
        self.optimizer.zero_grad(set_to_none=True)
        (loss if share == 1.0 else loss * share).backward()
        if self.cfg.train.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        self.optimizer.step()
        return loss.item()

    def _val_loss(self, val_windows: WindowIndex) -> ValidationScore:
        """The epoch's validation score (rank 0's on every rank, so all stop alike); its forecasts kept for the
        fallback and the calibration when this epoch is the best (they would recompute them)."""
        score, self.epoch_val_outputs = validation_of(self.model, val_windows, self.cfg.model.context_len)
        shared, mse = distributed.from_main((score.score, score.mse), self.ctx)
        return dataclasses.replace(score, score=shared, mse=mse)

    def _save(self, state: LoopState, improved: bool) -> None:
        """Best weights, the resumable state and the history; the first save puts the run in place."""
        if self.folder is None:  # a rank under torchrun other than 0, which saves the epoch, or a run in memory
            self.saved_epoch = state.epoch if self.out_dir is not None else 0
            return
        current = _uncalibrated(self.cfg, self.data, self.model)
        if improved:
            save_predictor(current, self.folder.path / MODEL_FILE)
        train_state = {
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if self.ctx.device.type == "cuda" else [],  # dropout's draws
            "world_size": self.ctx.world_size,
            "loop": dataclasses.asdict(state),
        }
        save_predictor(current, self.folder.path / LAST_FILE, train_state)
        atomic_write_text(self.folder.path / "history.csv", pd.DataFrame(state.history).to_csv(index=False))
        self.folder.publish()
        self.saved_epoch = state.epoch


def _uncalibrated(
    cfg: Config, data: Prepared, model: ForecasterBase, linear: ForecasterBase | None = None
) -> Predictor:
    """An uncalibrated Predictor of `model` on `data` (no fallback, no intervals yet), with its linear candidate
    (`_linear_candidate`) or none."""
    frame = data.frame
    return Predictor(
        config=cfg,
        layout=data.layout,
        time_col=frame.time_col,
        freq=frame.freq,
        id_cols=frame.id_cols,
        series=frame.keys,
        scaler=data.scaler,
        borders=data.borders,
        model=model,
        linear=linear,
        static=None if frame.static is None else frame.static[list(data.layout.static)].reset_index(drop=True),
        static_scale=data.static_scale,
        static_from=frame.static_from,
        data_fingerprint=data.fingerprint,
        given=data.given,
    )

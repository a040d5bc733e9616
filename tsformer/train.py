"""`train(cfg, out_dir)`: leakage checks, then AdamW with early stopping into a run folder.

The run folder holds config.yaml (resolved), model.pt (best weights), last.pt (latest epoch
with optimizer and RNG state, for --resume), history.csv and loss.png; with
train.interval_calibration=refit, calibration/ holds the calibration model's run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from tsformer import distributed, runfolder
from tsformer.checkpoint import CALIBRATION_DIR, LAST_FILE, MODEL_FILE, Checkpoint, load_checkpoint, save_checkpoint
from tsformer.config import MAX_SEED, Config, save_config, with_data_path
from tsformer.data import Prepared, Scaler, WindowIndex, Windows, prepare, split_borders
from tsformer.errors import CheckpointError, ConfigError, DataError, Interrupted, TrainingError
from tsformer.fallback import Decision, all_forecasts, apply, decide, season_for, shipped_quantiles
from tsformer.files import atomic_write_text
from tsformer.intervals import calibrate, calibrate_quantiles, calibration_scale, quantile_pairs
from tsformer.leakage import check_data, check_model, require_passed
from tsformer.model import ForecasterBase, build_forecaster
from tsformer.progress import Progress
from tsformer.schedule import lr_at


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    best_epoch: int
    best_val_loss: float
    epochs_run: int
    train_seconds: float
    n_parameters: int
    n_train_windows: int
    n_val_windows: int
    fallback_lines: tuple[str, ...] = ()  # per column: model vs naive on validation, and what is used


@dataclass
class LoopState:
    """Everything that changes between epochs; saved in last.pt so a resumed run continues exactly."""

    epoch: int = 0
    step: int = 0
    best_val: float = math.inf
    best_epoch: int = 0
    bad_epochs: int = 0
    train_seconds: float = 0.0
    finished: bool = False
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)


def resolve(cfg: Config) -> Config:
    """The config as saved in the run: the CSV path made absolute (`prepare` then chooses automatic sizes)."""
    if not cfg.data.path:
        raise ConfigError("no CSV given; pass a CSV path or set data.path in the config")
    return with_data_path(cfg, Path(cfg.data.path).resolve())


def train(
    cfg: Config, out_dir: str | Path, resume: bool = False, overwrite: bool = False, show_progress: bool = True
) -> TrainResult:
    """Train into `out_dir` (a new run, replacing one only with `overwrite`, or continuing one with `resume`).

    The folder is claimed first: a second writer is refused, a new run is staged beside it and moved
    into place when its first epoch is saved, so a failure leaves the old run, a resumable run, or none.
    """
    out_dir = Path(out_dir)
    folder = runfolder.claim(out_dir, overwrite, resume) if distributed.is_main_process() else None
    try:
        with _terminate_as_interrupt():
            result = _train(cfg, out_dir, folder, resume, show_progress)
        distributed.teardown()  # every rank got here: leave the process group together
        return result
    finally:
        if folder is not None:
            folder.release()
        distributed.abandon()  # after a failure, without waiting for ranks that may never arrive


def _train(
    cfg: Config, out_dir: Path, folder: runfolder.RunFolder | None, resume: bool, show_progress: bool
) -> TrainResult:
    previous = load_checkpoint(out_dir / LAST_FILE) if resume else None
    cfg = previous.config if previous else resolve(cfg)
    ctx = distributed.setup(cfg.train.device)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    data = prepare(cfg)
    cfg = data.config  # automatic sizes chosen
    refit = cfg.train.interval_calibration == "refit" and bool(cfg.train.intervals)
    calibration_cfg = calibration_config(data) if refit else None  # refused now, not after training
    if folder is not None:
        for note in folder.notes + list(data.notes):
            print(note, file=sys.stderr)
    if previous is not None:
        _require_same_data(previous, data, out_dir)
    torch.manual_seed(cfg.train.seed)
    layout = data.layout
    model = build_forecaster(
        cfg.model,
        len(layout.targets),
        cfg.train.loss,
        len(layout.past),
        len(layout.known_future),
        cfg.train.quantiles,
    )
    _run_leakage_checks(model, data, cfg)
    train_windows = data.split_windows("train", cfg.train.train_stride)
    val_windows = data.split_windows("val")
    model.to(ctx.device)
    optimizer = _optimizer(model, cfg)
    state = _restore(previous, model, optimizer) if previous is not None else LoopState()
    if folder is not None and previous is None:
        save_config(cfg, folder.path / "config.yaml")
    runner = _Runner(cfg, data, model, optimizer, out_dir, folder, ctx, show_progress)
    if not state.finished:
        runner.loop(state, train_windows, val_windows)
    calibration_model = None
    if calibration_cfg is not None:
        main = folder is not None
        calibration_model = _train_calibration_model(calibration_cfg, out_dir / CALIBRATION_DIR, main, show_progress)
    decision = None
    if folder is not None:
        from tsformer.plots import plot_history

        plot_history(pd.DataFrame(state.history), folder.path / "loss.png")
        decision = _calibrate(folder.path / MODEL_FILE, val_windows, data, calibration_model)
    return TrainResult(
        run_dir=out_dir,
        best_epoch=state.best_epoch,
        best_val_loss=state.best_val,
        epochs_run=state.epoch,
        train_seconds=state.train_seconds,
        n_parameters=sum(p.numel() for p in model.parameters()),
        n_train_windows=len(train_windows),
        n_val_windows=len(val_windows),
        fallback_lines=tuple(decision.lines()) if decision else (),
    )


def _calibrate(model_file: Path, val_windows: WindowIndex, data: Prepared, refit: Path | None) -> Decision:
    """On the validation windows: score the best model and the naive forecasters, choose per column, and
    calibrate conformal intervals around the chosen forecast (or, with `refit`, the calibration model's
    forecast of the same windows); store both in model.pt."""
    cfg, bounds = data.config, data.frame.bounds
    best = load_checkpoint(model_file)
    windows = val_windows.split(cfg.model.context_len)
    model = best.build_model()
    season = season_for(best.freq, cfg.model.context_len)
    forecasts = all_forecasts(model, windows, season)
    ids = val_windows.series(bounds)  # (N,) each window's series
    decision = decide(
        forecasts, windows.target, windows.target_observed, best.columns, cfg.train.fallback, ids, len(bounds) - 1
    )
    levels = cfg.train.intervals
    if refit is None:  # the forecasts (N, H, C) and quantiles (N, H, C, Q) whose errors calibrate
        shipped = apply(decision.choice, forecasts, ids)
        quantiles = shipped_quantiles(model, windows, forecasts, decision.choice, ids)
    else:
        shipped, quantiles = _refit_forecasts(refit, data, val_windows)
    scale, typical = calibration_scale(cfg.train.interval_scale, windows.context, windows.context_observed, season)
    widths = calibrate(shipped, windows.target, windows.target_observed, levels, scale)
    adjust = None
    if quantiles is not None:
        pairs = quantile_pairs(cfg.train.quantiles)
        adjust = calibrate_quantiles(quantiles, windows.target, windows.target_observed, pairs, model.quantile_levels)
    calibrated = dataclasses.replace(
        best,
        fallback=decision.choice,
        interval_levels=levels,
        interval_widths=widths,
        interval_scale_typical=typical if levels else None,
        quantile_adjust=adjust,
    )
    save_checkpoint(calibrated, model_file)
    return decision


def calibration_config(data: Prepared) -> Config:
    """The calibration model's config (train.interval_calibration=refit): each series' borders moved back by
    its validation and test lengths, so that model forecasts the run's validation windows from as far after
    its training data as predict forecasts from after the run's. It needs those lengths, and the rows after
    the test split, to be the same in every series with a validation stretch (the long-format default, or
    one series)."""
    borders, lengths = data.borders, data.frame.lengths
    has_val = borders.val_end - borders.train_end >= data.config.model.horizon  # series with a validation window
    val_len, test_len = borders.val_end - borders.train_end, borders.test_end - borders.val_end
    after = lengths - borders.test_end  # rows after the test split
    counts = {int(v) for v in val_len[has_val]}, {int(t) for t in test_len[has_val]}, {int(a) for a in after[has_val]}
    if any(len(values) != 1 for values in counts):
        raise ConfigError(
            "train.interval_calibration=refit needs the same validation and test lengths in every series (the "
            "long-format default split, or one series); use train.interval_calibration=validation or fix "
            "data.split_borders"
        )
    (v,), (t,), (a,) = counts
    gap = v + t  # how far predict forecasts after the run's training data
    ends = (-(a + gap + gap), -(a + gap + t), -(a + t))  # train', val', and the run's validation end, from the end
    train = dataclasses.replace(data.config.train, interval_calibration="validation")
    cfg = dataclasses.replace(data.config, data=dataclasses.replace(data.config.data, split_borders=ends), train=train)
    model = cfg.model
    try:  # the calibration model's split must have room, checked before the run trains
        split_borders(cfg.data, data.frame, model.context_len, model.horizon, min_history=data.min_history("train"))
    except DataError as exc:
        raise ConfigError(
            f"train.interval_calibration=refit moves the split back by {gap} steps, and then: {exc}; "
            "use train.interval_calibration=validation, or give the series more rows"
        ) from None
    return cfg


def _train_calibration_model(cfg: Config, out_dir: Path, main: bool, show_progress: bool) -> Path:
    """Train the calibration model (`cfg`: `calibration_config`) into `out_dir` (on every rank, as the run was)
    and return its model.pt."""
    if main:
        train_end, val_end, run_val_end = cfg.data.split_borders
        gap = run_val_end - val_end  # the run's validation and test lengths
        print(
            f"intervals: a calibration model trains on each series' steps before its last {-train_end} "
            f"(validating on the {val_end - train_end} after them) and forecasts the run's validation windows "
            f"{gap} steps after its training data, as a forecast after the run's test split is after the run's",
            file=sys.stderr,
        )
    folder = runfolder.claim(out_dir, overwrite=True, resume=False) if main else None
    try:
        _train(cfg, out_dir, folder, False, show_progress)
    except Interrupted:
        raise Interrupted(
            "training stopped while the calibration model trained; the run's own model is saved. "
            f"Resume with: tsformer train --resume --out {out_dir.parent}"
        ) from None
    except TrainingError as exc:
        raise TrainingError(f"the calibration model (train.interval_calibration=refit) failed: {exc}") from None
    finally:
        if folder is not None:
            folder.release()
    return out_dir / MODEL_FILE


def _refit_forecasts(
    model_file: Path, data: Prepared, val_windows: WindowIndex
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The calibration model's shipped forecast (N, H, C) and quantiles (N, H, C, Q) or None (its own fallback
    applied) of the run's validation windows, in the run's scaled units. It reads the same rows in its own
    scaling."""
    from tsformer.evaluate import load_run_data

    ckpt = load_checkpoint(model_file)
    own = load_run_data(ckpt)
    if not np.array_equal(own.frame.bounds, data.frame.bounds):
        raise TrainingError("the calibration model read different rows from the run's CSV; train the run again")
    windows = dataclasses.replace(val_windows, source=own.scaled, source_observed=own.observed)
    ids = windows.series(data.frame.bounds)  # (N,)
    split = windows.split(ckpt.config.model.context_len)
    model = ckpt.build_model()
    forecasts = all_forecasts(model, split, season_for(ckpt.freq, ckpt.config.model.context_len))
    forecast = apply(ckpt.fallback, forecasts, ids)  # (N, H, C) in its scaled units
    quantiles = shipped_quantiles(model, split, forecasts, ckpt.fallback, ids)  # (N, H, C, Q) or None
    c = forecast.shape[-1]
    its_targets = Scaler(ckpt.scaler.mean[:, :c], ckpt.scaler.std[:, :c])
    run_targets = Scaler(data.scaler.mean[:, :c], data.scaler.std[:, :c])

    def to_run_units(scaled: torch.Tensor) -> torch.Tensor:  # (N, ..., C) in its scaled units -> the run's
        rows = ids.reshape(-1, *[1] * (scaled.dim() - 2))  # each window's series, broadcast over the rest
        return torch.from_numpy(run_targets.transform(its_targets.inverse(scaled.numpy(), rows), rows))

    if quantiles is not None:
        quantiles = to_run_units(quantiles.movedim(-1, 1)).movedim(1, -1)  # (N, Q, H, C) while converted
    return to_run_units(forecast), quantiles


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's stop) ends training like Ctrl-C: cleanly, keeping what was saved."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _require_same_data(previous: Checkpoint, data: Prepared, out_dir: Path) -> None:
    """A resumed run must see the data it started on, or its splits and scaler would silently differ."""
    was, now = previous.data_fingerprint, data.fingerprint
    if was != now:
        changes = [f"{key} {was.get(key)} -> {now[key]}" for key in now if was.get(key) != now[key]]
        raise DataError(
            f"{previous.config.data.path} changed since run {out_dir} started ({'; '.join(changes)}), so it "
            f"cannot be resumed exactly; start a new run instead (tsformer train ... --out NEW_FOLDER, or "
            f"--overwrite to replace {out_dir})"
        )


def _run_leakage_checks(model: ForecasterBase, data: Prepared, cfg: Config) -> None:
    require_passed(check_model(model, n_checks=8) + check_data(data, cfg))


def _optimizer(model: ForecasterBase, cfg: Config) -> torch.optim.Optimizer:
    """AdamW; no weight decay on biases, normalisation gains and the learned cycle (a level, not a map)."""
    decay = [p for name, p in model.named_parameters() if p.dim() >= 2 and not name.endswith("cycle.values")]
    chosen = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in chosen]
    groups = [{"params": decay, "weight_decay": cfg.train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.train.lr)


def _restore(previous: Checkpoint, model: ForecasterBase, optimizer: torch.optim.Optimizer) -> LoopState:
    """Weights, optimizer, RNG and loop state of last.pt; a state that does not fit is a CheckpointError."""
    train_state = previous.train_state
    if train_state is None:
        raise CheckpointError(f"{LAST_FILE} holds no training state; it cannot be resumed, so start a new run")
    try:
        model.load_state_dict(previous.model_state)
        optimizer.load_state_dict(train_state["optimizer"])
        torch.set_rng_state(train_state["rng"])
        return LoopState(**train_state["loop"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"the training state in {LAST_FILE} does not fit this run ({str(exc).splitlines()[0][:160]}); "
            "start a new run"
        ) from None


class _Runner:
    """The epoch loop: one instance per call of `train`."""

    def __init__(
        self,
        cfg: Config,
        data: Prepared,
        model: ForecasterBase,
        optimizer: torch.optim.Optimizer,
        out_dir: Path,
        folder: runfolder.RunFolder | None,
        ctx: distributed.Dist,
        show_progress: bool,
    ):
        self.cfg, self.data, self.model, self.optimizer = cfg, data, model, optimizer
        self.out_dir, self.folder, self.ctx = out_dir, folder, ctx  # folder: None on ranks that do not write
        self.wrapped = distributed.wrap(model, ctx)
        self.show_progress = show_progress and ctx.is_main
        self.saved_epoch = 0  # the epoch in last.pt, for messages

    def loop(self, state: LoopState, train_windows: WindowIndex, val_windows: WindowIndex) -> None:
        tc = self.cfg.train
        n_windows = len(train_windows)
        per_rank = math.ceil(n_windows / self.ctx.world_size)
        steps_per_epoch = math.ceil(per_rank / tc.batch_size)
        total_steps = tc.epochs * steps_per_epoch
        progress = Progress(tc.epochs, steps_per_epoch, enabled=self.show_progress)
        started = time.monotonic() - state.train_seconds
        self.saved_epoch = state.epoch
        try:
            while state.epoch < tc.epochs and not state.finished:
                train_loss, lr = self._train_epoch(state, train_windows, total_steps, started, progress)
                self._end_epoch(state, train_loss, lr, self._val_loss(val_windows), started, progress)
        except KeyboardInterrupt:
            if not self.saved_epoch:
                raise Interrupted(f"training stopped during epoch 1; {self._kept()}") from None
            raise Interrupted(
                f"training stopped during epoch {self.saved_epoch + 1}; {self._kept()}. "
                f"Resume with: tsformer train --resume --out {self.out_dir}"
            ) from None

    def _train_epoch(
        self, state: LoopState, train_windows: WindowIndex, total_steps: int, started: float, progress: Progress
    ) -> tuple[float, float]:
        """One pass over this rank's share of the windows, in an order fixed by (seed, epoch).

        Under torchrun the order is padded by wrapping around (as torch's DistributedSampler does), so
        every rank takes the same number of steps and their gradient all-reduces pair up; each rank's
        dropout is seeded from (seed, epoch, rank), so a resumed run repeats it exactly.
        """
        tc = self.cfg.train
        epoch = state.epoch + 1
        epoch_seed = tc.seed * 1_000_003 + epoch
        order = torch.randperm(len(train_windows), generator=torch.Generator().manual_seed(epoch_seed))
        if self.ctx.world_size > 1:
            padding = -len(order) % self.ctx.world_size
            order = torch.cat([order, order[:padding]])[self.ctx.rank :: self.ctx.world_size]
            torch.manual_seed((epoch_seed * 1_009 + self.ctx.rank) % MAX_SEED)
        self.model.train()
        losses, lr = [], tc.lr
        for i, start in enumerate(range(0, len(order), tc.batch_size), start=1):
            batch = train_windows.take(order[start : start + tc.batch_size], self.ctx.device)
            lr = lr_at(state.step, total_steps, tc.lr, tc.warmup_frac, tc.min_lr_ratio)
            losses.append(self._step(batch, lr, epoch, i))
            state.step += 1
            progress.step(epoch, i, losses[-1])
            if tc.max_minutes and time.monotonic() - started > 60 * tc.max_minutes:
                state.finished = True
                break
        return sum(losses) / len(losses), lr

    def _end_epoch(
        self, state: LoopState, train_loss: float, lr: float, val_loss: float, started: float, progress: Progress
    ) -> None:
        """Early-stopping bookkeeping, history, checkpoints."""
        epoch = state.epoch + 1
        if not math.isfinite(val_loss):
            raise TrainingError(
                f"the validation loss became {val_loss} at epoch {epoch}; {self._kept()}. "
                "Lower the learning rate (--set train.lr=...) or check the data"
            )
        state.epoch = epoch
        state.train_seconds = time.monotonic() - started
        improved = val_loss < state.best_val
        if improved:
            state.best_val, state.best_epoch, state.bad_epochs = val_loss, epoch, 0
        else:
            state.bad_epochs += 1
        state.finished = state.finished or state.bad_epochs >= self.cfg.train.patience or epoch == self.cfg.train.epochs
        state.history.append(
            {"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss, "lr": lr, "seconds": state.train_seconds}
        )
        self._save(state, improved)
        progress.epoch(epoch, train_loss, val_loss, lr, improved)

    def _kept(self) -> str:
        if not self.saved_epoch:
            return f"no epoch was saved and {self.out_dir} was left as it was, so start again"
        return f"epoch {self.saved_epoch} is saved in {self.out_dir / LAST_FILE}"

    def _step(self, batch: Windows, lr: float, epoch: int, step: int) -> float:
        """One optimiser step on a batch of windows (B, L + H, C) and their observed mask (or None)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        windows = batch.split(self.cfg.model.context_len)  # the last token's target
        target, target_observed = windows.target, windows.target_observed
        if self.cfg.train.all_positions:
            n_targets = len(self.data.frame.columns)
            target = self.model.token_targets(batch.values[..., :n_targets])  # (B, T, H, C): after every token
            if batch.observed is not None:
                target_observed = self.model.token_targets(batch.observed[..., :n_targets])
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
        loss.backward()
        if self.cfg.train.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.grad_clip)
        self.optimizer.step()
        return loss.item()

    def _val_loss(self, val_windows: WindowIndex) -> float:
        """MSE of the last token's forecast (the real forecast) over every observed validation target."""
        windows = val_windows.split(self.cfg.model.context_len)
        targets, target_observed = windows.target, windows.target_observed
        if target_observed is None:
            target_observed = torch.ones_like(targets, dtype=torch.bool)
        total, start = 0.0, 0
        batches = self.model.predict_batches(windows.context, windows.context_observed, windows.covariates)
        for forecast in batches:  # (b, H, C) each, in order
            end = start + len(forecast)
            error = (forecast - targets[start:end].to(forecast.device)).square()
            total += error[target_observed[start:end].to(forecast.device)].sum().item()
            start = end
        return total / max(1, int(target_observed.sum()))

    def _checkpoint(self, train_state: dict[str, Any] | None) -> Checkpoint:
        frame = self.data.frame
        return Checkpoint(
            config=self.cfg,
            columns=frame.columns,
            time_col=frame.time_col,
            freq=frame.freq,
            id_cols=frame.id_cols,
            series=frame.keys,
            past_covs=self.data.layout.past,
            future_covs=self.data.layout.future,
            calendar=self.data.layout.calendar,
            scaler=self.data.scaler,
            borders=self.data.borders,
            model_state=self.model.state_dict(),
            data_fingerprint=self.data.fingerprint,
            train_state=train_state,
        )

    def _save(self, state: LoopState, improved: bool) -> None:
        """Best weights, the resumable state and the history; the first save puts the run in place."""
        if self.folder is None:
            return
        if improved:
            save_checkpoint(self._checkpoint(None), self.folder.path / MODEL_FILE)
        train_state = {
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "loop": dataclasses.asdict(state),
        }
        save_checkpoint(self._checkpoint(train_state), self.folder.path / LAST_FILE)
        atomic_write_text(self.folder.path / "history.csv", pd.DataFrame(state.history).to_csv(index=False))
        self.folder.publish()
        self.saved_epoch = state.epoch

"""`train(cfg, out_dir)`: leakage checks, then AdamW with early stopping into a run folder.

The run folder holds config.yaml (resolved), model.pt (best weights), last.pt (latest epoch
with optimizer and RNG state, for --resume), history.csv and loss.png.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from tsformer import distributed
from tsformer.checkpoint import LAST_FILE, MODEL_FILE, Checkpoint, load_checkpoint, save_checkpoint
from tsformer.config import Config, save_config, with_data_path
from tsformer.data import Prepared, prepare
from tsformer.errors import ConfigError, Interrupted, TrainingError, TsformerError
from tsformer.leakage import check_data, check_model, require_passed
from tsformer.model import Forecaster
from tsformer.progress import Progress
from tsformer.schedule import lr_at

RUN_FILES = (MODEL_FILE, LAST_FILE, "config.yaml", "history.csv", "loss.png", "metrics.json", "test_windows.png")


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
    """The config as saved in the run: the CSV path made absolute."""
    if not cfg.data.path:
        raise ConfigError("no CSV given; pass a CSV path or set data.path in the config")
    return with_data_path(cfg, Path(cfg.data.path).resolve())


def train(
    cfg: Config, out_dir: str | Path, resume: bool = False, overwrite: bool = False, show_progress: bool = True
) -> TrainResult:
    out_dir = Path(out_dir)
    previous = load_checkpoint(out_dir / LAST_FILE) if resume else None
    cfg = previous.config if previous else resolve(cfg)
    if not resume:
        _check_out_dir(out_dir, overwrite)
    ctx = distributed.setup(cfg.train.device)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    data = prepare(cfg)
    torch.manual_seed(cfg.train.seed)
    model = Forecaster(cfg.model, len(data.frame.columns), cfg.train.loss)
    _run_leakage_checks(model, data, cfg)
    train_windows = data.windows("train", cfg.model.context_len, cfg.model.horizon)[:: cfg.train.train_stride]
    val_windows = data.windows("val", cfg.model.context_len, cfg.model.horizon)
    model.to(ctx.device)
    optimizer = _optimizer(model, cfg)
    state = LoopState()
    if previous is not None:
        state = _restore(previous, model, optimizer)
        if ctx.is_main:
            _remove_stale_temp_files(out_dir)
    elif ctx.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        _remove_run_files(out_dir)
        save_config(cfg, out_dir / "config.yaml")
    runner = _Runner(cfg, data, model, optimizer, out_dir, ctx, show_progress)
    if not state.finished:
        try:
            runner.loop(state, train_windows, val_windows)
        except TsformerError:
            if not runner.saved_epoch and ctx.is_main:  # nothing worth keeping: leave no half-made run behind
                _remove_run_files(out_dir)
                if not any(out_dir.iterdir()):
                    out_dir.rmdir()
            raise
    if ctx.is_main:
        from tsformer.plots import plot_history

        plot_history(pd.DataFrame(state.history), out_dir / "loss.png")
    return TrainResult(
        run_dir=out_dir,
        best_epoch=state.best_epoch,
        best_val_loss=state.best_val,
        epochs_run=state.epoch,
        train_seconds=state.train_seconds,
        n_parameters=sum(p.numel() for p in model.parameters()),
        n_train_windows=len(train_windows),
        n_val_windows=len(val_windows),
    )


def _remove_run_files(out_dir: Path) -> None:
    for name in RUN_FILES:
        (out_dir / name).unlink(missing_ok=True)
    _remove_stale_temp_files(out_dir)


def _remove_stale_temp_files(out_dir: Path) -> None:
    """Temp files of checkpoint writes that a kill interrupted (the rename never happened)."""
    for name in (MODEL_FILE, LAST_FILE):
        for stale in out_dir.glob(f".{name}.*.tmp"):
            stale.unlink(missing_ok=True)


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file; give a folder for the run")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise ConfigError(
            f"run folder {out_dir} already exists and is not empty; pass --overwrite to replace it, "
            f"--resume to continue it, or choose another --out"
        )


def _run_leakage_checks(model: Forecaster, data: Prepared, cfg: Config) -> None:
    frame, model_cfg = data.frame, cfg.model
    data_results = check_data(
        frame.values, frame.timestamps, data.borders, data.scaler, model_cfg.context_len, model_cfg.horizon
    )
    require_passed(check_model(model, n_checks=8) + data_results)


def _optimizer(model: Forecaster, cfg: Config) -> torch.optim.Optimizer:
    """AdamW; no weight decay on biases and normalisation gains."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.train.lr)


def _restore(previous: Checkpoint, model: Forecaster, optimizer: torch.optim.Optimizer) -> LoopState:
    train_state = previous.train_state or {}
    model.load_state_dict(previous.model_state)
    optimizer.load_state_dict(train_state["optimizer"])
    torch.set_rng_state(train_state["rng"])
    return LoopState(**train_state["loop"])


class _Runner:
    """The epoch loop: one instance per call of `train`."""

    def __init__(
        self,
        cfg: Config,
        data: Prepared,
        model: Forecaster,
        optimizer: torch.optim.Optimizer,
        out_dir: Path,
        ctx: distributed.Dist,
        show_progress: bool,
    ):
        self.cfg, self.data, self.model, self.optimizer = cfg, data, model, optimizer
        self.out_dir, self.ctx = out_dir, ctx
        self.wrapped = distributed.wrap(model, ctx)
        self.show_progress = show_progress and ctx.is_main
        self.saved_epoch = 0  # the epoch in last.pt, for messages

    def loop(self, state: LoopState, train_windows: torch.Tensor, val_windows: torch.Tensor) -> None:
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
                raise Interrupted(f"training stopped during epoch 1; {self._kept()}, so start again") from None
            raise Interrupted(
                f"training stopped during epoch {self.saved_epoch + 1}; {self._kept()}. "
                f"Resume with: tsformer train --resume --out {self.out_dir}"
            ) from None

    def _train_epoch(
        self, state: LoopState, train_windows: torch.Tensor, total_steps: int, started: float, progress: Progress
    ) -> tuple[float, float]:
        """One pass over this rank's share of the windows, in an order fixed by (seed, epoch)."""
        tc = self.cfg.train
        epoch = state.epoch + 1
        order = torch.randperm(len(train_windows), generator=torch.Generator().manual_seed(tc.seed * 1_000_003 + epoch))
        order = order[self.ctx.rank :: self.ctx.world_size]
        self.model.train()
        losses, lr = [], tc.lr
        for i, start in enumerate(range(0, len(order), tc.batch_size), start=1):
            batch = train_windows[order[start : start + tc.batch_size]].to(self.ctx.device)
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
            return "no epoch was saved"
        return f"epoch {self.saved_epoch} is saved in {self.out_dir / LAST_FILE}"

    def _step(self, batch: torch.Tensor, lr: float, epoch: int, step: int) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.cfg.train.all_positions:
            context, target = self.model.split_window(batch)  # target (B, T, H, C)
        else:
            context, target = batch[:, : self.cfg.model.context_len], batch[:, self.cfg.model.context_len :]
        _, loss = self.wrapped(context, target=target)
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

    def _val_loss(self, val_windows: torch.Tensor) -> float:
        """MSE of the last token's forecast (the real forecast) over every validation window."""
        context_len = self.cfg.model.context_len
        total, count = 0.0, 0
        for start in range(0, len(val_windows), 4 * self.cfg.train.batch_size):
            batch = val_windows[start : start + 4 * self.cfg.train.batch_size].to(self.ctx.device)
            forecast = self.model.predict(batch[:, :context_len])
            total += (forecast - batch[:, context_len:]).square().sum().item()
            count += forecast.numel()
        return total / count

    def _checkpoint(self, train_state: dict[str, Any] | None) -> Checkpoint:
        frame = self.data.frame
        return Checkpoint(
            config=self.cfg,
            columns=frame.columns,
            time_col=frame.time_col,
            freq=frame.freq,
            last_timestamp=str(frame.timestamps[-1]),
            scaler=self.data.scaler,
            borders=self.data.borders,
            model_state=self.model.state_dict(),
            filled=frame.filled,
            train_state=train_state,
        )

    def _save(self, state: LoopState, improved: bool) -> None:
        if not self.ctx.is_main:
            return
        if improved:
            save_checkpoint(self._checkpoint(None), self.out_dir / MODEL_FILE)
        train_state = {
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "loop": dataclasses.asdict(state),
        }
        save_checkpoint(self._checkpoint(train_state), self.out_dir / LAST_FILE)
        self.saved_epoch = state.epoch
        pd.DataFrame(state.history).to_csv(self.out_dir / "history.csv", index=False)

"""A dependency-free progress display: a live line on a terminal, plain lines otherwise."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

HEARTBEAT_SECONDS = 60.0  # off a terminal, a line at most this often within an epoch: a log shows a long epoch move


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 60:d}:{seconds % 60:02d}"


class Progress:
    def __init__(
        self,
        total_epochs: int,
        steps_per_epoch: int,
        stream: TextIO | None = None,
        enabled: bool = True,
        label: str = "",
        then: str = "",
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label = label  # before each line, e.g. "final fit: "
        self.then = then  # after each eta: what comes after these epochs, e.g. " (then the final fit)"
        self.total_epochs = total_epochs
        self.steps_per_epoch = steps_per_epoch
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self.clock = clock
        self.started = self.last_line = clock()
        self.steps_done = 0

    def step(self, epoch: int, step: int, train_loss: float) -> None:
        """A live line every few steps on a terminal; elsewhere (a log file) a plain line where a minute passed
        since the last one, so a long epoch does not look stuck."""
        self.steps_done += 1
        if self.live:
            if step % 5 and step != self.steps_per_epoch:
                return
        elif not self.enabled or self.clock() - self.last_line < HEARTBEAT_SECONDS:
            return
        elapsed = self.clock() - self.started
        remaining = self.total_epochs * self.steps_per_epoch - self.steps_done
        eta = elapsed / self.steps_done * remaining
        start, end = ("\r", "   ") if self.live else ("", "\n")  # a live line is written over
        self._write(
            f"{start}{self.label}epoch {epoch}/{self.total_epochs}  step {step}/{self.steps_per_epoch}  "
            f"train {train_loss:.4f}  elapsed {_clock(elapsed)}  eta {_clock(eta)}{self.then}{end}"
        )

    def epoch(self, epoch: int, train_loss: float, val_loss: float | None, lr: float, best: bool = False) -> None:
        """One line per epoch; `val_loss` None: an epoch without validation (the final fit)."""
        if not self.enabled:
            return
        elapsed = self.clock() - self.started
        left = (self.total_epochs - epoch) * elapsed / max(1, epoch)
        prefix = "\r" if self.live else ""
        mark = "  *best" if best else ""
        self._write(
            f"{prefix}{self.label}epoch {epoch}/{self.total_epochs}  train {train_loss:.4f}  "
            f"{'' if val_loss is None else f'val {val_loss:.4f}  '}"
            f"lr {lr:.2e}  elapsed {_clock(elapsed)}  eta {_clock(left)}{self.then}{mark}\n"
        )

    def _write(self, text: str) -> None:
        """The line, or nothing from now on once its reader has gone (`train ... 2>&1 | head`): the display
        stops, training does not, and later writes to the stream go nowhere instead of failing."""
        self.last_line = self.clock()
        try:
            self.stream.write(text)
            self.stream.flush()
        except BrokenPipeError:
            self.enabled = self.live = False
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            except (OSError, ValueError):  # a stream without a file descriptor: nothing more is written to it
                pass

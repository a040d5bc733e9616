"""The progress display: a live line on a terminal, plain lines in a log, and what follows the epochs named."""

from __future__ import annotations

import io

from tsformer.progress import HEARTBEAT_SECONDS, Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_log_gets_a_line_within_a_long_epoch_once_a_minute_passed():
    log, clock = io.StringIO(), Clock()
    progress = Progress(2, 1000, stream=log, then=" (then the final fit)", clock=clock)
    for step in range(1, 201):  # 0.5 s a step, 100 s in all: one line, at 60 s (1,880 steps left at 0.5 s)
        clock.now += 0.5
        progress.step(1, step, 0.25)
    lines = log.getvalue().splitlines()
    assert lines == ["epoch 1/2  step 120/1000  train 0.2500  elapsed 1:00  eta 15:40 (then the final fit)"]
    assert HEARTBEAT_SECONDS == 60.0
    clock.now += 10.0
    progress.epoch(1, 0.2, 0.3, 1e-3, best=True)
    assert log.getvalue().splitlines()[-1] == (
        "epoch 1/2  train 0.2000  val 0.3000  lr 1.00e-03  elapsed 1:50  eta 1:50 (then the final fit)  *best"
    )
    for step in range(1, 100):  # within a minute of the epoch's line: nothing more
        clock.now += 0.5
        progress.step(2, step, 0.25)
    assert len(log.getvalue().splitlines()) == 2


def test_a_display_turned_off_writes_nothing():
    log, clock = io.StringIO(), Clock()
    progress = Progress(1, 10, stream=log, enabled=False, clock=clock)
    clock.now += 3600
    progress.step(1, 1, 0.1)
    progress.epoch(1, 0.1, 0.1, 1e-3)
    assert log.getvalue() == ""

"""Fuzzing the CSV reader and `tsformer train` with random CSV-like files.

Every input either works or is refused with a DataError (library) / exit code 2 and one
`Error:` line (CLI): never another exception, another exit code, a traceback or a hang.
`make test` runs TSFORMER_FUZZ_EXAMPLES=200 examples; `make fuzz` runs thousands.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import tempfile
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tsformer.cli import app
from tsformer.config import DataConfig
from tsformer.data import read_series
from tsformer.errors import DataError

EXAMPLES = int(os.environ.get("TSFORMER_FUZZ_EXAMPLES", "200"))
CLI_EXAMPLES = max(10, EXAMPLES // 5)  # each may be a training run
SECONDS_PER_EXAMPLE = 60  # a hang fails the example instead of stalling the suite
DELIMITERS = (",", ";", "\t", "|")
FREQS = ("h", "D", "15min", "s", "MS", "W-SUN")
ODD_CELLS = (
    "", "nan", "NaN", "NA", "null", "inf", "-inf", "Infinity", "-Infinity", "1,234", "12 kW", "3.5%", "$4",
    "1e400", "-1e-400", "1e300", "3e38", "true", "0x1F", " 7 ", '"5"', '"1,5"', "1_000", "--", "٣", "1e", ".",
)  # fmt: skip
TINY = [
    "--context-len", "4", "--horizon", "2", "--epochs", "1", "--quiet",
    "--set", "model.d_model=8", "--set", "model.n_heads=2", "--set", "model.d_ff=8", "--set", "model.n_layers=1",
    "--set", "model.patch_len=2", "--set", "train.batch_size=64", "--set", "train.max_minutes=0.5",
]  # fmt: skip

fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# --- strategies ---------------------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False, width=32)
number_text = st.one_of(
    finite.map(lambda x: f"{x:.4g}"),
    st.integers(-(10**6), 10**6).map(str),
    st.integers(-(10**30), 10**30).map(str),
    st.floats().map(repr),  # nan, inf, huge and tiny values as Python writes them
)
any_cell = st.one_of(number_text, st.sampled_from(ODD_CELLS), st.text(max_size=8))


@st.composite
def timestamps(draw, n: int) -> list[str]:
    """Regular, shuffled, duplicated, gappy, garbage, mixed-format, offset or numeric timestamps."""
    start = draw(st.datetimes(min_value=pd.Timestamp("1900-01-01"), max_value=pd.Timestamp("2200-01-01")))
    stamps = pd.date_range(pd.Timestamp(start).floor("s"), periods=n, freq=draw(st.sampled_from(FREQS)))
    text = [str(t) for t in stamps]
    kinds = ["regular"] * 6 + ["shuffled", "duplicated", "gap", "garbage", "formats", "offsets", "numbers"]
    kind = draw(st.sampled_from(kinds))
    if kind == "shuffled":
        text = draw(st.permutations(text))
    elif kind == "duplicated" and n > 1:
        i = draw(st.integers(1, n - 1))
        text[i] = text[i - 1]
    elif kind == "gap" and n > 2:
        del text[draw(st.integers(1, n - 2))]
        text.append(str(stamps[-1] + (stamps[-1] - stamps[-2])))
    elif kind == "garbage" and n:
        garbage = st.one_of(st.sampled_from(["", "yesterday", "2024-13-45", "NaT", "0", "1e9"]), st.text(max_size=10))
        text[draw(st.integers(0, n - 1))] = draw(garbage)
    elif kind == "formats":
        text = [f"{t:%d/%m/%Y %H:%M}" if i % 2 else f"{t:%Y-%m-%dT%H:%M:%S}" for i, t in enumerate(stamps)]
    elif kind == "offsets":
        text = [f"{t:%Y-%m-%dT%H:%M:%S}{draw(st.sampled_from(['', 'Z', '+01:00', '-05:30']))}" for t in stamps]
    elif kind == "numbers":
        text = [str(draw(st.integers(-(10**12), 10**12))) for _ in range(n)]
    return text


@st.composite
def header(draw, n_values: int) -> list[str]:
    """Mostly good names; sometimes no known time name, an empty name or a duplicate."""
    names = [draw(st.sampled_from(["date", "date", "date", "timestamp", "Time", "ds", "when"]))]
    names += [f"v{j}" for j in range(n_values)]
    if n_values and draw(st.integers(0, 5)) == 0:
        names[draw(st.integers(0, n_values))] = draw(st.sampled_from(["", "v0", "date", "a b", "x;y", "é"]))
    return names


@st.composite
def value_column(draw, n_rows: int) -> list[str]:
    """A smooth clean column, random numbers, or numbers with odd cells mixed in."""
    kind = draw(st.sampled_from(["smooth", "smooth", "numbers", "numbers", "some odd", "any"]))
    if kind == "smooth":
        return [f"{math.sin(i / 3):.3f}" for i in range(n_rows)]
    if kind == "numbers":
        return draw(st.lists(number_text, min_size=n_rows, max_size=n_rows))
    if kind == "some odd":
        column = [f"{i * 0.5:.1f}" for i in range(n_rows)]
        for i in draw(st.lists(st.integers(0, max(n_rows - 1, 0)), max_size=3)) if n_rows else []:
            column[i] = draw(st.sampled_from(ODD_CELLS))
        return column
    return draw(st.lists(any_cell, min_size=n_rows, max_size=n_rows))


def quote(cell: str, delimiter: str) -> str:
    return f'"{cell}"' if delimiter in cell and '"' not in cell else cell


@st.composite
def csv_texts(draw) -> str:
    """A small CSV-like text: random delimiter, header, timestamps, cells, line ends and damage."""
    delimiter = draw(st.sampled_from(DELIMITERS))
    n_rows = draw(st.integers(0, 60))
    n_values = draw(st.sampled_from([0, 1, 1, 2, 2, 3]))
    columns = [draw(value_column(n_rows)) for _ in range(n_values)]
    times = draw(timestamps(n_rows))
    rows = [draw(header(n_values))]
    rows += [[times[i] if i < len(times) else "", *(c[i] for c in columns)] for i in range(n_rows)]
    line_end = draw(st.sampled_from(["\n", "\r\n"]))
    text = line_end.join(delimiter.join(quote(cell, delimiter) for cell in row) for row in rows)
    text = draw(st.sampled_from(["", "", "\ufeff", "\n"])) + text + draw(st.sampled_from(["", line_end, line_end * 3]))
    if draw(st.integers(0, 3)) == 0:  # an extra field, a stray quote, a line break, a NUL, a non-ASCII letter
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from([delimiter, '"', "\n", "\r", "\x00", "é", "\u2028", "\x0c"])) + text[i:]
    return text


@st.composite
def clean_csv_texts(draw) -> str:
    """A CSV that should train: regular timestamps, enough rows, numbers of any magnitude."""
    delimiter = draw(st.sampled_from(DELIMITERS))
    n_rows = draw(st.integers(20, 60))
    n_values = draw(st.integers(1, 3))
    stamps = pd.date_range("2024-01-01", periods=n_rows, freq=draw(st.sampled_from(FREQS)))
    columns = [draw(st.lists(finite.map(repr), min_size=n_rows, max_size=n_rows)) for _ in range(n_values)]
    rows = [["date", *(f"v{j}" for j in range(n_values))]]
    rows += [[str(t), *(c[i] for c in columns)] for i, t in enumerate(stamps)]
    return "\n".join(delimiter.join(row) for row in rows) + "\n"


train_flags = st.lists(
    st.sampled_from([["--sort"], ["--fill", "ffill"], ["--fill", "zero"], ["--freq", "h"], ["--target", "v0"]]),
    max_size=2,
).map(lambda groups: [flag for group in groups for flag in group])
data_configs = st.builds(
    DataConfig,
    sort=st.booleans(),
    fill=st.sampled_from(["", "", "ffill", "zero"]),
    freq=st.sampled_from(["", "", "", "h", "D", "15min"]),
)
odd_text = st.text(alphabet=st.sampled_from(' \t\r\n\x0b\x0c\x1c\x85\u2028\ufeff,;|"0.-eé'), max_size=200)
clean_contents = clean_csv_texts().map(str.encode)
csv_contents = st.one_of(
    st.binary(max_size=2000),
    odd_text.map(str.encode),
    csv_texts().map(str.encode),
    csv_texts().map(str.encode),
    csv_texts().map(str.encode),
)


# --- helpers --------------------------------------------------------------------------------------


@contextlib.contextmanager
def time_limit(seconds: int):
    """Fail instead of hanging (SIGALRM: Unix, main thread)."""

    def hang(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_frame(frame) -> None:
    assert frame.values.dtype == np.float32 and frame.values.shape == (frame.n_rows, len(frame.columns))
    assert frame.observed.shape == frame.values.shape
    assert np.isfinite(frame.values[frame.observed]).all()  # unobserved cells: NaN, or filled by --fill
    assert frame.timestamps.is_monotonic_increasing and frame.timestamps.is_unique
    assert frame.freq


# --- properties -----------------------------------------------------------------------------------


@fuzz_settings
@given(content=csv_contents, cfg=data_configs)
@pytest.mark.filterwarnings("error")
def test_reader_returns_a_frame_or_raises_data_error(content: bytes, cfg: DataConfig):
    with tempfile.TemporaryDirectory() as folder, time_limit(SECONDS_PER_EXAMPLE):
        path = Path(folder) / "fuzz.csv"
        path.write_bytes(content)
        try:
            frame = read_series(path, cfg)
        except DataError as exc:
            event(f"DataError: {str(exc).replace(str(path), 'fuzz.csv')[:30]}")
            assert len(str(exc).splitlines()) == 1 and "; " in str(exc), str(exc)  # one line: what; how to fix
            return
    event("read")
    check_frame(frame)


@settings(fuzz_settings, max_examples=CLI_EXAMPLES)
@given(content=st.one_of(csv_contents, clean_contents, clean_contents), flags=train_flags)
@pytest.mark.filterwarnings("error")
def test_train_succeeds_or_exits_2_with_one_error_line(content: bytes, flags: list[str]):
    with tempfile.TemporaryDirectory() as folder, time_limit(SECONDS_PER_EXAMPLE):
        csv, out = Path(folder) / "fuzz.csv", Path(folder) / "run"
        csv.write_bytes(content)
        result = CliRunner().invoke(app, ["train", str(csv), "--out", str(out), *TINY, *flags])
        assert "Traceback" not in result.output
        event(f"exit {result.exit_code}: {result.output.replace(str(csv), 'fuzz.csv')[:30]}")
        if result.exit_code == 0:
            assert (out / "model.pt").is_file() and "Error" not in result.output
            return
        assert result.exit_code == 2, "".join(traceback.format_exception(*result.exc_info))
        lines = result.stderr.strip().splitlines()  # notes on how the data was read may come first
        assert lines[-1].startswith("Error: ") and not any("Error" in line for line in lines[:-1]), result.stderr
        assert not out.exists()

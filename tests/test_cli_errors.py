"""Every bad input gets one `Error: <what, where, how to fix>` line on stderr and exit code 2:
no traceback, and no run folder or forecast file left behind."""

from __future__ import annotations

import math
import pathlib
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import PINNED_FLAGS
from typer.testing import CliRunner

from tsformer.checkpoint import FORMAT_VERSION
from tsformer.cli import app, run_cli
from tsformer.config import DataConfig
from tsformer.data import read_series

pytestmark = pytest.mark.filterwarnings("error")  # a warning would print beside the Error: line

HEADER = "date,load,OT"
TINY = [
    "--context-len", "16", "--horizon", "4", "--epochs", "1", "--quiet",
    "--set", "model.d_model=8", "--set", "model.n_heads=2", "--set", "model.d_ff=16",
    "--set", "model.n_layers=1", "--set", "model.patch_len=4", "--set", "train.batch_size=32", *PINNED_FLAGS,
]  # fmt: skip


def hourly_rows(n: int = 200, freq: str = "h") -> list[str]:
    """`n` rows of date,load,OT; row i of the list is line i + 2 of the file."""
    stamps = pd.date_range("2024-01-01", periods=n, freq=freq)
    return [f"{t:%Y-%m-%d %H:%M:%S},{math.sin(i / 5):.4f},{math.cos(i / 7):.4f}" for i, t in enumerate(stamps)]


def write_csv(path: pathlib.Path, rows: list[str], header: str = HEADER) -> pathlib.Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def with_row(index: int, row: str, n: int = 200) -> list[str]:
    rows = hourly_rows(n)
    rows[index] = row
    return rows


def invoke(*args: str | pathlib.Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_error(result, *fragments: str, left_behind: tuple[pathlib.Path, ...] = ()) -> str:
    """Exit 2, exactly one `Error:` line on stderr holding every fragment, no traceback, no output files."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.output
    for path in left_behind:
        assert not path.exists(), f"{path} was left behind"
    return lines[0]


def train_error(tmp_path: pathlib.Path, csv: pathlib.Path, *fragments: str, extra: tuple[str, ...] = ()) -> str:
    out = tmp_path / "run"
    result = invoke("train", csv, "--out", out, *TINY, *extra)
    return assert_error(result, *fragments, left_behind=(out,))


# --- the file itself ------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    train_error(tmp_path, tmp_path / "nope.csv", "nope.csv not found", "check the path")


def test_directory_instead_of_file(tmp_path):
    folder = tmp_path / "data.csv"
    folder.mkdir()
    train_error(tmp_path, folder, "is not a file", "give the path of a CSV file")


def test_unreadable_file(tmp_path, monkeypatch):
    csv = write_csv(tmp_path / "locked.csv", hourly_rows())
    real_open = pathlib.Path.open

    def refuse(self, *args, **kwargs):
        if self == csv:
            raise PermissionError(13, "Permission denied")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", refuse)
    train_error(tmp_path, csv, "cannot read", "locked.csv", "Permission denied", "readable")


@pytest.mark.parametrize("content", [b"", b"\n\n   \n"], ids=["zero-bytes", "blank-lines"])
def test_empty_file(tmp_path, content):
    csv = tmp_path / "empty.csv"
    csv.write_bytes(content)
    train_error(tmp_path, csv, "empty.csv is empty", "header row and data rows")


def test_header_only(tmp_path):
    csv = write_csv(tmp_path / "header.csv", [])
    train_error(tmp_path, csv, "has a header but no data rows", "add rows")


def test_binary_file(tmp_path):
    csv = tmp_path / "model.csv"
    csv.write_bytes(bytes(range(256)) * 4)
    train_error(tmp_path, csv, "not a text CSV", "binary", "export the data as CSV")


def test_not_utf8(tmp_path):
    csv = tmp_path / "latin1.csv"
    csv.write_bytes("date,load,OT\n2024-01-01 00:00:00,caf\xe9,1\n".encode("latin-1"))
    train_error(tmp_path, csv, "not UTF-8 text", "byte 0xe9", "save it as a UTF-8 CSV")


def test_wrong_delimiter_names_the_delimiter(tmp_path):
    rows = [row.replace(",", " ").replace(" ", "T", 1) for row in hourly_rows()]
    csv = write_csv(tmp_path / "spaces.csv", rows, header="date load OT")
    train_error(tmp_path, csv, "only 1 column", "delimiter ','", "';', tab or '|'")


def test_semicolon_with_decimal_commas_are_read_as_decimals(tmp_path):
    """European spreadsheets write 1.234,5 with ';' between cells: read as 1234.5, saying so."""
    rows = [row.replace(",", ";").replace(".", ",") for row in hourly_rows()]
    rows[3] = rows[3].rsplit(";", 1)[0] + ";1.234,5"  # a thousands point too
    frame = read_series(write_csv(tmp_path / "european.csv", rows, header="date;load;OT"), DataConfig())
    expected = [float(row.split(",")[1]) for row in hourly_rows()]
    np.testing.assert_allclose(frame.values[:, 0], expected, rtol=1e-6)
    assert frame.values[3, 1] == 1234.5
    assert any(note.startswith("read 'load', 'OT' with decimal commas") for note in frame.notes)


def test_a_decimal_point_after_decimal_commas_is_refused(tmp_path):
    rows = [row.replace(",", ";").replace(".", ",") for row in hourly_rows()]
    rows[8] = "2024-01-01 08:00:00;0.5;1"
    csv = write_csv(tmp_path / "mixed.csv", rows, header="date;load;OT")
    train_error(tmp_path, csv, "column 'load' writes decimals with commas", "'0.5' at line 10", "alike")


def test_decimal_points_with_semicolons_keep_their_thousands_reading(tmp_path):
    """The first cell with a mark decides: a file whose decimals are points reads 1.234 as 1.234, and a later
    cell with a comma is refused rather than re-reading it."""
    rows = [row.replace(",", ";") for row in hourly_rows()]
    rows[8] = "2024-01-01 08:00:00;0,5;1"
    csv = write_csv(tmp_path / "points.csv", rows, header="date;load;OT")
    train_error(tmp_path, csv, "column 'load' is not numeric", "'0,5' at line 10", "delimiter ';'", "decimals with '.'")


@pytest.mark.parametrize("delimiter", [";", "\t", "|"])
def test_other_delimiters_are_sniffed(tmp_path, delimiter):
    csv = write_csv(
        tmp_path / "d.csv", [row.replace(",", delimiter) for row in hourly_rows()], HEADER.replace(",", delimiter)
    )
    frame = read_series(csv, DataConfig())
    assert frame.columns == ("load", "OT") and frame.n_rows == 200


def test_row_longer_than_header(tmp_path):
    csv = write_csv(tmp_path / "ragged.csv", with_row(5, "2024-01-01 05:00:00,1,2,3"))
    train_error(tmp_path, csv, "line 7 has 4 fields but the header has 3", "delimiter ','")


def test_duplicate_column_name(tmp_path):
    csv = write_csv(tmp_path / "dup.csv", [row + ",1" for row in hourly_rows()], header="date,load,OT,load")
    train_error(tmp_path, csv, "column name 'load' twice", "unique name")


def test_an_exported_row_index_is_left_out(tmp_path):
    """pandas' to_csv writes its index first, with no header name: left out, saying so."""
    csv = write_csv(
        tmp_path / "index.csv", [f"{i},{row}" for i, row in enumerate(hourly_rows())], header=",date,load,OT"
    )
    frame = read_series(csv, DataConfig())
    assert frame.columns == ("load", "OT") and frame.n_rows == 200
    assert frame.notes[0].startswith("left out the first column of index.csv: it has no header name and counts")


def test_an_unnamed_column_that_is_no_row_index(tmp_path):
    rows = [f"{i + 1},{row}" for i, row in enumerate(hourly_rows())]  # from 1: a count, not pandas' index
    csv = write_csv(tmp_path / "index.csv", rows, header=",date,load,OT")
    train_error(tmp_path, csv, "column 1", "no header name", "exported row index")


# --- columns ----------------------------------------------------------------------------------------


def test_no_numeric_column(tmp_path):
    rows = [f"{row.split(',')[0]},red,blue" for row in hourly_rows()]
    csv = write_csv(tmp_path / "words.csv", rows, header="date,colour,sky")
    train_error(tmp_path, csv, "no numeric column", "'date'", "'colour', 'sky'", "add a column of numbers")


def test_unknown_target(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(
        tmp_path, csv, "target column 'price' not in ok.csv", "columns are: 'load', 'OT'", extra=("--target", "price")
    )


def test_time_column_as_target(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, "target column 'date' is the time column", extra=("--target", "date"))


def test_unknown_time_col(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, "time column 'when' not in ok.csv", "'date', 'load', 'OT'", extra=("--time-col", "when"))


def test_no_time_column_found(tmp_path):
    rows = [f"t{i}," + row.split(",", 1)[1] for i, row in enumerate(hourly_rows())]  # labels, not times
    csv = write_csv(tmp_path / "stamp.csv", rows, header="stamp,load,OT")
    train_error(tmp_path, csv, "no time column found", "'stamp', 'load', 'OT'", "--time-col")


@pytest.mark.parametrize("cell", ["1,234", "12 kW"], ids=["thousands", "units"])
def test_number_with_separator_or_unit(tmp_path, cell):
    rows = [f'{row.split(",")[0]},"{cell}",1' for row in hourly_rows()]
    csv = write_csv(tmp_path / "text.csv", rows)
    train_error(tmp_path, csv, "column 'load' is not numeric", repr(cell), "line 2", "thousands separators and units")


def test_one_text_cell_in_a_numeric_column(tmp_path):
    csv = write_csv(tmp_path / "typo.csv", with_row(40, "2024-01-02 16:00:00,1O.5,2"))
    train_error(tmp_path, csv, "column 'load' is not numeric", "'1O.5'", "line 42")


# --- time ---------------------------------------------------------------------------------------


def test_unparseable_date_names_the_line(tmp_path):
    csv = write_csv(tmp_path / "dates.csv", with_row(3, "yesterday,1,2"))
    train_error(tmp_path, csv, "cannot parse 'yesterday'", "time column 'date'", "line 5", "date format")


def test_step_numbers_in_the_time_column_say_they_are_not_dates_and_how_to_read_them(tmp_path):
    csv = write_csv(tmp_path / "steps.csv", [f"{i},{i % 7}.5" for i in range(60)], header="t,value")
    train_error(tmp_path, csv, "time column 't' holds integers (0, 1, ...), not dates;", "--time-unit s",
                extra=("--time-col", "t"))  # fmt: skip


def test_a_week_label_that_is_no_iso_week_names_its_line(tmp_path):
    rows = (
        [f"2015-W{w:02d},{w},1" for w in range(1, 54)]
        + ["2015-W54,1,1"]
        + [f"2016-W{w:02d},{w},1" for w in range(1, 60)]
    )
    csv = write_csv(tmp_path / "weeks.csv", rows, header="week,load,OT")
    train_error(tmp_path, csv, "'2015-W54' in time column 'week' at line 55 is no ISO week", "2015-W02")


def test_empty_timestamp(tmp_path):
    csv = write_csv(tmp_path / "gap.csv", with_row(10, ",1,2"))
    train_error(tmp_path, csv, "empty timestamp", "line 12", "every row needs a timestamp")


def test_duplicate_timestamp_names_both_lines(tmp_path):
    rows = hourly_rows()
    rows[8] = rows[7]
    csv = write_csv(tmp_path / "dup.csv", rows)
    train_error(tmp_path, csv, "duplicate timestamp 2024-01-01 07:00:00", "lines 9 and 10", "one row per timestamp")


def test_decreasing_timestamps_suggest_sort(tmp_path):
    rows = hourly_rows()
    rows[20], rows[21] = rows[21], rows[20]
    csv = write_csv(tmp_path / "shuffled.csv", rows)
    train_error(tmp_path, csv, "timestamps decrease at line 23", "--sort")


def test_stacked_series_without_an_id_are_pointed_to_id_col(tmp_path):
    """Two stores reporting weekly on different weekdays repeat no timestamp, so no id column is found; the time
    starting again at the second store's first row was only ever told to sort (then --freq), never --id-col."""
    weeks = [pd.date_range(start, periods=30, freq="7D") for start in ("2023-01-02", "2023-01-04")]
    rows = [f"{store},{t.date()},{i}" for store, stamps in zip("NS", weeks, strict=True) for i, t in enumerate(stamps)]
    csv = write_csv(tmp_path / "stores.csv", rows, header="store,date,sales")
    stacked = "--sort; if the rows from line 32 are another series, name the column that tells the series apart"
    train_error(tmp_path, csv, "timestamps decrease at line 32", stacked)


def test_sort_accepts_unsorted_rows(tmp_path):
    rows = hourly_rows()
    csv = write_csv(tmp_path / "reversed.csv", rows[::-1])
    frame = read_series(csv, DataConfig(sort=True))
    assert frame.timestamps.is_monotonic_increasing and frame.freq == "h"
    assert frame.values[0, 0] == pytest.approx(0.0)


def test_irregular_spacing_names_the_gap(tmp_path):
    rows = hourly_rows()
    rows[50] = "2024-01-03 02:30:00" + rows[50][len("2024-01-03 02:00:00") :]  # off the hourly grid
    csv = write_csv(tmp_path / "gap.csv", rows)
    train_error(tmp_path, csv, "irregular spacing", "2024-01-03 01:00:00 (line 51)", "(line 52)", "--freq")


def test_a_missing_hour_is_an_unobserved_row(tmp_path):
    rows = hourly_rows()
    del rows[50]
    for freq in ("", "h"):
        frame = read_series(write_csv(tmp_path / "gap.csv", rows), DataConfig(freq=freq))
        assert frame.freq == "h" and frame.n_rows == 200 and not frame.observed[50].any()


def test_freq_accepts_irregular_spacing(tmp_path):
    rows = hourly_rows()
    rows[50] = "2024-01-03 02:30:00" + rows[50][len("2024-01-03 02:00:00") :]
    frame = read_series(write_csv(tmp_path / "odd.csv", rows), DataConfig(freq="h"))
    assert frame.freq == "h" and frame.n_rows == 200 and frame.observed.all()  # rows taken as consecutive steps


def test_unknown_freq(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, "--freq 'fortnightly' is not a pandas frequency", extra=("--freq", "fortnightly"))
    renamed = "--freq '2Q-DEC' is not a pandas frequency such as h, D, W-SUN or 15min (pandas now calls it '2QE-DEC')"
    train_error(tmp_path, csv, renamed, extra=("--freq", "2Q-DEC"))  # pandas 3 renamed the period ends


def test_freq_that_contradicts_regular_data(tmp_path):
    csv = write_csv(tmp_path / "daily.csv", hourly_rows(freq="D"))
    train_error(tmp_path, csv, "rows are D apart", "--freq says h", "fix --freq", extra=("--freq", "h"))


# --- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", ["", "nan", "NA", "inf", "-inf"])
def test_a_missing_or_infinite_cell_is_unobserved(tmp_path, cell):
    csv = write_csv(tmp_path / "holes.csv", with_row(30, f"2024-01-02 06:00:00,{cell},1"))
    result = invoke("train", csv, "--out", tmp_path / "run", *TINY)
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == (
        "1 missing or infinite cells of 'load' are unobserved: masked in the inputs, the loss and the metrics "
        "(or pass --fill ffill or zero)"
    )


def test_value_too_large_for_float32(tmp_path):
    csv = write_csv(tmp_path / "huge.csv", with_row(4, "2024-01-01 04:00:00,1e300,1"))
    train_error(tmp_path, csv, "column 'load' has a value too large for float32", "line 6", "rescale")


@pytest.mark.parametrize(
    ("train_value", "spike"),
    [("5.0", "1e38"), ("0.0", "1e19")],
    ids=["overflows-float32-when-scaled", "overflows-the-loss"],
)
def test_value_far_off_the_training_scale(tmp_path, train_value, spike):
    """Found by test_fuzz: a validation value ~1e19+ training standard deviations out breaks training."""
    rows = [f"{row.split(',')[0]},{train_value},1" for row in hourly_rows()]
    rows[1] = rows[1].replace(f",{train_value},", f",{float(train_value) + 1e-6},")
    rows[150] = rows[150].replace(f",{train_value},", f",{spike},")
    train_error(tmp_path, write_csv(tmp_path / "spike.csv", rows), "column 'load'")


@pytest.mark.parametrize(("method", "filled"), [("ffill", [-0.4646, -0.4646]), ("zero", [0.0, 0.0])])
def test_fill_uses_earlier_rows_and_says_what_it_filled(tmp_path, method, filled):
    rows = with_row(30, "2024-01-02 06:00:00,,1")
    rows[31] = "2024-01-02 07:00:00,inf,1"
    frame = read_series(write_csv(tmp_path / "holes.csv", rows), DataConfig(fill=method))
    assert frame.notes == (f"filled 2 missing or infinite cells of 'load' with --fill {method}",)
    assert frame.values[30:32, 0].tolist() == pytest.approx(filled, abs=1e-4)  # row 29 holds sin(29/5)
    assert frame.observed[:, 0].sum() == 198 and not frame.observed[30:32, 0].any()


def test_ffill_refuses_leading_missing_values(tmp_path):
    rows = with_row(0, "2024-01-01 00:00:00,,1")
    train_error(tmp_path, write_csv(tmp_path / "lead.csv", rows), "starts with 1 missing", "--fill zero",
                extra=("--fill", "ffill"))  # fmt: skip


def test_interpolate_is_refused_because_it_reads_the_future(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, "data.fill=interpolate was removed", "ffill", extra=("--fill", "interpolate"))


def test_too_few_rows_says_how_many_are_needed(tmp_path):
    csv = write_csv(tmp_path / "short.csv", hourly_rows(20))
    train_error(tmp_path, csv, "too few rows", "needs at least 20", "context_len + horizon", "--context-len")


# --- config -------------------------------------------------------------------------------------


def test_config_with_unknown_key(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    config = tmp_path / "bad.yaml"
    config.write_text("model:\n  d_modle: 8\n")
    train_error(tmp_path, csv, "unknown key model.d_modle", "d_model", extra=("--config", str(config)))


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("model.dropout=1.5", "model.dropout must be in [0, 1)"),
        ("train.epochs=-1", "train.epochs must be at least 1 (or 0: from the data), got -1"),
        ("model.n_heads=3", "model.n_heads (3) must divide model.d_model (8)"),
        ("train.lr=-1", "train.lr must be positive"),
        ("train.lr=.inf", "train.lr must be a finite number, got inf"),
        ("train.train_stride=200000000000000000000", "train.train_stride must be at most 2147483647"),
        ("train.seed=-1", "train.seed must be in 0..9223372036854775807"),
        ("train.colour=red", "unknown key train.colour"),
        ("optim.lr=1", "unknown config section 'optim'"),
    ],
)
def test_out_of_range_or_unknown_override(tmp_path, override, fragment):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, fragment, extra=("--set", override))


def test_unknown_fill_method(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, "data.fill must be one of", "'mean'", extra=("--fill", "mean"))


def test_config_file_that_is_not_yaml(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    config = tmp_path / "bad.yaml"
    config.write_text("model: [unclosed\n")
    train_error(tmp_path, csv, "is not valid YAML", extra=("--config", str(config)))


def test_debug_shows_the_traceback(tmp_path):
    result = invoke("--debug", "train", tmp_path / "nope.csv", "--out", tmp_path / "run")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and result.stderr.strip().splitlines()[-1].startswith("Error: ")


@pytest.mark.parametrize(
    "args, fragment, help_of",
    [
        (["train", "--bogus", "x.csv"], "No such option: --bogus", "tsformer train"),
        (["predict"], "Missing argument 'run'", "tsformer predict"),
        (["trian"], "Did you mean 'train'?", "tsformer"),
        (["train", "x.csv", "--epochs", "abc"], "Invalid value for '--epochs'", "tsformer train"),
    ],
)
def test_a_usage_mistake_is_one_error_line_naming_the_help(capsys, args, fragment, help_of):
    assert run_cli(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [captured.err.strip()]  # one line
    assert captured.err.startswith("Error: ") and fragment in captured.err
    assert f"run '{help_of} --help' for the options" in captured.err


def test_no_arguments_print_the_help_and_help_exits_0(capsys):
    assert run_cli([]) == 2  # as click has it: the help, on stderr
    assert capsys.readouterr().err.startswith("Usage: tsformer [OPTIONS] COMMAND")
    assert run_cli(["datasets"]) == 2  # a sub-command group without its command: its help, not an Error line
    assert capsys.readouterr().err.startswith("Usage: tsformer datasets [OPTIONS] COMMAND")
    assert run_cli(["evaluate", "--help"]) == 0
    assert "Usage: tsformer evaluate" in capsys.readouterr().out


# --- predict and evaluate against a trained run -----------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> pathlib.Path:
    """One tiny run, trained with --fill on a CSV holding one empty cell."""
    folder = tmp_path_factory.mktemp("trained")
    csv = write_csv(folder / "train.csv", with_row(30, "2024-01-02 06:00:00,,1"))
    result = invoke("train", csv, "--out", folder / "run", "--fill", "ffill", *TINY)
    assert result.exit_code == 0, result.output
    return folder / "run"


def predict_error(tmp_path, run_path, csv, *fragments: str, extra: tuple = ()) -> str:
    out, plot = tmp_path / "forecast.csv", tmp_path / "forecast.png"
    result = invoke("predict", run_path, csv, "--out", out, "--plot", plot, *extra)
    message = assert_error(result, *fragments, left_behind=(out, plot))
    assert not list(tmp_path.glob(".forecast.*")), "a temporary output file was left behind"
    return message


def test_predict_on_a_matching_csv_works(tmp_path, run):
    out = tmp_path / "forecast.csv"
    result = invoke("predict", run, write_csv(tmp_path / "new.csv", hourly_rows(40)), "--out", out)
    assert result.exit_code == 0, result.output
    assert len(pd.read_csv(out)) == 4


def test_an_hour_written_twice_when_daylight_saving_ends_is_named_as_such(tmp_path):
    stamps = pd.date_range("2024-10-20", periods=240, freq="h", tz="Europe/Berlin").tz_localize(None)
    rows = [f"{t:%Y-%m-%d %H:%M:%S},{i % 24},{i % 7}" for i, t in enumerate(stamps)]
    csv = write_csv(tmp_path / "local.csv", rows)
    train_error(tmp_path, csv, "duplicate timestamp 2024-10-27 02:00:00 at lines 172 and 173, an early Sunday hour",
                "UTC offset")  # fmt: skip
    sundays = pd.date_range("2024-01-07", periods=50, freq="W").strftime("%Y-%m-%d")  # two series stacked: no hint
    stacked = write_csv(tmp_path / "weekly.csv", [f"{day},{i},{i}" for i, day in enumerate([*sundays, *sundays])])
    train_error(tmp_path, stacked, "duplicate timestamp 2024-01-07 00:00:00 at lines 2 and 52", "--id-col")


def test_every_numeric_column_given_as_a_covariate_is_refused_naming_them(tmp_path):
    csv = write_csv(tmp_path / "two.csv", hourly_rows())
    extra = ("--future-cov", "load", "--past-cov", "OT")
    train_error(tmp_path, csv, "every numeric column of two.csv is given as a covariate ('load', 'OT')", extra=extra)


def test_future_covariates_for_a_model_that_reads_none_are_refused(tmp_path, run):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    future = write_csv(tmp_path / "future.csv", hourly_rows(210)[200:])
    predict_error(
        tmp_path, run, csv, "reads no known-future covariate columns", "drop --future", extra=("--future", future)
    )


def test_a_plot_path_not_ending_in_png_is_refused_before_any_work(tmp_path, run):
    csv = write_csv(tmp_path / "new.csv", hourly_rows(40))
    out, plot = tmp_path / "forecast.csv", tmp_path / "forecast.txt"
    result = invoke("predict", run, csv, "--out", out, "--plot", plot)
    assert_error(result, "--plot", "forecast.txt would hold a PNG under another name", "ending in .png",
                 left_behind=(out, plot))  # fmt: skip


def test_predict_csv_missing_a_trained_column(tmp_path, run):
    rows = [row.rsplit(",", 1)[0] for row in hourly_rows(40)]
    csv = write_csv(tmp_path / "new.csv", rows, header="date,load")
    predict_error(tmp_path, run, csv, "does not match the model", "load, OT", "target column 'OT' not in")


def test_predict_csv_with_another_time_column(tmp_path, run):
    csv = write_csv(tmp_path / "new.csv", hourly_rows(40), header="when,load,OT")
    predict_error(tmp_path, run, csv, "does not match the model", "time column 'date'")


def test_predict_csv_with_another_frequency(tmp_path, run):
    csv = write_csv(tmp_path / "daily.csv", hourly_rows(40, freq="D"))
    predict_error(tmp_path, run, csv, "rows are D apart", "trained on h", "training frequency")


def test_predict_csv_off_the_training_grid(tmp_path, run):
    rows = hourly_rows(40)
    rows[20] = rows[20].replace(":00:00,", ":30:00,", 1)
    predict_error(tmp_path, run, write_csv(tmp_path / "odd.csv", rows), "irregular spacing", "(line 22)", "h apart")


def test_predict_csv_with_a_gap_treats_it_as_unobserved(tmp_path, run):
    rows = hourly_rows(40)
    del rows[20]
    result = invoke("predict", run, write_csv(tmp_path / "gap.csv", rows))
    assert result.exit_code == 0, result.output
    assert "1 timestamp missing from the h grid (first 2024-01-01 20:00:00) became unobserved steps" in result.stderr


def test_predict_csv_with_bad_values(tmp_path, run):
    rows = [f'{row.split(",")[0]},"1,0",2' for row in hourly_rows(40)]
    csv = write_csv(tmp_path / "new.csv", rows)
    predict_error(tmp_path, run, csv, "column 'load' is not numeric", "'1,0'")
    rows = hourly_rows(40)
    rows[30] = rows[30].split(",")[0] + ",abc,2"
    message = predict_error(tmp_path, run, write_csv(tmp_path / "text.csv", rows), "'abc' at line 32")
    assert message.endswith("or correct it in the data") and "--target" not in message  # predict takes no --target
    blank = [row.split(",")[0] + ",," + row.split(",")[2] for row in hourly_rows(40)]
    message = predict_error(tmp_path, run, write_csv(tmp_path / "blank.csv", blank), "column 'load' has no value")
    assert message.endswith("give it values: the model reads it")


def damaged_run(tmp_path, run, damage) -> pathlib.Path:
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    damage(copy / "model.pt")
    return copy


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def scramble(path):
    data = bytearray(path.read_bytes())
    data[100:400] = bytes(range(256))[:300] + bytes(44)
    path.write_bytes(bytes(data))


def foreign(path):
    torch.save({"state_dict": {"w": torch.zeros(2)}}, path)


def newer_format(path):
    payload = torch.load(path, weights_only=True)
    payload["format_version"] = 99
    torch.save(payload, path)


def edit_payload(path, key, change):
    """A hand edit that torch still loads with weights_only=True: one field changed."""
    payload = torch.load(path, weights_only=True)
    payload[key] = change(payload[key])
    torch.save(payload, path)


@pytest.mark.parametrize(
    ("damage", "fragments"),
    [
        (truncate, ("not a loadable tsformer checkpoint", "retrain")),
        (scramble, ("not a loadable tsformer checkpoint", "retrain")),
        (lambda p: p.write_text("date,y\n2024-01-01,1\n"), ("is a text file (data?), not a trained run",)),
        (foreign, ("is not a tsformer checkpoint", "model.pt of a tsformer run")),
        (
            newer_format,
            ("checkpoint format 99", f"reads format 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 or {FORMAT_VERSION}"),
        ),
        (lambda p: p.unlink(), ("has no model.pt", "tsformer train")),
        (lambda p: edit_payload(p, "scaler", lambda s: {**s, "mean": [[*s["mean"][0], 0.0]]}), ("(1, 3) means",)),
        (
            lambda p: edit_payload(p, "layout", lambda c: {**c, "targets": [*c["targets"], "x"]}),
            ("for 1 series x 3 columns",),
        ),
        (lambda p: edit_payload(p, "layout", lambda c: {**c, "targets": [c["targets"][0]] * 2}), ("two roles",)),
        (lambda p: edit_payload(p, "freq", lambda f: "0h"), ("does not move time forward",)),
        (lambda p: edit_payload(p, "borders", lambda b: [b[1], b[0], b[2]]), ("increasing row numbers",)),
        (lambda p: edit_payload(p, "data_fingerprint", lambda f: None), ("data fingerprint",)),
        (lambda p: edit_payload(p, "time_col", lambda t: 7), ("time column 7",)),
        (
            lambda p: edit_payload(p, "calibration", lambda c: {**c, "typical": -c["typical"]}),
            ("typical interval scale",),
        ),
    ],
    ids=[
        "truncated",
        "corrupt",
        "text",
        "foreign",
        "newer-format",
        "missing",
        "scaler-length",
        "more-columns",
        "duplicate-columns",
        "zero-freq",
        "borders",
        "fingerprint",
        "time-col",
        "interval-scale",
    ],  # fmt: skip
)
def test_bad_checkpoint(tmp_path, run, damage, fragments):
    copy = damaged_run(tmp_path, run, damage)
    predict_error(tmp_path, copy, write_csv(tmp_path / "new.csv", hourly_rows(40)), *fragments)
    assert_error(invoke("evaluate", copy), *fragments)
    assert_error(invoke("check", copy), *fragments)


def test_missing_run_folder(tmp_path):
    predict_error(tmp_path, tmp_path / "nothing", write_csv(tmp_path / "new.csv", hourly_rows(40)), "not found")


def test_evaluate_on_a_csv_with_other_columns(tmp_path, run):
    csv = write_csv(tmp_path / "other.csv", [row + ",3" for row in hourly_rows()], header="date,a,b,c")
    assert_error(invoke("evaluate", run, "--csv", csv), "target column 'load' not in other.csv")


# --- hardening: values, frequencies, dates and outputs that once ended in a traceback or silently wrong ------


def test_a_seed_beyond_64_bits_is_refused(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, "train.seed must be in 0..9223372036854775807", extra=("--seed", "2" + "0" * 20))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU, so train.device=cuda is valid")
def test_cuda_without_a_gpu_says_so(tmp_path):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, "train.device=cuda but torch finds no usable GPU", "train.device=cpu",
                extra=("--set", "train.device=cuda"))  # fmt: skip


@pytest.mark.parametrize("freq", ["0h", "-1h"])
def test_a_frequency_that_does_not_move_forward_is_refused(tmp_path, freq):
    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    train_error(tmp_path, csv, f"--freq {freq!r} does not move time forward", extra=("--freq", freq))


def test_a_single_row_blames_the_row_count_not_split_borders(tmp_path):
    csv = write_csv(tmp_path / "one.csv", hourly_rows(1))
    message = train_error(tmp_path, csv, "too few rows: 1 row cannot be split 0.7/0.1/0.2", extra=("--freq", "h"))
    assert "split_borders" not in message


@pytest.mark.parametrize(
    ("rows", "border"),
    [
        (None, "2024-01-05T00:00:00+02:00"),  # aware border, naive timestamps
        ("aware", "2024-01-05 00:00:00"),  # naive border, aware timestamps
    ],
    ids=["aware-border", "aware-data"],
)
def test_split_borders_with_another_time_zone_kind_are_refused(tmp_path, rows, border):
    lines = hourly_rows()
    if rows == "aware":
        lines = [f"{row.split(',')[0]}+02:00,{row.split(',', 1)[1]}" for row in lines]
    csv = write_csv(tmp_path / "tz.csv", lines)
    override = f"data.split_borders=[{border}, 2024-01-07 00:00:00, 2024-01-08 00:00:00]"
    if rows == "aware":
        override = override.replace("2024-01-07 00:00:00", "2024-01-07T00:00:00+02:00")
        override = override.replace("2024-01-08 00:00:00", "2024-01-08T00:00:00+02:00")
    train_error(tmp_path, csv, "does not match the timestamps", "UTC offset", extra=("--set", override))


def test_natural_yaml_dates_in_split_borders_are_dates(tmp_path):
    from tsformer.config import load_config
    from tsformer.data import training_data

    csv = write_csv(tmp_path / "ok.csv", hourly_rows())
    config = tmp_path / "dates.yaml"
    config.write_text(f"data:\n  path: {csv}\n  split_borders: [2024-01-06, 2024-01-07, 2024-01-08]\n")
    cfg = load_config(config, ["model.context_len=16", "model.horizon=4", "model.patch_len=4"])
    assert cfg.data.split_borders == ("2024-01-06", "2024-01-07", "2024-01-08")
    assert training_data(cfg).borders.to_list() == [[120], [144], [168]]


def test_check_on_a_csv_shorter_than_the_run_is_one_error(tmp_path, run):
    csv = write_csv(tmp_path / "short.csv", hourly_rows(150))
    assert_error(invoke("check", run, "--csv", csv), "has 150 rows but the run's test split ends at row 200")


def test_predict_checks_the_step_between_two_rows(tmp_path, run):
    csv = write_csv(tmp_path / "two.csv", hourly_rows(2, freq="D"))
    predict_error(tmp_path, run, csv, "the two rows are 1 days 00:00:00 apart but the model was trained on h steps")


def test_predict_on_one_row_says_the_frequency_cannot_be_checked(tmp_path, run):
    result = invoke("predict", run, write_csv(tmp_path / "one.csv", hourly_rows(1)))
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == "one row: its frequency cannot be checked against h"
    assert result.stdout.splitlines()[1].startswith("2024-01-01 01:00:00,")


def test_predict_refuses_a_folder_as_out_before_any_work(tmp_path, run):
    folder = tmp_path / "out"
    folder.mkdir()
    result = invoke("predict", run, write_csv(tmp_path / "new.csv", hourly_rows(40)), "--out", folder)
    assert_error(result, f"--out {folder} is a folder; give a file path")
    assert list(folder.iterdir()) == [] and not list(tmp_path.glob(".*"))


def test_predict_refuses_to_write_over_the_history_it_reads(tmp_path, run):
    history = write_csv(tmp_path / "history.csv", hourly_rows(40))
    before = history.read_bytes()
    for out in (history, tmp_path / "." / "history.csv"):
        result = invoke("predict", run, history, "--out", out)
        assert_error(result, f"--out {out} is a file this command reads; write to another path")
    assert history.read_bytes() == before


def test_backtest_refuses_to_write_over_the_training_csv_it_reads(run):
    csv = run.parent / "train.csv"  # backtest without a CSV reads the run's own
    before = csv.read_bytes()
    for refit in ((), ("--refit",)):
        result = invoke("backtest", run, "--out", csv, *refit)
        assert_error(result, f"--out {csv} is a file this command reads; write to another path")
    assert csv.read_bytes() == before


def test_predict_writes_through_a_symlinked_out(tmp_path, run):
    target, link = tmp_path / "real.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    link.symlink_to(target)
    result = invoke("predict", run, write_csv(tmp_path / "new.csv", hourly_rows(40)), "--out", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and len(pd.read_csv(target)) == 4


def test_predict_into_a_closed_pipe_exits_quietly(tmp_path, run):
    import subprocess
    import sys

    csv = write_csv(tmp_path / "new.csv", hourly_rows(40))
    proc = subprocess.Popen([sys.executable, "-m", "tsformer", "predict", str(run), str(csv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.close()  # like `| head` that has already exited
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Error" not in stderr and b"Traceback" not in stderr  # notes only


def test_day_first_dates_are_detected_even_when_sorted(tmp_path):
    stamps = pd.date_range("2024-01-01", periods=60, freq="D")
    rows = [f"{t:%d/%m/%Y},{i},{i % 7}" for i, t in enumerate(stamps)]
    csv = write_csv(tmp_path / "dd.csv", rows[5:] + rows[:5])  # unsorted (--sort is needed); 06/01 comes first
    frame = read_series(csv, DataConfig(sort=True))
    assert frame.timestamps[0] == stamps[0] and frame.freq == "D"
    assert frame.values[:, 0].tolist() == list(range(60))
    assert frame.notes == (
        "read the dates in 'date' as day/month: only that order gives regular, increasing timestamps "
        "(pass --dayfirst to say so and silence this note)",
    )
    assert read_series(csv, DataConfig(sort=True, dayfirst=True)).notes == ()


def test_ambiguous_dates_that_fit_neither_order_are_refused(tmp_path):
    rows = ["01/02/2024,1,1", "02/02/2024,2,2", "03/03/2024,3,3", "05/02/2024,4,4"]
    train_error(tmp_path, write_csv(tmp_path / "odd.csv", rows), "month/day or day/month", "--dayfirst")


def test_a_utc_offset_is_kept_in_the_forecast(tmp_path):
    rows = [f"{row.split(',')[0]}+02:00,{row.split(',', 1)[1]}" for row in hourly_rows()]
    csv = write_csv(tmp_path / "tz.csv", rows)
    out = tmp_path / "run"
    assert invoke("train", csv, "--out", out, *TINY).exit_code == 0
    result = invoke("predict", out, csv)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].startswith("2024-01-09 08:00:00+02:00,")  # one hour after the last row


def test_resume_refuses_options_it_would_ignore(tmp_path, run):
    for extra in (["--sort"], ["--data-dir", str(tmp_path)], ["--dayfirst"], ["--overwrite"]):
        result = invoke("train", "--resume", "--out", run, *extra)
        assert_error(
            result,
            f"--resume continues {run} with its saved config and data; drop {extra[0]} (keep --out, and the CSV where "
            "the data moved)",
        )
    result = invoke("train", "--resume", "--out", run, "--horizon", "6", "--id-col", "store", "--no-calendar")
    assert_error(result, "; drop --id-col, --no-calendar, --horizon (keep --out")  # the flags typed, not config keys
    result = invoke("train", "--resume", "--out", run, "--sort", "--overwrite")
    assert_error(result, "; drop --sort, --overwrite (keep --out")  # every flag to drop, --overwrite too


def test_dayfirst_leaves_iso_dates_alone(tmp_path):
    csv = write_csv(tmp_path / "iso.csv", hourly_rows())
    assert read_series(csv, DataConfig(dayfirst=True)).timestamps.equals(read_series(csv, DataConfig()).timestamps)


def test_ambiguous_dates_with_a_missing_month_are_read_with_a_gap(tmp_path):
    months = [m for m in pd.date_range("2020-01-01", periods=30, freq="MS") if m.month != 6 or m.year != 2021]
    rows = [f"{m:%d/%m/%Y},{i},{i % 3}" for i, m in enumerate(months)]  # 01/01/2020, 01/02/2020, ...
    frame = read_series(write_csv(tmp_path / "monthly.csv", rows), DataConfig())
    assert frame.freq == "MS" and frame.n_rows == 30 and not frame.observed[17].any()


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "missing.csv"],
        ["train", "{csv}", "--target", "nope"],
        ["train", "{text}"],
        ["predict", "{run}", "missing.csv"],
        ["evaluate", "missing_run"],
        ["check", "missing_run"],
    ],
    ids=["missing-file", "unknown-column", "not-numeric", "predict-missing-csv", "missing-run", "check-missing-run"],
)
def test_input_errors_come_before_torch_is_imported(tmp_path, run, argv):
    """A command's input errors are quick: reported before torch (over half a second to import) is loaded."""
    import subprocess
    import sys

    csv = write_csv(tmp_path / "ok.csv", hourly_rows(40))
    text = tmp_path / "text.csv"
    text.write_text("date,x\n2024-01-01 00:00,abc\n2024-01-01 01:00,def\n")
    argv = [a.format(csv=csv, text=text, run=run) for a in argv]
    probe = (
        "import sys\nfrom tsformer.cli import app\n"
        f"try:\n    app({argv!r}, prog_name='tsformer')\nexcept SystemExit as exit:\n"
        "    print(exit.code, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout.strip() == "2 False", done.stdout + done.stderr
    assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1


def test_a_time_limit_that_is_not_a_duration(tmp_path, tiny_csv):
    train_error(tmp_path, tiny_csv, "--time-limit 'soon' is not a duration", "15m", extra=("--time-limit", "soon"))
    train_error(tmp_path, tiny_csv, "--time-limit must be a positive duration", extra=("--time-limit", "0"))


def test_every_flag_spelling_resume_names_is_an_option_of_train():
    from typer.main import get_command

    from tsformer.cli import FLAG_SPELLINGS

    train_command = get_command(app).commands["train"]
    options = {opt for param in train_command.params for opt in param.opts}
    assert {flag for key, flag in FLAG_SPELLINGS.items() if key != "path"} <= options


def test_a_bare_file_name_found_nowhere_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TSFORMER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TSFORMER_CACHE_DIR", str(tmp_path / "cache"))
    result = invoke("train", "ETTh1.csv", "--horizon", "24")
    assert_error(result, "file ETTh1.csv not found here or in the data directories", str(tmp_path / "data"))
    assert "tsformer datasets fetch etth1" in result.stderr


def test_a_rank_whose_peer_stopped_says_so_in_one_line_and_other_errors_still_surface(tmp_path, monkeypatch):
    """Under torchrun, when rank 0 fails alone (a full disk), rank 1's next collective raised gloo's RuntimeError
    and printed a whole traceback beside rank 0's one Error line."""
    import tsformer.train as training

    csv = write_csv(tmp_path / "data.csv", hourly_rows())
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")

    def peer_gone(*args, **kwargs):
        raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [::1]:1")

    monkeypatch.setattr(training, "train", peer_gone)
    result = invoke("train", csv, "--out", tmp_path / "run", *TINY)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip() == (
        "Error (rank 1 of 2): another process of this torchrun job stopped (its own Error line says why), so this "
        "one stopped too"
    )

    def a_bug(*args, **kwargs):
        raise RuntimeError("shape mismatch")  # not a peer's leaving: the traceback still shows

    monkeypatch.setattr(training, "train", a_bug)
    assert str(invoke("train", csv, "--out", tmp_path / "run", *TINY).exception) == "shape mismatch"

import pandas as pd
import pytest
from helpers import TINY_FLAGS
from typer.testing import CliRunner

from tsformer.cli import app

runner = CliRunner()


@pytest.mark.parametrize("command", ["train", "evaluate", "predict", "check"])
def test_every_command_has_help_with_an_example(command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "Example: tsformer" in result.output


def test_train_evaluate_predict_check(tiny_csv, tmp_path):
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_csv), "--out", str(run), "--quiet", *TINY_FLAGS])
    assert result.exit_code == 0, result.output
    assert "best validation MSE" in result.output

    result = runner.invoke(app, ["evaluate", str(run)])
    assert result.exit_code == 0, result.output
    assert "test windows: 45" in result.output and "repeat_last" in result.output

    out = tmp_path / "forecast.csv"
    result = runner.invoke(
        app, ["predict", str(run), str(tiny_csv), "--out", str(out), "--plot", str(tmp_path / "f.png")]
    )
    assert result.exit_code == 0, result.output
    forecast = pd.read_csv(out)
    assert list(forecast.columns) == ["date", "a", "b"] and len(forecast) == 4
    assert forecast["date"][0] == "2024-01-11 00:00:00"
    assert (tmp_path / "f.png").stat().st_size > 1000

    result = runner.invoke(app, ["check", str(run)])
    assert result.exit_code == 0, result.output
    assert "all 7 checks passed" in result.output and "FAIL" not in result.output


def test_predict_to_stdout(tiny_csv, tmp_path):
    run = tmp_path / "run"
    runner.invoke(app, ["train", str(tiny_csv), "--out", str(run), "--quiet", *TINY_FLAGS, "--target", "b"])
    result = runner.invoke(app, ["predict", str(run), str(tiny_csv)])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "date,b" and len(result.stdout.splitlines()) == 5


def test_config_file_with_flag_and_set_overrides(tiny_csv, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"data:\n  path: {tiny_csv}\nmodel:\n  horizon: 8\n  d_model: 64\n")
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--quiet", *TINY_FLAGS])
    assert result.exit_code == 0, result.output
    saved = (run / "config.yaml").read_text()
    assert "horizon: 4" in saved and "d_model: 8" in saved  # flags and --set beat the file


def test_domain_errors_are_one_line_with_exit_code_2(tmp_path):
    result = runner.invoke(app, ["train", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert result.output.strip().startswith("Error: file")
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()


def test_unwritable_outputs_are_one_line_errors(tiny_csv, tmp_path):
    run = tmp_path / "run"
    runner.invoke(app, ["train", str(tiny_csv), "--out", str(run), "--quiet", *TINY_FLAGS])
    result = runner.invoke(app, ["predict", str(run), str(tiny_csv), "--out", str(tmp_path / "no" / "f.csv")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("Error: --out") and "does not exist" in result.output
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(app, ["train", str(tiny_csv), "--out", str(blocker / "run"), "--quiet", *TINY_FLAGS])
    assert result.exit_code == 2 and result.output.startswith("Error: ") and "Traceback" not in result.output

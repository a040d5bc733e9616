import pandas as pd
import pytest
from helpers import TINY_FLAGS, layout_of
from typer.testing import CliRunner

from tsformer.cli import app
from tsformer.predictor import load_predictor

runner = CliRunner()


@pytest.mark.parametrize(
    "command", ["train", "evaluate", "predict", "check", "bench", "datasets list", "datasets fetch"]
)
def test_every_command_has_help_with_an_example(command):
    result = runner.invoke(app, [*command.split(), "--help"], prog_name="tsformer")
    assert result.exit_code == 0, result.output
    assert f"Usage: tsformer {command} [OPTIONS]" in result.output
    assert f"Example: tsformer {command}" in result.output


def test_the_version_is_printed():
    import tsformer

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"tsformer {tsformer.__version__}"


def test_the_process_ends_without_the_interpreters_teardown_once_the_command_is_done(tmp_path):
    """main() flushes, runs the exit handlers and ends the process with the command's status (os._exit), so a
    command does not wait a second more for torch's modules to be torn down."""
    import subprocess
    import sys

    probe = (
        "import atexit, os, sys\nfrom tsformer import cli\n"
        "atexit.register(lambda: print('exit handler ran'))\n"
        "os._exit = lambda code: (print('os._exit', code), sys.stdout.flush(), os.kill(os.getpid(), 9))\n"
        "sys.argv = ['tsformer', *sys.argv[1:]]\ncli.main()\nprint('teardown reached')"
    )
    version = subprocess.run([sys.executable, "-c", probe, "--version"], capture_output=True, text=True)
    assert version.stdout.splitlines()[1:] == ["exit handler ran", "os._exit 0"], version.stdout
    missing = subprocess.run([sys.executable, "-c", probe, "evaluate", str(tmp_path / "none")], capture_output=True,
                             text=True)  # fmt: skip
    assert missing.stdout.splitlines() == ["exit handler ran", "os._exit 2"] and missing.stderr.startswith("Error: ")
    for argv, status in ((["--version"], 0), (["evaluate", str(tmp_path / "none")], 2)):  # the real exit, unpatched
        done = subprocess.run([sys.executable, "-m", "tsformer", *argv], capture_output=True, text=True)
        assert done.returncode == status and (done.stdout if status == 0 else done.stderr).strip(), done


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (2, 2), (130, 130), ("stopped", 1)])
def test_exit_status_follows_sys_exit(code, status, capsys):
    from tsformer.cli import exit_status

    assert exit_status(code) == status
    assert capsys.readouterr().err == ("stopped\n" if code == "stopped" else "")


def test_train_evaluate_predict_check(tiny_csv, tmp_path):
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_csv), "--out", str(run), "--quiet", *TINY_FLAGS])
    assert result.exit_code == 0, result.output
    assert "best validation MSE" in result.output
    # 240 rows split 70/10/20: validation rows 168..191, windows of 4 steps after 16 of context there: 21
    assert "over 21 validation windows, on which every choice below was made" in result.output

    result = runner.invoke(app, ["evaluate", str(run)])
    assert result.exit_code == 0, result.output
    assert "test windows: 45" in result.output and "repeat_last" in result.output

    out = tmp_path / "forecast.csv"
    result = runner.invoke(
        app, ["predict", str(run), str(tiny_csv), "--out", str(out), "--plot", str(tmp_path / "f.png")]
    )
    assert result.exit_code == 0, result.output
    forecast = pd.read_csv(out)
    assert list(forecast.columns)[:2] == ["date", "a"] and "b_upper_95" in forecast.columns and len(forecast) == 4
    assert forecast["date"][0] == "2024-01-11 00:00:00"
    assert (tmp_path / "f.png").stat().st_size > 1000

    result = runner.invoke(app, ["check", str(run)])
    assert result.exit_code == 0, result.output
    # with predict/origin, linear/rows and linear/choice, choices/settings, train/epoch, train/windows,
    # evaluate/scales, data/roles and data/static, and model/bfloat16 where
    # the run trained in bfloat16 (auto: on a CPU that computes it)
    n_checks = 29 if load_predictor(run / "model.pt").config.model.precision == "bfloat16" else 28
    assert "PASS  linear/rows" in result.output and "PASS  linear/choice" in result.output
    assert "PASS  choices/settings" in result.output and "PASS  train/epoch" in result.output
    assert f"all {n_checks} checks passed" in result.output and "FAIL" not in result.output


def test_predict_to_stdout(tiny_csv, tmp_path):
    run = tmp_path / "run"
    runner.invoke(app, ["train", str(tiny_csv), "--out", str(run), "--quiet", *TINY_FLAGS, "--target", "b"])
    result = runner.invoke(app, ["predict", str(run), str(tiny_csv)])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "date,b,b_lower_80,b_upper_80,b_lower_95,b_upper_95,forecaster"
    assert len(result.stdout.splitlines()) == 5


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


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny run shared by the --csv tests: (run folder, its training CSV)."""
    from helpers import make_frame, write_csv

    root = tmp_path_factory.mktemp("cli_run")
    csv = write_csv(root / "train.csv", make_frame())
    result = runner.invoke(app, ["train", str(csv), "--out", str(root / "run"), "--quiet", *TINY_FLAGS])
    assert result.exit_code == 0, result.output
    return root / "run", csv


def _changed_training_rows(csv, out):
    """A copy of `csv` with one value in the training rows (0..167) changed."""
    frame = pd.read_csv(csv)
    frame.loc[10, "a"] += 5.0
    frame.to_csv(out, index=False)
    return out


def test_evaluate_with_csv_copy_gives_the_same_metrics_and_refuses_other_training_rows(trained, tmp_path):
    import json
    import shutil

    run, csv = trained
    result = runner.invoke(app, ["evaluate", str(run)])
    assert result.exit_code == 0, result.output
    own = json.loads((run / "metrics.json").read_text())
    copy = shutil.copy(csv, tmp_path / "copy.csv")
    result_copy = runner.invoke(app, ["evaluate", str(run), "--csv", str(copy)])
    assert result_copy.exit_code == 0, result_copy.output
    assert result_copy.output == result.output
    assert json.loads((run / "metrics.json").read_text()) == own
    frame = pd.read_csv(csv)
    later = frame.tail(5).assign(date=pd.to_datetime(frame["date"].iloc[-1]) + pd.to_timedelta(range(1, 6), "h"))
    longer = tmp_path / "longer.csv"  # 5 more rows than the run's test split reaches: said second, before any figure
    pd.concat([frame, later.assign(date=later["date"].astype(str))]).to_csv(longer, index=False)
    result_longer = runner.invoke(app, ["evaluate", str(run), "--csv", str(longer)])
    assert result_longer.output.splitlines()[1].startswith("5 rows after the test split are not scored")

    other = _changed_training_rows(csv, tmp_path / "other.csv")
    result = runner.invoke(app, ["evaluate", str(run), "--csv", str(other)])
    assert result.exit_code == 2
    assert result.output.startswith("Error: ") and len(result.output.splitlines()) == 1
    assert f"the training rows of {other} differ" in result.output


def test_check_with_csv_copy_passes_and_refuses_other_training_rows(trained, tmp_path):
    import shutil

    run, csv = trained
    copy = shutil.copy(csv, tmp_path / "copy.csv")
    result = runner.invoke(app, ["check", str(run), "--csv", str(copy)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("all ") and "FAIL" not in result.output
    assert result.output == runner.invoke(app, ["check", str(run)]).output  # the same checks, the same values

    other = _changed_training_rows(csv, tmp_path / "other.csv")
    result = runner.invoke(app, ["check", str(run), "--csv", str(other)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: ") and len(result.output.splitlines()) == 1
    assert str(other) in result.output and "PASS" not in result.output


def test_check_without_the_data_says_which_checks_it_skipped(trained, tmp_path):
    import shutil

    _, csv = trained
    gone = shutil.copy(csv, tmp_path / "gone.csv")
    trained_run = runner.invoke(app, ["train", str(gone), "--out", str(tmp_path / "run"), "--quiet", *TINY_FLAGS])
    assert trained_run.exit_code == 0, trained_run.output
    gone.unlink()  # the run's data is no longer where it was read
    result = runner.invoke(app, ["check", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    skips = [line for line in result.output.splitlines() if line.startswith("SKIP  ")]
    assert len(skips) >= 5 and "forecasters/future" in "".join(skips) and "choices/validation" in "".join(skips)
    assert any(line.startswith("SKIP  data/*") for line in skips)  # the data checks, absent before
    lines = result.output.splitlines()
    forward, origin = next(x for x in lines if "model/forward" in x), next(x for x in skips if "backtest/origin" in x)
    assert forward.index("outputs at or before") == origin.index("no data") == 6 + 16 + 1 + 18 + 2  # one column
    assert not any(line.startswith("PASS") and "no data" in line for line in result.output.splitlines())
    n_passed = sum(line.startswith("PASS  ") for line in result.output.splitlines())
    assert result.output.splitlines()[-1] == (
        f"{n_passed} checks passed, {len(skips)} skipped (not run, so they prove nothing; see SKIP)"
    )
    assert "all " not in result.output


def _spy_first_training_step(monkeypatch) -> dict:
    """Record the first training step: weights before it, its context, its target and the loss it returned."""
    import copy

    from tsformer.model import Forecaster

    first: dict = {}
    forward = Forecaster.forward

    def recording_forward(self, x, observed=None, target=None, target_observed=None, covariates=None):
        state = copy.deepcopy(self.state_dict()) if target is not None and not first else None
        out = forward(self, x, observed, target, target_observed, covariates)
        if state is not None:
            first.update(state=state, context=x.detach().clone(), target=target.detach().clone(), loss=out[1].item())
        return out

    monkeypatch.setattr(Forecaster, "forward", recording_forward)
    return first


@pytest.mark.parametrize("all_positions", [True, False])
def test_training_loss_is_the_mse_of_the_forecasts_the_setting_names(all_positions, tmp_path, monkeypatch):
    """train.all_positions: every token's forecast against the horizon after its patch, or the last token's only."""
    import torch
    from helpers import make_frame, write_csv

    from tsformer.data import training_data
    from tsformer.model import Forecaster
    from tsformer.predictor import load_predictor

    csv = write_csv(tmp_path / "data.csv", make_frame())
    first = _spy_first_training_step(monkeypatch)
    flags = ["--set", f"train.all_positions={str(all_positions).lower()}", "--set", "model.dropout=0"]
    flags += ["--set", "data.calendar=false"]  # the windows hold the targets alone
    result = runner.invoke(app, ["train", str(csv), "--out", str(tmp_path / "run"), "--quiet", *TINY_FLAGS, *flags])
    assert result.exit_code == 0, result.output

    cfg = load_predictor(tmp_path / "run" / "model.pt").config
    assert cfg.train.all_positions is all_positions
    windows = training_data(cfg).windows("train")  # (149, 20, 2): context 16, horizon 4
    index = {w[:16].numpy().tobytes(): i for i, w in enumerate(windows)}
    batch = windows[[index[c.numpy().tobytes()] for c in first["context"]]]  # the step's whole windows
    model = Forecaster(cfg.model, layout_of(2))
    model.load_state_dict(first["state"])  # the weights the step started from
    tokens = model.forecast_tokens(batch[:, :16])  # (B, 4 tokens, 4, 2); patches end at steps 4, 8, 12, 16
    if all_positions:  # token k forecasts steps 4(k+1) .. 4(k+1)+3 of the window
        expected_target = torch.stack([batch[:, 4 * (k + 1) : 4 * (k + 1) + 4] for k in range(4)], dim=1)
        by_hand = (tokens - expected_target).square().mean().item()
    else:
        expected_target = batch[:, 16:]
        by_hand = (tokens[:, -1] - expected_target).square().mean().item()
    assert torch.equal(first["target"], expected_target)
    assert first["loss"] == pytest.approx(by_hand, rel=1e-5)
    last_only = (tokens[:, -1] - batch[:, 16:]).square().mean().item()
    all_tokens = (tokens - torch.stack([batch[:, 4 * k + 4 : 4 * k + 8] for k in range(4)], dim=1)).square().mean()
    assert abs(last_only - all_tokens.item()) > 1e-3  # the two settings really train on different losses

    val = training_data(cfg).windows("val")
    best = load_predictor(tmp_path / "run" / "model.pt").model
    val_mse = [(m.predict(val[:, :16]) - val[:, 16:]).square().mean().item() for m in (model, best)]
    assert val_mse[1] < 0.9 * val_mse[0]  # and each trains: validation MSE well below the starting weights'


def test_another_rank_of_a_torchrun_says_which_it_is_in_its_error(tiny_csv, monkeypatch):
    result = runner.invoke(app, ["train", str(tiny_csv), "--target", "nope"])
    assert result.exit_code == 2 and result.output.startswith("Error: target column 'nope' not in")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    result = runner.invoke(app, ["train", str(tiny_csv), "--target", "nope"])
    assert result.exit_code == 2 and result.output.startswith("Error (rank 1 of 2): target column 'nope' not in")


def test_train_reads_the_csv_once_and_its_notes_name_the_flags(tiny_csv, tmp_path, monkeypatch):
    """The command reads the file before torch loads (a quick error) and trains on what it read; its notes
    name the command's flags (the Python API's name keywords: tests/test_api.py)."""
    import tsformer.data.prepare as prepare

    def read_again(*args, **kwargs):
        raise AssertionError("the CSV was read a second time")

    monkeypatch.setattr(prepare, "read_series", read_again)
    sized = TINY_FLAGS[TINY_FLAGS.index("--horizon") :]  # the context and patch chosen from the data
    sized = [flag for flag in sized if flag != "model.patch_len=4"]
    sized = [flag for i, flag in enumerate(sized) if not (flag == "--set" and sized[i + 1].startswith("--"))]
    result = runner.invoke(app, ["train", str(tiny_csv), *sized, "--out", str(tmp_path / "run"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "set them with --context-len / --set model.patch_len=N" in result.output

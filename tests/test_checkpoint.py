import pytest
import torch
from helpers import tiny_config

from tsformer.checkpoint import save_predictor
from tsformer.errors import CheckpointError
from tsformer.predictor import load_predictor
from tsformer.runs import predict_run
from tsformer.train import train


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    from helpers import make_frame, write_csv

    root = tmp_path_factory.mktemp("ckpt")
    csv = write_csv(root / "data.csv", make_frame())
    train(tiny_config(csv), root / "run", show_progress=False)
    return root / "run", csv


def test_round_trip_gives_identical_forecasts(trained_run, tmp_path):
    run, csv = trained_run
    ckpt = load_predictor(run / "model.pt")
    save_predictor(ckpt, tmp_path / "copy.pt")
    again = load_predictor(tmp_path / "copy.pt")
    assert again.config == ckpt.config and again.layout == ckpt.layout and again.layout.targets == ("a", "b")
    assert again.freq == "h" and again.fallback == ckpt.fallback and again.summary == ckpt.summary
    assert again.data_fingerprint["last"] == "2024-01-10 23:00:00" and again.data_fingerprint["rows"] == 240
    for name, tensor in ckpt.model.state_dict().items():
        assert torch.equal(tensor, again.model.state_dict()[name])
    assert torch.equal(again.calibration.widths, ckpt.calibration.widths)
    assert predict_run(run, csv).frame.equals(predict_run(tmp_path / "copy.pt", csv).frame)


def test_save_leaves_no_temporary_files(trained_run, tmp_path):
    run, _ = trained_run
    save_predictor(load_predictor(run / "model.pt"), tmp_path / "m.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


def test_truncated_and_foreign_files_are_refused(trained_run, tmp_path):
    run, _ = trained_run
    data = (run / "model.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a loadable tsformer checkpoint"):
        load_predictor(tmp_path / "cut.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="is not a tsformer checkpoint"):
        load_predictor(tmp_path / "other.pt")
    (tmp_path / "data.csv").write_text("date,y\n2024-01-01,1\n")  # data where a run was meant: `evaluate data.csv`
    with pytest.raises(CheckpointError, match=r"data.csv is a text file \(data\?\), not a trained run: give the run"):
        load_predictor(tmp_path / "data.csv")


def test_a_full_disk_while_saving_is_an_os_error_naming_the_checkpoint(trained_run, tmp_path, monkeypatch):
    """torch's zip writer would say RuntimeError; the checkpoint is serialised first, so the write says ENOSPC."""
    import errno
    import os

    import tsformer.files as files_module

    run, _ = trained_run
    ckpt = load_predictor(run / "model.pt")
    path = tmp_path / "m.pt"
    save_predictor(ckpt, path)
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files_module.os, "fsync", disk_full)
    with pytest.raises(OSError) as caught:
        save_predictor(ckpt, path)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


def test_a_format_8_run_calibrated_by_a_calibration_model_still_reads(trained_run, tmp_path):
    """Format 8 stored train.interval_calibration and whose errors calibrated the intervals; both are dropped on
    reading (the intervals hold as calibrated), and the run has no final model."""
    run, csv = trained_run
    payload = torch.load(run / "model.pt", weights_only=True)
    payload["format_version"] = 8
    payload["config"]["train"]["interval_calibration"] = "refit"
    payload["calibration"] |= {"method": "refit", "refit_borders": payload["borders"]}
    del payload["final"]
    torch.save(payload, tmp_path / "old.pt")
    old = load_predictor(tmp_path / "old.pt")
    assert old.final is None and torch.equal(old.calibration.widths, load_predictor(run).calibration.widths)
    assert predict_run(tmp_path / "old.pt", csv).frame.equals(predict_run(run, csv).frame)


def test_a_format_10_run_with_the_least_squares_start_key_reads_without_a_linear_candidate(trained_run, tmp_path):
    run, csv = trained_run
    payload = torch.load(run / "model.pt", weights_only=True)
    payload["format_version"] = 10
    payload["config"]["train"]["least_squares_start"] = True
    payload.pop("linear")
    torch.save(payload, tmp_path / "old.pt")
    old = load_predictor(tmp_path / "old.pt")
    assert old.linear is None and old.config == load_predictor(run).config
    assert predict_run(tmp_path / "old.pt", csv).frame.equals(predict_run(run, csv).frame)


def test_a_format_9_fallback_of_names_reads_as_weights(trained_run, tmp_path):
    """Format 9 stored one forecaster's name per series and column; each reads as its weights (a blend: half the
    model's, half its candidate's), and forecasts as that forecaster did."""
    run, csv = trained_run
    payload = torch.load(run / "model.pt", weights_only=True)
    payload["format_version"] = 9
    payload["fallback"] = [["blend_seasonal_naive", "repeat_last"]]
    torch.save(payload, tmp_path / "old.pt")
    old = load_predictor(tmp_path / "old.pt").fallback
    weights = {name: old.values[0, :, k].tolist() for k, name in enumerate(old.names)}
    assert weights["model"] == [0.5, 0.0] and weights["seasonal_naive"] == [0.5, 0.0]
    assert weights["repeat_last"] == [0.0, 1.0] and old.choice == (("blend_seasonal_naive", "repeat_last"),)
    payload["fallback"] = [["arima", "model"]]
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match="fallback must name one of model"):
        load_predictor(tmp_path / "bad.pt")

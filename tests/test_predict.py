import numpy as np
import pandas as pd
import pytest
from helpers import make_frame, tiny_config, write_csv

from tsformer.checkpoint import load_checkpoint
from tsformer.errors import DataError
from tsformer.predict import predict
from tsformer.train import train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    csv = write_csv(root / "data.csv", make_frame())
    train(tiny_config(csv), root / "run", show_progress=False)
    return root / "run"


def test_forecast_continues_the_timestamps_in_original_units(run, tmp_path):
    frame = make_frame(100)
    frame[["a", "b"]] = frame[["a", "b"]] * 1000 + 5000
    forecast = predict(run, write_csv(tmp_path / "h.csv", frame))
    assert list(forecast.columns) == ["a", "b"]
    assert forecast.index[0] == pd.Timestamp("2024-01-05 04:00") and len(forecast) == 4
    assert (forecast.index.to_series().diff().dropna() == pd.Timedelta("1h")).all()
    ckpt = load_checkpoint(run / "model.pt")
    # the model works on scaled values; the output is back in the CSV's units
    assert np.abs(forecast.to_numpy() - ckpt.scaler.mean).max() > 100


def test_history_shorter_than_the_context_is_padded(run, tmp_path):
    forecast = predict(run, write_csv(tmp_path / "short.csv", make_frame(5)))
    assert forecast.shape == (4, 2) and np.isfinite(forecast.to_numpy()).all()


def test_columns_must_match_the_checkpoint(run, tmp_path):
    frame = make_frame(50).rename(columns={"b": "c"})
    with pytest.raises(DataError, match="does not match the model"):
        predict(run, write_csv(tmp_path / "other.csv", frame))


def test_frequency_must_match_the_checkpoint(run, tmp_path):
    with pytest.raises(DataError, match="frequency"):
        predict(run, write_csv(tmp_path / "daily.csv", make_frame(50, freq="D")))

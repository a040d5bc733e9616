"""The benchmark scripts end to end on tiny synthetic files of the real ones' shapes (one epoch, one thread):
a script that breaks fails here, not at its next `make bench-*` (make bench-electricity stopped at its first
variant for a whole session, unseen)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
# one epoch, one member, one thread, and no ETS or Theta (their fit to every validation window is most of the time)
TINY = [
    *("--set", "train.epochs=1", "--set", "train.num_threads=1", "--set", "model.members=1"),
    *("--set", "train.candidates=[repeat_last,seasonal_naive,linear]"),
]


def _hourly_panel(ids: list[str], n_rows: int, seed: int, start: str = "2016-10-22") -> pd.DataFrame:
    """Daily-cycle series with noise, one block of rows per id, in long format."""
    rng = np.random.default_rng(seed)
    ds = pd.date_range(start, periods=n_rows, freq="h")
    hour = np.asarray(ds.hour)
    frames = [
        pd.DataFrame(
            {
                "unique_id": uid,
                "ds": ds,
                "y": 50 + 10 * i + 8 * np.sin(2 * np.pi * hour / 24) + rng.normal(0, 1, n_rows),
            }
        )
        for i, uid in enumerate(ids)
    ]
    return pd.concat(frames, ignore_index=True)


def _run(script: str, *args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def test_electricity_script_runs_every_variant(tmp_path):
    markets = _hourly_panel(["BE", "DE", "FR", "NP"], 24 * 42, seed=0)
    rng = np.random.default_rng(1)
    markets["Exogenous1"] = 1000 + 100 * markets["y"] + rng.normal(0, 5, len(markets))
    markets["Exogenous2"] = 800 + rng.normal(0, 5, len(markets))
    future = _hourly_panel(["BE", "DE", "FR", "NP"], 24, seed=2, start="2016-12-03").drop(columns="y")
    future["Exogenous1"], future["Exogenous2"] = 6000.0, 800.0
    markets.to_csv(tmp_path / "electricity-short-with-ex-vars.csv", index=False)
    future.to_csv(tmp_path / "electricity-short-future-ex-vars.csv", index=False)
    out = _run(
        "electricity.py", "--data-dir", str(tmp_path), "--runs-dir", str(tmp_path / "runs"), "--no-write", *TINY,
        cwd=tmp_path,
    )  # fmt: skip
    for variant in ("no covariates", "calendar only", "calendar + Exogenous1/2"):
        assert f"{variant}: MAE" in out


def test_m4_script_scores_the_test_file(tmp_path):
    ids = ["H1", "H2", "H3"]
    whole = _hourly_panel(ids, 400 + 48, seed=3, start="2000-01-01")
    is_test = whole.groupby("unique_id").cumcount() >= 400
    whole[~is_test].to_csv(tmp_path / "m4_hourly_train.csv", index=False)
    whole[is_test].to_csv(tmp_path / "m4_hourly_test.csv", index=False)
    out = _run(
        "m4_hourly.py", "--data-dir", str(tmp_path), "--runs-dir", str(tmp_path / "runs"), "--no-write", *TINY,
        cwd=tmp_path,
    )  # fmt: skip
    forecast = pd.read_csv(tmp_path / "runs" / "m4_hourly" / "forecast.csv")
    assert forecast.groupby("unique_id").size().to_dict() == dict.fromkeys(ids, 48)
    assert "smape" in out.lower()

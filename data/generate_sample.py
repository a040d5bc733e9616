"""Make data/sample.csv: hourly series with daily and weekly cycles, trend and noise (fixed seed).

Run: python data/generate_sample.py   (rewrites data/sample.csv byte for byte)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

SEED = 20261129
N_ROWS = 24 * 7 * 16  # 16 weeks of hours


def make_sample(n_rows: int = N_ROWS, seed: int = SEED) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(n_rows)
    day = 2 * np.pi * t / 24
    week = 2 * np.pi * t / (24 * 7)
    weekend = ((t // 24) % 7 >= 5).astype(float)

    def ar_noise(scale: float, phi: float = 0.8) -> np.ndarray:
        shocks = rng.normal(0, scale, n_rows)
        out = np.empty(n_rows)
        out[0] = shocks[0]
        for i in range(1, n_rows):
            out[i] = phi * out[i - 1] + shocks[i]
        return out

    load = (
        50 + 0.004 * t + 12 * np.sin(day - 1.2) + 4 * np.sin(2 * day) - 8 * weekend + 3 * np.sin(week) + ar_noise(1.5)
    )
    solar = np.clip(10 * np.sin(day - np.pi / 2), 0, None) * (1 + 0.2 * np.sin(week / 3)) + ar_noise(0.6, 0.5)
    temperature = 20 + 6 * np.sin(day - 2.0) + 0.3 * np.roll(load - load.mean(), 3) + ar_noise(0.8, 0.9)
    return pd.DataFrame(
        {
            "date": pd.date_range("2024-01-01", periods=n_rows, freq="h").strftime("%Y-%m-%d %H:%M:%S"),
            "load": load.round(3),
            "solar": solar.round(3),
            "OT": temperature.round(3),
        }
    )


if __name__ == "__main__":
    path = Path(__file__).with_name("sample.csv")
    make_sample().to_csv(path, index=False)
    print(f"wrote {path}")

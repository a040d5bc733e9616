"""Real single series for `make bench-single`: write each as a CSV with its last horizon hidden, and the peers'
forecasts of that horizon (statsforecast's AutoETS and AutoTheta, seasonal naive).

Runs in the peers' environment (benchmarks/peers/requirements.txt: statsforecast, which brings statsmodels,
whose bundled datasets are most of the series, and matplotlib's sample stock prices). The series:

| name | source | frequency | horizon (M4's for the frequency) |
|---|---|---|---|
| ili | ../shared/data/national_illness.csv, column OT | weekly | 13 |
| co2 | statsmodels co2 (Mauna Loa, 59 missing weeks) | weekly | 13 |
| sunspots | statsmodels sunspots | yearly | 6 |
| nile | statsmodels nile | yearly | 6 |
| realgdp, unemp | statsmodels macrodata | quarterly | 8 |
| rate | statsmodels interest_inflation, R | quarterly | 8 |
| elnino | statsmodels elnino (sea temperature, months of each year) | monthly | 18 |
| sp500 | matplotlib's Stocks.csv, ^GSPC (month starts) | monthly | 18 |
| goog | matplotlib's goog.npz, close | business days | 14 |

Writes into --out: `<name>.csv` (the visible rows: date, value), `<name>_truth.csv` (the hidden horizon) and
`peers.json` (each peer's forecast, the season, the fit wall time). The peers see the visible rows only;
AutoETS and AutoTheta take the missing weeks of co2 forward-filled (they accept no gaps).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

HORIZONS = {"W": 13, "YS": 6, "QS": 8, "MS": 18, "B": 14}
SEASONS = {"W": 52, "YS": 1, "QS": 4, "MS": 12, "B": 5}


def series(data_dir: Path) -> dict[str, tuple[pd.Series, str]]:
    """name -> (values indexed by timestamp, frequency)."""
    import matplotlib.cbook
    import statsmodels.api as sm

    out: dict[str, tuple[pd.Series, str]] = {}
    ili = pd.read_csv(data_dir / "national_illness.csv", parse_dates=["date"]).set_index("date")["OT"]
    out["ili"] = (ili, "W")
    co2 = sm.datasets.co2.load_pandas().data["co2"]
    out["co2"] = (co2, "W")
    sunspots = sm.datasets.sunspots.load_pandas().data
    out["sunspots"] = (_yearly(sunspots["YEAR"], sunspots["SUNACTIVITY"]), "YS")
    nile = sm.datasets.nile.load_pandas().data
    out["nile"] = (_yearly(nile["year"], nile["volume"]), "YS")
    macro = sm.datasets.macrodata.load_pandas().data
    for column in ("realgdp", "unemp"):
        out[column] = (_quarterly(macro, column), "QS")
    rates = sm.datasets.interest_inflation.load_pandas().data
    out["rate"] = (_quarterly(rates, "R"), "QS")
    elnino = sm.datasets.elnino.load_pandas().data
    months = elnino.drop(columns="YEAR").to_numpy().reshape(-1)  # year after year, January to December
    start = f"{int(elnino['YEAR'].iloc[0])}-01-01"
    out["elnino"] = (pd.Series(months, index=pd.date_range(start, periods=len(months), freq="MS")), "MS")
    sample = Path(matplotlib.cbook._get_data_path("sample_data"))
    stocks = pd.read_csv(sample / "Stocks.csv", comment="#", parse_dates=["Date"]).set_index("Date")["^GSPC"]
    out["sp500"] = (stocks[stocks.index.day == 1].dropna(), "MS")  # month starts (its last row is a mid-month close)
    goog = np.load(sample / "goog.npz")["price_data"]
    out["goog"] = (pd.Series(goog["close"], index=pd.DatetimeIndex(goog["date"])), "B")
    return out


def _quarterly(table: pd.DataFrame, column: str) -> pd.Series:
    """A column of a table with year and quarter columns, on the quarters' first days."""
    years, quarters = table["year"].astype(int), table["quarter"].astype(int)
    quarters = pd.PeriodIndex.from_fields(year=years, quarter=quarters, freq="Q")
    return pd.Series(table[column].to_numpy(), index=quarters.to_timestamp())


def _yearly(years: pd.Series, values: pd.Series) -> pd.Series:
    return pd.Series(values.to_numpy(), index=pd.to_datetime(years.astype(int).astype(str) + "-01-01"))


def peers(visible: pd.Series, horizon: int, season: int) -> dict[str, dict]:
    """Each peer's forecast of the `horizon` steps after `visible`, and its fit wall time."""
    from statsforecast import StatsForecast
    from statsforecast.models import AutoETS, AutoTheta, SeasonalNaive

    y = visible.ffill().to_numpy(dtype=float)
    frame = pd.DataFrame({"unique_id": "s", "ds": np.arange(len(y)), "y": y})
    out = {}
    for name, model in (
        ("AutoETS", AutoETS(season_length=season)),
        ("AutoTheta", AutoTheta(season_length=season)),
        ("SeasonalNaive", SeasonalNaive(season_length=season)),
    ):
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            forecast = StatsForecast(models=[model], freq=1, n_jobs=1).forecast(df=frame, h=horizon)
        column = [c for c in forecast.columns if c not in ("unique_id", "ds")][0]
        out[name] = {"forecast": forecast[column].tolist(), "seconds": round(time.perf_counter() - started, 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the CSVs and peers.json")
    parser.add_argument("--data-dir", help="folder holding national_illness.csv")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parents[2]
    data_dir = Path(args.data_dir or os.environ.get("TSFORMER_DATA_DIR") or repo.parent / "shared" / "data")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name, (values, freq) in series(data_dir).items():
        horizon, season = HORIZONS[freq], SEASONS[freq]
        values = values.sort_index()
        visible, hidden = values.iloc[:-horizon], values.iloc[-horizon:]
        pd.DataFrame({"date": visible.index, "value": visible.to_numpy()}).to_csv(out / f"{name}.csv", index=False)
        pd.DataFrame({"date": hidden.index, "value": hidden.to_numpy()}).to_csv(out / f"{name}_truth.csv", index=False)
        results[name] = {"freq": freq, "horizon": horizon, "season": season, "rows": len(visible)}
        results[name]["peers"] = peers(visible, horizon, season)
        print(f"{name}: {len(visible)} rows visible, horizon {horizon}, season {season}", flush=True)
    (out / "peers.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Automatic ETS and Theta from statsmodels, fitted to each window's context alone: the candidates `ets`, `theta`.

- ets: additive-error exponential smoothing, the lowest AICc of {no trend, damped additive trend} x {no
  season, additive season} (statsmodels' `ETSModel`; additive forms only, as the windows are standardised
  values, which may be negative);
- theta: the Theta method (statsmodels' `ThetaModel`: simple exponential smoothing plus half the linear
  trend, deseasonalised at the season when its own test finds one).

Each fit reads one window's context from its first observed step (forward-filled), never a later row, so
like every candidate it forecasts from any origin as it would after the data's end. A fit that fails or
gives a non-finite forecast (a context too short for the form, no convergence) gives repeat-last there.

statsmodels rather than statsforecast (AutoETS, AutoTheta), by measurement (benchmarks/NOTES.md, "ETS and
Theta"): statsforecast 2.0.3 fits 5-10 times faster, but its fugue dependency declares pandas<3, so pip
installs it beside tsformer's pandas 3 by downgrading pandas, and it adds about 770 MB; statsmodels adds
about 210 MB and no pin, and is imported only by runs that use these candidates. A fit costs about 0.015 s
(ets without a season, two forms) plus 0.016 s per step of the season (four forms with one) and 0.01 s
(theta) a window and column (`fit_seconds`), so `train` uses them automatically only where their fits are
estimated to take a few minutes of one core (`tsformer.data.choices`). The fits run in forked worker
processes, one per torch thread, each with one BLAS thread (threadpoolctl): 16 ETS fits of season 52 take
6.0 s on 2 cores, 12.0 s in one.
"""

from __future__ import annotations

import multiprocessing
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch
from threadpoolctl import threadpool_limits

CLASSICAL = ("ets", "theta")
MIN_ROWS = 4  # a context shorter than this (from its first observed step) gets repeat-last
MIN_FITS_PER_WORKER = 8  # fewer fits than this per extra process are run here (a fork costs more than a fit)
# one core's seconds a fit takes, as measured on the benchmark machine (benchmarks/NOTES.md, session 32): ETS's two
# forms without a season, the added cost per step of the season of its four forms with one, and Theta
ETS_FIT_S = 0.015
ETS_SEASON_STEP_S = 0.016
THETA_FIT_S = 0.01


def fit_seconds(names: tuple[str, ...], season: int, context_len: int) -> float:
    """One core's seconds to fit each of `names` (of CLASSICAL) to one window's column: the estimate `train`
    weighs before it makes ETS and Theta candidates (ETS's seasonal forms where `_ets_seasonal` has them)."""
    seasonal = _ets_seasonal(season, context_len)
    costs = {"ets": ETS_FIT_S + (ETS_SEASON_STEP_S * season if seasonal else 0.0), "theta": THETA_FIT_S}
    return sum(costs[name] for name in names)


def classical_forecasts(
    history: torch.Tensor, first: torch.Tensor, horizon: int, season: int, names: tuple[str, ...]
) -> dict[str, torch.Tensor]:
    """Each of `names` (of CLASSICAL) forecasting (N, H, C) from forward-filled contexts `history` (N, L, C),
    each column fit from its first observed step `first` (N, 1, C). The fits run in parallel processes, one
    per torch thread (`train.num_threads`, else every core), where there are enough of them."""
    _import_statsmodels()  # before silencing warnings (its import adds "always" filters) and before forking
    values = history.double().numpy()
    starts = first[:, 0].numpy()  # (N, C)
    n_windows, n_columns = starts.shape
    contexts = [values[n, starts[n, c] :, c] for n in range(n_windows) for c in range(n_columns)]
    jobs = [(y, season, horizon, names) for y in contexts]
    workers = min(torch.get_num_threads(), len(jobs) // MIN_FITS_PER_WORKER)
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=_fork_context(), initializer=_one_blas_thread) as pool:
            fitted = list(pool.map(_fit_all, jobs, chunksize=-(-len(jobs) // (4 * workers))))
    else:
        with threadpool_limits(limits=1, user_api="blas"):
            fitted = [_fit_all(job) for job in jobs]
    # (N * C, len(names), H) -> each name's (N, H, C)
    stacked = np.asarray(fitted, dtype=np.float64).reshape(n_windows, n_columns, len(names), horizon)
    return {
        name: torch.from_numpy(np.ascontiguousarray(stacked[:, :, i].transpose(0, 2, 1))).to(history.dtype)
        for i, name in enumerate(names)
    }


def _fit_all(job: tuple[np.ndarray, int, int, tuple[str, ...]]) -> list[np.ndarray]:
    """Every named forecaster's forecast from one column's context (in a worker process or in this one)."""
    y, season, horizon, names = job
    fits = {"ets": _ets, "theta": _theta}
    with warnings.catch_warnings():  # statsmodels warns on every hard fit; the forecast is checked instead
        warnings.simplefilter("ignore")
        return [_forecast(fits[name], y, season, horizon) for name in names]


def _one_blas_thread() -> None:
    """A worker's BLAS on one thread: the fits are small, and a BLAS pool per process would oversubscribe the
    cores (16 ETS fits of season 52 on 2 cores: 15.8 s in two processes with their BLAS threads, 6.0 s
    without; 12.0 s in one process)."""
    threadpool_limits(limits=1, user_api="blas")


def _fork_context():
    """Workers forked from this process (statsmodels already imported, nothing to pickle but the contexts);
    the platform's default where fork is unavailable."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else None)


def _import_statsmodels() -> None:
    """statsmodels' models, imported once (it takes about a second, so only runs that use them pay it)."""
    import statsmodels.tsa.exponential_smoothing.ets  # noqa: F401
    import statsmodels.tsa.forecasting.theta  # noqa: F401


def _forecast(fit, y: np.ndarray, season: int, horizon: int) -> np.ndarray:
    """fit(y, season, horizon), or repeat-last where the context is too short or the fit fails."""
    if len(y) >= MIN_ROWS and np.ptp(y) > 0:
        try:
            forecast = np.asarray(fit(y, season, horizon), dtype=np.float64)
            if forecast.shape == (horizon,) and np.isfinite(forecast).all():
                return forecast
        except (ValueError, np.linalg.LinAlgError, ZeroDivisionError, FloatingPointError, IndexError):
            pass
    return np.full(horizon, y[-1])


def _ets(y: np.ndarray, season: int, horizon: int) -> np.ndarray:
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    seasonal = _ets_seasonal(season, len(y))
    forms = [(trend, form) for trend in (False, True) for form in ((False, True) if seasonal else (False,))]
    best = None
    for damped_trend, with_season in forms:
        model = ETSModel(
            y,
            error="add",
            trend="add" if damped_trend else None,
            damped_trend=damped_trend,
            seasonal="add" if with_season else None,
            seasonal_periods=season if with_season else None,
        )
        try:
            result = model.fit(disp=False)
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.isfinite(result.aicc) and (best is None or result.aicc < best.aicc):
            best = result
    if best is None:
        raise ValueError("no ETS form could be fit")
    return best.forecast(horizon)


def _ets_seasonal(season: int, length: int) -> bool:
    """Whether ETS tries its seasonal forms on `length` steps: two seasons (and two steps) to estimate one."""
    return season > 1 and length >= 2 * season + 2


def _theta(y: np.ndarray, season: int, horizon: int) -> np.ndarray:
    from statsmodels.tsa.forecasting.theta import ThetaModel

    seasonal = season > 1 and len(y) >= 2 * season
    model = ThetaModel(y, period=season if seasonal else 1, deseasonalize=seasonal)
    return model.fit().forecast(horizon)

"""tsformer: forecast time series with a causal-masked Transformer, from Python or the command line.

    import tsformer
    predictor = tsformer.fit(df, horizon=24)      # df: wide (a time column, one per series) or long (unique_id, ds, y)
    forecast = predictor.predict()                # the next 24 steps after the data, with intervals
    report = predictor.evaluate()                 # metrics on the held-out test windows, beside naive baselines
    predictor.save("runs/x"); same = tsformer.load("runs/x")

`help(tsformer.fit)` and `help(tsformer.Predictor)` say the rest. The names are imported on first use, so
`import tsformer` (and the `tsformer` command) stays quick.
"""

from __future__ import annotations

from tsformer.lazy import lazy_names

__version__ = "0.1.0"

_PUBLIC = {
    "fit": "tsformer.api",
    "load": "tsformer.api",
    "Predictor": "tsformer.predictor",
    "read_series": "tsformer.data",
    "Config": "tsformer.config",
    "load_config": "tsformer.config",
    "TsformerError": "tsformer.errors",
    "DataError": "tsformer.errors",
    "ConfigError": "tsformer.errors",
    "CheckpointError": "tsformer.errors",
    "LeakageError": "tsformer.errors",
}
__all__ = ["__version__", *_PUBLIC]
__getattr__, __dir__ = lazy_names(globals(), _PUBLIC)

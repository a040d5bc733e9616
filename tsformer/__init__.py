"""tsformer: forecast time series from a CSV with a causal-masked Transformer."""

__version__ = "0.1.0"

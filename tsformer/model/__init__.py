"""The seed's formulas as small pieces, assembled into a causal forecaster."""

from tsformer.model.attention import MultiHeadAttention, attention_mask, causal_mask, scaled_dot_product
from tsformer.model.covariates import Covariates
from tsformer.model.encoding import PatchProjection, sinusoidal_encoding
from tsformer.model.ensemble import Ensemble, build_forecaster
from tsformer.model.forecaster import Block, Forecaster
from tsformer.model.inference import PREDICT_SEQUENCES, ForecasterBase
from tsformer.model.normalisation import instance_stats

__all__ = [
    "PREDICT_SEQUENCES",
    "Block",
    "Covariates",
    "Ensemble",
    "ForecasterBase",
    "Forecaster",
    "MultiHeadAttention",
    "PatchProjection",
    "attention_mask",
    "build_forecaster",
    "causal_mask",
    "instance_stats",
    "scaled_dot_product",
    "sinusoidal_encoding",
]

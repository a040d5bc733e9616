import dataclasses

import pytest
import torch
from helpers import layout_of, tiny_config

from tsformer.config import ModelConfig
from tsformer.errors import ConfigError
from tsformer.model import Forecaster, precision
from tsformer.train import train


def model_with(precision_name: str) -> Forecaster:
    torch.manual_seed(0)
    cfg = ModelConfig(context_len=48, horizon=8, patch_len=8, d_model=32, n_heads=4, d_ff=64, precision=precision_name)
    return Forecaster(cfg, layout_of(2), quantiles=(0.1, 0.9)).eval()


def test_auto_is_bfloat16_only_where_the_device_computes_it_natively(monkeypatch):
    cpu = torch.device("cpu")
    assert precision.resolve_precision("float32", cpu) == "float32"
    assert precision.resolve_precision("bfloat16", cpu) == "bfloat16"
    for native, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(precision, "native_bfloat16", lambda device, native=native: native)
        assert precision.resolve_precision("auto", cpu) == expected
    with pytest.raises(ConfigError, match="model.precision must be one of"):
        ModelConfig(precision="float16")


def test_a_bfloat16_model_runs_its_products_in_bfloat16_and_returns_float32():
    full, low = model_with("float32"), model_with("bfloat16")
    low.load_state_dict(full.state_dict())
    x = torch.randn(16, 48, 2)
    with torch.no_grad():
        (point, quantiles), (low_point, low_quantiles) = full.outputs_last(x), low.outputs_last(x)
        low_tokens = low.outputs_tokens(x)[0]
    assert low_point.dtype == low_quantiles.dtype == low_tokens.dtype == torch.float32
    difference = (low_point - point).abs().max().item()
    assert 0 < difference < 0.05 * point.abs().max().item()  # bfloat16's 8-bit mantissa: close, not equal
    assert (low_quantiles - quantiles).abs().max().item() < 0.05 * quantiles.abs().max().item()
    torch.testing.assert_close(low_tokens[:, -1], low_point)  # the inference path is the same computation


def test_float64_inputs_run_exactly_whatever_the_precision():
    full, low = model_with("float32").double(), model_with("bfloat16").double()
    low.load_state_dict(full.state_dict())
    x = torch.randn(4, 48, 2, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(low.predict(x), full.predict(x))  # the leakage checks' float64 probes stay exact
        assert low.predict(x).dtype == torch.float64


def test_train_saves_the_precision_it_chose(tiny_csv, tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "native_bfloat16", lambda device: True)
    cfg = tiny_config(tiny_csv, precision="auto")
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=1))
    predictor = train(cfg, tmp_path / "run", show_progress=False)
    assert predictor.config.model.precision == "bfloat16"
    assert "precision: bfloat16" in (tmp_path / "run" / "config.yaml").read_text()

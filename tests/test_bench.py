"""The benchmark pipeline on real ETTh1 (skipped, with the reason, when the data is absent)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tsformer.bench import run_benchmark
from tsformer.checkpoint import load_checkpoint
from tsformer.config import load_config, with_data_path
from tsformer.data import prepare
from tsformer.datasets import resolve_data_path

REPO = Path(__file__).resolve().parent.parent
ETTH1 = resolve_data_path("ETTh1.csv", REPO.parent / "shared" / "data")
needs_etth1 = pytest.mark.skipif(
    not ETTH1.is_file(), reason="ETTh1.csv not found: set TSFORMER_DATA_DIR or put it in ../shared/data"
)


@needs_etth1
def test_standard_protocol_borders_windows_and_scaler():
    cfg = with_data_path(load_config(REPO / "configs" / "etth1_96.yaml"), ETTH1)
    data = prepare(cfg)
    assert data.borders.to_list() == [8640, 11520, 14400]
    assert len(data.windows("test", cfg.model.context_len, 96)) == 2880 - 96 + 1
    raw = pd.read_csv(ETTH1).drop(columns="date").to_numpy()
    np.testing.assert_allclose(data.scaler.mean, raw[:8640].mean(0), rtol=1e-5)
    np.testing.assert_allclose(data.scaler.std, raw[:8640].std(0), rtol=1e-5)


@needs_etth1
def test_benchmark_pipeline_on_a_slice(tmp_path):
    pd.read_csv(ETTH1).head(600).to_csv(tmp_path / "etth1_slice.csv", index=False)
    config = tmp_path / "slice_24.yaml"
    config.write_text(
        "data:\n  path: etth1_slice.csv\n  split_borders: [360, 480, 600]\n"
        "model:\n  context_len: 48\n  horizon: 24\n  patch_len: 8\n  d_model: 8\n  n_heads: 2\n  d_ff: 16\n"
        "  n_layers: 1\ntrain:\n  epochs: 1\n  batch_size: 64\n"
    )
    result = run_benchmark(config, tmp_path / "runs", tmp_path / "results", data_dir=tmp_path, show_progress=False)
    assert result["n_test_windows"] == 120 - 24 + 1
    assert result["leakage_checks_passed"]
    ckpt = load_checkpoint(tmp_path / "runs" / "slice_24" / "model.pt")
    assert ckpt.borders.to_list() == [360, 480, 600]
    raw = pd.read_csv(tmp_path / "etth1_slice.csv").drop(columns="date").to_numpy()
    np.testing.assert_allclose(ckpt.scaler.mean, raw[:360].mean(0), rtol=1e-5)
    saved = json.loads((tmp_path / "results" / "slice_24.json").read_text())
    assert saved["test"]["model"]["mse"] == result["test"]["model"]["mse"]
    table = (tmp_path / "results" / "etth1_slice.md").read_text()
    assert "| 24 | 48 |" in table

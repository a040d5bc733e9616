"""The benchmark pipeline: on real ETTh1 (skipped, with the reason, when the data is absent) and on tiny data."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tsformer
from tsformer.bench import run_benchmark
from tsformer.config import load_config, with_data_path
from tsformer.data import training_data
from tsformer.datasets import resolve_data_path
from tsformer.errors import ConfigError
from tsformer.predictor import load_predictor

REPO = Path(__file__).resolve().parent.parent
ETTH1 = resolve_data_path("ETTh1.csv").resolve()  # the lookup the CLI uses: $TSFORMER_DATA_DIR, then the cache
needs_etth1 = pytest.mark.skipif(
    not ETTH1.is_file(),
    reason="ETTh1.csv not found in $TSFORMER_DATA_DIR or the cache: run `make test` (which sets "
    "TSFORMER_DATA_DIR=../shared/data), set TSFORMER_DATA_DIR, or `tsformer datasets fetch etth1`",
)


@needs_etth1
def test_standard_protocol_borders_windows_and_scaler():
    cfg = with_data_path(load_config(REPO / "configs" / "etth1_96.yaml"), ETTH1)
    data = training_data(cfg)
    assert data.borders.to_list() == [[8640], [11520], [14400]]
    assert len(data.windows("test")) == 2880 - 96 + 1
    raw = pd.read_csv(ETTH1).drop(columns="date").to_numpy()
    np.testing.assert_allclose(data.scaler.mean[0], raw[:8640].mean(0), rtol=1e-5)
    np.testing.assert_allclose(data.scaler.std[0], raw[:8640].std(0), rtol=1e-5)


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
    ckpt = load_predictor(tmp_path / "runs" / "slice_24" / "model.pt")
    assert ckpt.borders.to_list() == [[360], [480], [600]]
    raw = pd.read_csv(tmp_path / "etth1_slice.csv").drop(columns="date").to_numpy()
    np.testing.assert_allclose(ckpt.scaler.mean[0], raw[:360].mean(0), rtol=1e-5)
    saved = json.loads((tmp_path / "results" / "slice_24.json").read_text())
    assert saved["test"]["model"]["mse"] == result["test"]["model"]["mse"]
    table = (tmp_path / "results" / "etth1_slice.md").read_text()
    assert "| 24 | 48 |" in table


TINY_BENCH = (
    "data:\n  path: tiny.csv\n  calendar: true\n"
    "model:\n  context_len: 16\n  horizon: 4\n  patch_len: 4\n  d_model: 8\n  n_heads: 2\n"
    "  d_ff: 16\n  n_layers: 1\n  members: 1\ntrain:\n  epochs: 1\n  batch_size: 32\n  num_threads: 1\n  loss: mse\n"
    "  candidates: [repeat_last, seasonal_naive, drift, seasonal_drift]\n"
)


def _fake_result(results: Path, dataset: str, horizon: int, mse: float) -> None:
    scores = {k: {"mse": mse, "mae": mse} for k in ("model", "repeat_last", "seasonal_naive")}
    result = {
        "name": f"{dataset}_{horizon}", "dataset": dataset, "horizon": horizon, "context_len": 336,
        "n_test_windows": 100, "test": scores, "train_wall_seconds": 1.0, "epochs_run": 3, "best_epoch": 2,
        "n_parameters": 1000, "peak_rss_mib": 500.0, "leakage_checks_passed": True,
    }  # fmt: skip
    (results / f"{dataset}_{horizon}.json").write_text(json.dumps(result))


def test_bench_command_on_tiny_data_without_a_reference_file(tiny_csv, tmp_path):
    from typer.testing import CliRunner

    from tsformer.cli import app

    config = tmp_path / "tiny_4.yaml"
    config.write_text(TINY_BENCH)
    results, missing = tmp_path / "results", tmp_path / "none.csv"
    argv = ["bench", str(config), "--data-dir", str(tmp_path), "--runs-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, [*argv, "--results-dir", str(results), "--reference", str(missing), "--quiet"])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"note: {missing} not found; the table gets no published rows (see --reference)\n"
    assert result.stdout.startswith("tiny_4: test MSE ") and "leakage checks pass" in result.stdout
    saved = json.loads((results / "tiny_4.json").read_text())
    assert (saved["dataset"], saved["horizon"], saved["n_test_windows"]) == ("tiny", 4, 48 - 4 + 1)
    table = (results / "tiny.md").read_text()
    model, ablation = saved["test"]["model"], saved["ablation_no_transformer"]
    assert load_predictor(tmp_path / "runs" / "tiny_4_no_transformer" / "model.pt").config.model.transformer is False
    assert "per_column" not in saved["intervals"]["80"]
    assert ablation["n_parameters"] < saved["n_parameters"]  # the skip alone
    assert ablation["best_val_mse"] > 0 and ablation["test_mse"] > 0
    assert f"| 4 | 16 | **{model['mse']:.3f}** | {model['mae']:.3f} | {ablation['test_mse']:.3f} | - |" in table
    eighty = saved["intervals"]["80"]
    assert eighty["nominal"] == 0.8 and 0 < eighty["coverage"] <= 1 and eighty["width"] > 0
    assert f"| 4 | 80 % | {100 * eighty['coverage']:.1f} % | {eighty['width']:.3g} | {eighty['msis']:.3f} |" in table
    assert table.endswith(f"No published results: the reference file {missing} was not found (see `--reference`).\n")
    assert "## Published results" not in table
    assert sorted(p.name for p in results.iterdir()) == ["tiny.md", "tiny_4.json"]  # no temp files left
    assert saved["data"]["lines"] == 241 and saved["data"]["split_ratios"] == []
    (tmp_path / "short").mkdir()  # a shorter file of the same name: its results would share the table
    (tmp_path / "short" / "tiny.csv").write_text("".join(tiny_csv.read_text().splitlines(True)[:200]))
    other = tmp_path / "tiny_8.yaml"
    other.write_text(TINY_BENCH.replace("path: tiny.csv", f"path: {tmp_path / 'short' / 'tiny.csv'}"))
    refused = CliRunner().invoke(app, ["bench", str(other), "--results-dir", str(results), "--quiet"])
    assert refused.exit_code == 2 and "holds tiny results of other data or another split" in refused.stderr
    assert "lines 241 against 200" in refused.stderr and sorted(p.name for p in results.iterdir()) == [
        "tiny.md",
        "tiny_4.json",
    ]
    from tsformer.bench import read_bench_configs

    assert read_bench_configs([config], tmp_path, missing, results)  # its own earlier result is replaced, not compared
    with pytest.raises(ConfigError, match="benchmark tiny on other data or another split"):
        read_bench_configs([config, other], tmp_path, missing)  # two configs of one call


def test_table_takes_published_rows_from_the_default_reference_in_the_current_folder(tmp_path, monkeypatch):
    from tsformer.bench import write_table

    results = tmp_path / "results"
    results.mkdir()
    _fake_result(results, "etth1", 192, 0.5)
    _fake_result(results, "etth1", 96, 0.4)
    _fake_result(results, "other", 96, 0.9)
    monkeypatch.chdir(tmp_path)  # no benchmarks/ here: the default reference is not found
    table = write_table(results, "etth1").read_text()
    assert "the reference file benchmarks/published_etth1.csv was not found" in table
    assert [
        line.split(" | ")[0] for line in table.splitlines() if line.startswith("| 9") or line.startswith("| 1")
    ] == [
        "| 96",
        "| 192",
    ]  # sorted by horizon; the other dataset's result is not in this table

    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "published_etth1.csv").write_bytes(
        (REPO / "benchmarks" / "published_etth1.csv").read_bytes()
    )
    table = write_table(results, "etth1").read_text()
    assert "not found" not in table and "## Published results" in table
    at_96 = pd.read_csv(REPO / "benchmarks" / "published_etth1.csv").query("horizon == 96")
    best = at_96.loc[at_96["mse"].idxmin()]
    cell = f"{best['mse']:.3f} ({best['model']}, L={best['lookback']})"
    assert f"| 96 | 336 | **0.400** | 0.400 | - | {cell} |" in table  # the fake result has no ablation
    published = pd.read_csv(REPO / "benchmarks" / "published_etth1.csv")
    rows = [line for line in table.splitlines() if line.startswith("| PatchTST/64 | 512 | 96 |")]
    expected = published[(published["model"] == "PatchTST/64") & (published["horizon"] == 96)].iloc[0]
    assert rows == [
        f"| PatchTST/64 | 512 | 96 | {expected['mse']:.3f} | {expected['mae']:.3f} | {expected['source']} |"
    ]


def test_a_malformed_reference_file_is_refused_before_training(tiny_csv, tmp_path):
    from tsformer.errors import DataError

    config = tmp_path / "tiny_4.yaml"
    config.write_text(TINY_BENCH)
    bad = tmp_path / "bad.csv"
    bad.write_text("dataset,model,horizon\ntiny,X,96\n")
    with pytest.raises(DataError, match=r"reference file .*bad.csv cannot be used \(no column lookback, mse, mae"):
        run_benchmark(config, tmp_path / "runs", tmp_path / "results", tmp_path, show_progress=False, reference=bad)
    bad.write_text("dataset,model,lookback,horizon,mse,mae,source\ntiny,X,512,ninety,0.1,0.2,paper\n")
    with pytest.raises(DataError, match="integer horizon"):
        run_benchmark(config, tmp_path / "runs", tmp_path / "results", tmp_path, show_progress=False, reference=bad)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()


def test_every_config_is_read_before_any_trains_and_its_mistakes_name_it(tiny_csv, tmp_path):
    from tsformer.bench import read_bench_configs
    from tsformer.errors import ConfigError, DataError

    good, typo = tmp_path / "tiny_4.yaml", tmp_path / "typo.yaml"
    good.write_text(TINY_BENCH)
    typo.write_text(TINY_BENCH.replace("d_model", "d_modle"))
    with pytest.raises(ConfigError, match=rf"^{typo}: unknown key model.d_modle"):
        read_bench_configs([good, typo], tmp_path)
    (tmp_path / "other").mkdir()
    twin = tmp_path / "other" / "tiny_4.yaml"
    twin.write_text(TINY_BENCH)
    with pytest.raises(ConfigError, match="share the name 'tiny_4', so one run and its results would overwrite"):
        read_bench_configs([good, twin], tmp_path)
    with pytest.raises(ConfigError, match=rf"^{good} is given twice"):
        read_bench_configs([good, good], tmp_path)
    shadow = tmp_path / "tiny_4_no_transformer.yaml"  # its run folder is tiny_4's ablation's
    shadow.write_text(TINY_BENCH)
    with pytest.raises(ConfigError, match="share the name 'tiny_4_no_transformer'"):
        read_bench_configs([good, shadow], tmp_path)
    nowhere = tmp_path / "nowhere.yaml"
    nowhere.write_text("model:\n  horizon: 4\n")
    with pytest.raises(ConfigError, match=rf"^{nowhere}: it sets no data.path"):
        read_bench_configs([nowhere], tmp_path)
    lost = tmp_path / "lost.yaml"
    lost.write_text(TINY_BENCH.replace(f"path: {tiny_csv.name}", "path: missing.csv"))
    beside = tmp_path / "other" / "beside.yaml"  # a path relative to the config's folder
    beside.write_text(TINY_BENCH.replace(f"path: {tiny_csv.name}", f"path: ../{tiny_csv.name}"))
    assert read_bench_configs([beside])[0].config.data.path == str(tmp_path / "other" / ".." / tiny_csv.name)
    from typer.testing import CliRunner

    from tsformer.cli import app

    trained = CliRunner().invoke(app, ["train", "--config", str(beside), "--out", str(tmp_path / "run"), "--quiet"])
    assert trained.exit_code == 0, trained.output  # `make runs` finds it as bench does
    assert Path(load_config(tmp_path / "run" / "config.yaml").data.path) == tiny_csv.resolve()
    assert Path(tsformer.fit(config=beside).config.data.path).resolve() == tiny_csv.resolve()  # the API alike
    missing = CliRunner().invoke(app, ["train", "--config", str(lost), "--out", str(tmp_path / "lost")])
    assert missing.exit_code == 2 and f"file missing.csv not found here, beside the config {lost} or" in missing.output
    with pytest.raises(DataError, match=rf"^{lost}: its data.path missing.csv is not a file here, beside the config"):
        read_bench_configs([lost], tmp_path)


def test_the_bench_command_trains_nothing_when_a_later_config_is_wrong(tiny_csv, tmp_path):
    from typer.testing import CliRunner

    from tsformer.cli import app

    good, typo = tmp_path / "tiny_4.yaml", tmp_path / "typo.yaml"
    good.write_text(TINY_BENCH)
    typo.write_text(TINY_BENCH.replace("d_model", "d_modle"))
    runs, results = tmp_path / "runs", tmp_path / "results"
    args = ["bench", str(good), str(typo), "--data-dir", str(tmp_path), "--runs-dir", str(runs)]
    result = CliRunner().invoke(app, [*args, "--results-dir", str(results), "-q"])
    assert result.exit_code == 2 and result.stderr.startswith(f"Error: {typo}: unknown key model.d_modle")
    assert not runs.exists() and not results.exists()  # the first config did not train

"""Multi-process training with torchrun (torch DDP, gloo on CPU): the same command, several ranks.

Each rank runs tests/ddp_probe.py, which wraps `Forecaster.forward` to record the windows the rank
trained on and its final weights: each step's batch is dealt out among the ranks, the shards must cover the
training windows every epoch, sharing only a window that pads a last batch too small to give every rank one,
and both ranks must end with identical weights (which
holds only if gradients are all-reduced; without DDP they differ). A resumed two-rank run, dropout
included, must match an uninterrupted one exactly.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import TINY_FLAGS, make_frame, write_csv

from tsformer.data import training_data
from tsformer.leakage import check_model
from tsformer.predictor import load_predictor, load_train_state
from tsformer.runfolder import LAST_FILE, MODEL_FILE

TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
PROBE = Path(__file__).with_name("ddp_probe.py")
pytestmark = pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed beside this Python")


def _torchrun(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    command = [TORCHRUN, "--standalone", "--nproc_per_node", "2", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _probe(
    csv: Path, run: Path, dump: Path, env: dict | None = None, flags: tuple[str, ...] = (), timeout: float = 300
) -> tuple[subprocess.CompletedProcess, list]:
    """Train CSV into RUN on two ranks (TINY_FLAGS: 2 epochs); -> the CLI's output and each rank's record."""
    dump.mkdir()
    train = ["train", str(csv), "--out", str(run), "--quiet", *TINY_FLAGS, *flags]
    result = _torchrun([str(PROBE), str(dump), *train], env, timeout)
    return result, [torch.load(dump / f"rank{r}.pt", weights_only=True) for r in range(2)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One uninterrupted two-rank run, shared by the tests below."""
    root = tmp_path_factory.mktemp("ddp")
    csv = write_csv(root / "tiny.csv", make_frame())
    result, records = _probe(csv, root / "run", root / "dump")
    return csv, root / "run", result, records


def _window_index(csv: Path, run: Path) -> tuple[dict[bytes, int], int]:
    """Each training window's context (as bytes) -> its index; and the number of training windows."""
    cfg = load_predictor(run / MODEL_FILE).config
    windows = training_data(cfg).windows("train")[:: cfg.train.train_stride]  # the targets' windows
    contexts = windows[:, : cfg.model.context_len].contiguous()
    index = {c.numpy().tobytes(): i for i, c in enumerate(contexts)}
    assert len(index) == len(contexts)  # every context is distinct, so a context names its window
    return index, len(contexts)


def test_two_ranks_train_one_run(two_ranks):
    _, run, result, records = two_ranks
    assert result.stdout.count("trained ") == 1  # only rank 0 reports
    assert [r["exit_code"] for r in records] == [0, 0]
    ckpt = load_predictor(run / MODEL_FILE)
    assert ckpt.layout.targets == ("a", "b")
    assert all(r.passed for r in check_model(ckpt.model))


def test_each_epoch_the_ranks_train_on_disjoint_shards_that_cover_the_data(two_ranks):
    csv, run, _, records = two_ranks
    index, n_windows = _window_index(csv, run)
    assert n_windows == 168 - 16 - 4 + 1
    seen = [[index[c.numpy().tobytes()] for c in r["contexts"]] for r in records]
    # 149 windows in batches of 32 (train.batch_size over both ranks), 16 a rank, the last batch's 21 as 11 and 10
    assert [r["batches"] for r in records] == [[16, 16, 16, 16, 11] * 2, [16, 16, 16, 16, 10] * 2]  # 2 epochs
    for epoch in range(2):
        ranks = [set(s[epoch * shard : (epoch + 1) * shard]) for s, shard in zip(seen, (75, 74), strict=True)]
        assert [len(r) for r in ranks] == [75, 74]  # no window twice within a rank's epoch
        assert not ranks[0] & ranks[1], f"epoch {epoch + 1}: a window on both ranks, with no padding needed"
        assert ranks[0] | ranks[1] == set(range(n_windows)), f"epoch {epoch + 1}: windows left out"


def test_the_history_holds_each_epochs_training_loss_over_both_ranks(two_ranks):
    _, run, _, records = two_ranks
    history = pd.read_csv(run / "history.csv")
    for epoch in range(2):  # 5 steps an epoch on each rank
        per_rank = [np.mean(r["losses"][5 * epoch : 5 * (epoch + 1)]) for r in records]
        assert per_rank[0] != per_rank[1]  # each rank's own shard
        assert history["train_loss"][epoch] == pytest.approx(np.mean(per_rank), rel=1e-12)


def test_gradients_are_synchronised_so_both_ranks_hold_the_same_weights(two_ranks):
    _, run, _, (rank0, rank1) = two_ranks
    assert rank0["state"].keys() == rank1["state"].keys() and rank0["state"]
    for key, tensor in rank0["state"].items():
        assert torch.equal(tensor, rank1["state"][key]), f"{key} differs between the ranks"
    saved = load_predictor(run / LAST_FILE).model.state_dict()  # rank 0 saved the weights it ended with
    assert all(torch.equal(saved[key], tensor) for key, tensor in rank0["state"].items())


def test_without_ddp_the_ranks_drift_apart(tiny_csv, tmp_path):
    """The control for the test above: the same run with the DDP wrapper removed ends with different weights."""
    _, (rank0, rank1) = _probe(tiny_csv, tmp_path / "run", tmp_path / "dump", {"PROBE_NO_DDP": "1"})
    assert any(not torch.equal(tensor, rank1["state"][key]) for key, tensor in rank0["state"].items())


def test_uneven_shards_take_the_same_number_of_steps_on_every_rank(tiny_csv, tmp_path):
    _, (rank0, rank1) = _probe(
        tiny_csv, tmp_path / "run", tmp_path / "dump", flags=("--set", "train.batch_size=37"), timeout=120
    )
    # 149 windows in batches of 37: the last batch's one window padded to two by wrapping, one a rank
    assert rank0["batches"] == [19, 19, 19, 19, 1] * 2 and rank1["batches"] == [18, 18, 18, 18, 1] * 2
    assert all(torch.equal(tensor, rank1["state"][key]) for key, tensor in rank0["state"].items())


@pytest.mark.parametrize("dropout", ["0", "0.3"])
def test_resume_on_two_ranks_matches_an_uninterrupted_two_rank_run(dropout, tiny_csv, tmp_path):
    flags = ("--set", f"model.dropout={dropout}")
    reference = tmp_path / "reference"
    _torchrun(["-m", "tsformer", "train", str(tiny_csv), "--out", str(reference), "--quiet", *TINY_FLAGS, *flags])
    run = tmp_path / "run"
    steps_per_epoch = -(-149 // 32)  # one process's steps: each rank takes its share of every batch of 32
    stop = {"PROBE_STOP_AT_STEP": str(steps_per_epoch + 1)}  # Ctrl-C at the first step of epoch 2
    result, records = _probe(tiny_csv, run, tmp_path / "dump", stop, flags)
    assert [r["exit_code"] for r in records] == [130, 130], result.stderr[-2000:]
    assert f"Resume with: tsformer train --resume --out {run}" in result.stderr
    assert "no epoch was saved" not in result.stderr  # rank 1 said so, wrongly: only rank 0 saves
    assert load_train_state(run / LAST_FILE)[1]["loop"]["epoch"] == 1

    _torchrun(["-m", "tsformer", "train", "--resume", "--out", str(run), "--quiet"])
    assert load_train_state(run / LAST_FILE)[1]["loop"]["epoch"] == 2
    for name in (MODEL_FILE, LAST_FILE):
        resumed, uninterrupted = load_predictor(run / name), load_predictor(reference / name)
        assert resumed.model.state_dict().keys() == uninterrupted.model.state_dict().keys()
        for key, tensor in uninterrupted.model.state_dict().items():
            assert torch.equal(resumed.model.state_dict()[key], tensor), f"{name}: {key} differs"


def test_long_format_shards_windows_of_every_series_across_the_ranks(tmp_path):
    """Many series under torchrun: each epoch the ranks share out windows from every series between them,
    and the all-reduced gradients leave them with the same weights."""
    from test_long_format import long_frame

    csv = tmp_path / "long.csv"
    long_frame({"A": 120, "B": 96, "C": 150}).to_csv(csv, index=False)
    _, (rank0, rank1) = _probe(csv, tmp_path / "run", tmp_path / "dump", timeout=120)
    index, n_windows = _window_index(csv, tmp_path / "run")
    assert n_windows == (120 - 15) + (96 - 15) + (150 - 15)  # per series: n - 2H training rows, history >= H
    shard = -(-n_windows // 2)
    seen = [[index[c.numpy().tobytes()] for c in r["contexts"]] for r in (rank0, rank1)]
    for epoch in range(2):
        ranks = [set(s[epoch * shard : (epoch + 1) * shard]) for s in seen]
        assert ranks[0] | ranks[1] == set(range(n_windows)) and len(ranks[0] & ranks[1]) == 2 * shard - n_windows
    assert all(torch.equal(tensor, rank1["state"][key]) for key, tensor in rank0["state"].items())
    assert load_predictor(tmp_path / "run" / MODEL_FILE).series == (("A",), ("B",), ("C",))


def test_the_final_fit_on_two_ranks_takes_the_held_out_runs_epochs_with_synchronised_gradients(tiny_csv, tmp_path):
    """With train.final_fit the last model trained is the final one: both ranks hold its weights, the run saves
    them, and it took the held-out run's epochs up to its best over every row (after the held-out run's own)."""
    run = tmp_path / "run"
    _, (rank0, rank1) = _probe(tiny_csv, run, tmp_path / "dump", flags=("--set", "train.final_fit=true"))
    final = load_predictor(run / MODEL_FILE).final
    held_out = [[16, 16, 16, 16, 11] * 2, [16, 16, 16, 16, 10] * 2]  # 2 epochs of 149 windows in batches of 32
    # the final fit: epochs up to the held-out run's best over every row's 221 windows, 7 batches of 32 (the
    # last 29: 15 and 14)
    best_epoch = load_predictor(run / MODEL_FILE).summary.best_epoch
    assert final is not None and final.steps == best_epoch * 7 and final.n_windows == 240 - 16 - 4 + 1
    finals = [[16] * 6 + [15], [16] * 6 + [14]]
    assert [r["batches"] for r in (rank0, rank1)] == [b + f * best_epoch for b, f in zip(held_out, finals, strict=True)]
    assert all(torch.equal(tensor, rank1["state"][key]) for key, tensor in rank0["state"].items())
    saved = final.model.state_dict()
    assert all(torch.equal(saved[key], tensor) for key, tensor in rank0["state"].items())


def test_two_ranks_take_the_steps_of_one_process_and_end_near_its_weights(tiny_csv, tmp_path):
    """train.batch_size is a step's batch over every rank: two ranks take one process's steps, each half of each
    batch, so without dropout (the ranks' masks differ from one process's) they end where one process does,
    up to the order of float sums."""
    flags = ("--set", "model.dropout=0", "--set", "model.precision=float32")
    _, (rank0, _) = _probe(tiny_csv, tmp_path / "run", tmp_path / "dump", flags=flags)
    one = tmp_path / "one"
    command = [sys.executable, "-m", "tsformer", "train", str(tiny_csv), "--out", str(one), "--quiet"]
    subprocess.run([*command, *TINY_FLAGS, *flags], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    alone = load_predictor(one / LAST_FILE).model.state_dict()
    for run in (tmp_path / "run", one):  # 149 windows in batches of 32 (two ranks: 16 each), 2 epochs
        assert load_train_state(run / LAST_FILE)[1]["loop"]["step"] == 2 * 5
    # most weights agree to 1e-8, the farthest to 3e-5; ranks taking 32 windows each ended 4e-3 away (half the
    # steps), and ranks taking 16 of an order padded to 150, 3e-4 (the padding window counted twice)
    differences = {key: (tensor - alone[key]).abs().max().item() for key, tensor in rank0["state"].items()}
    assert max(differences.values()) < 1e-4, differences


def test_ranks_that_read_different_data_stop_with_an_error_not_a_hang(tmp_path):
    """Each node reading its own copy of a bare file name (TSFORMER_DATA_DIR per node) with other values paired
    the ranks' collectives wrongly and hung until gloo's 30-minute timeout."""
    for rank in range(2):
        (tmp_path / f"data{rank}").mkdir()
        write_csv(tmp_path / f"data{rank}" / "s.csv", make_frame(seed=rank))
    launcher = tmp_path / "per_rank.py"  # each rank its own data directory, then the command line
    launcher.write_text(
        "import os, sys\n"
        f"os.environ['TSFORMER_DATA_DIR'] = {str(tmp_path / 'data')!r} + os.environ['RANK']\n"
        "from tsformer.cli import run_cli\n"
        "sys.exit(run_cli(sys.argv[1:]))\n"
    )
    command = [TORCHRUN, "--standalone", "--nproc_per_node", "2", str(launcher), "train", "s.csv", "--quiet"]
    command += ["--out", str(tmp_path / "run"), *TINY_FLAGS]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    frames = [line for line in result.stderr.splitlines() if line.strip().startswith("File ")]
    assert result.returncode != 0 and not [line for line in frames if "tsformer" in line.split("site-packages")[0]]
    assert "Error: the processes read different data (this is rank 0 of 2)" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_refit_backtest_trains_every_fold_in_one_process_group(tiny_csv, tmp_path):
    """backtest --refit trains a run a fold in one process: the ranks join the process group once (leaving and
    joining again against torchrun's store hung or failed now and then), and rank 0 alone reports; a command that
    trains nothing runs on rank 0 alone (each rank printed its own report)."""
    run = tmp_path / "run"
    _torchrun(["-m", "tsformer", "train", str(tiny_csv), "--out", str(run), "--quiet", *TINY_FLAGS])
    result = _torchrun(["-m", "tsformer", "backtest", str(run), "--refit", "--windows", "2"], timeout=240)
    assert result.stderr.count("fold 2 of 2: training") == 1  # every rank trains the folds; rank 0 reports
    assert [line.split()[0] for line in result.stdout.splitlines()].count("all") == 1
    evaluated = _torchrun(["-m", "tsformer", "evaluate", str(run)], timeout=120)  # rank 0 alone: one report
    assert (
        evaluated.stdout
        == subprocess.run(
            [sys.executable, "-m", "tsformer", "evaluate", str(run)], capture_output=True, text=True, check=True
        ).stdout
    )


def test_a_run_folder_rank_0_cannot_claim_stops_every_rank_with_an_error(tiny_csv, tmp_path):
    """Rank 0 claims the run folder alone, before the process group is joined: refused (it exists), it left the
    other rank waiting to join until torchrun killed it, with no word from it."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("someone's files")
    command = [TORCHRUN, "--standalone", "--nproc_per_node", "2", "-m", "tsformer", "train", str(tiny_csv)]
    command += ["--out", str(run), "--quiet", *TINY_FLAGS]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode != 0
    assert "Error (rank 1 of 2): rank 0 could not start the run (its own Error line says why)" in result.stderr
    assert [p.name for p in run.iterdir()] == ["notes.txt"]

"""Multi-process training with torchrun (torch DDP, gloo on CPU): the same command, several ranks."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_FLAGS

from tsformer.checkpoint import load_checkpoint
from tsformer.leakage import check_model

TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed beside this Python")
def test_two_ranks_train_one_run(tiny_csv, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        TORCHRUN, "--standalone", "--nproc_per_node", "2", "-m", "tsformer", "train", str(tiny_csv),
        "--out", str(run), "--quiet", *TINY_FLAGS,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("trained ") == 1  # only rank 0 reports
    ckpt = load_checkpoint(run / "model.pt")
    assert ckpt.columns == ("a", "b")
    assert all(r.passed for r in check_model(ckpt.build_model()))

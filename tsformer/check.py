"""`check_run(run)`: every leakage check on a trained run, rebuilt from its checkpoint alone."""

from __future__ import annotations

from pathlib import Path

from tsformer.checkpoint import load_checkpoint, resolve_checkpoint
from tsformer.config import with_data_path
from tsformer.data import prepare
from tsformer.leakage import CheckResult, check_data, check_model


def check_run(run: str | Path, csv: str | Path | None = None, n_checks: int = 32) -> tuple[list[CheckResult], str]:
    """Model checks always; data checks on the run's CSV (or `csv`) when it can be read.

    Returns the results and a note on what was skipped ("" when nothing was).
    """
    ckpt = load_checkpoint(resolve_checkpoint(run))
    results = check_model(ckpt.build_model(), n_checks=n_checks)
    cfg = ckpt.config
    path = Path(csv) if csv is not None else Path(cfg.data.path)
    if not path.is_file():
        return results, f"data checks skipped: {path} not found (pass --csv to run them)"
    data = prepare(with_data_path(cfg, path), scaler=ckpt.scaler, columns=ckpt.columns, freq=ckpt.freq)
    frame = data.frame
    results += check_data(
        frame.values, frame.timestamps, ckpt.borders, ckpt.scaler, cfg.model.context_len, cfg.model.horizon
    )
    return results, ""

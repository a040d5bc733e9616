"""`check_run(run)`: every leakage check on a trained run, rebuilt from its checkpoint alone."""

from __future__ import annotations

from pathlib import Path

from tsformer.checkpoint import CALIBRATION_DIR, MODEL_FILE, load_checkpoint, resolve_checkpoint
from tsformer.evaluate import load_run_data
from tsformer.leakage import CheckResult, check_calibration_model, check_data, check_intervals, check_model


def check_run(run: str | Path, csv: str | Path | None = None, n_checks: int = 32) -> tuple[list[CheckResult], str]:
    """Model checks always; data checks on the run's CSV (or `csv`) when it can be read.

    Returns the results and a note on what was skipped ("" when nothing was).
    """
    model_file = resolve_checkpoint(run)
    ckpt = load_checkpoint(model_file)
    cfg = ckpt.config.model
    results = check_model(ckpt.build_model(), n_checks=n_checks)
    results.append(check_intervals(ckpt.interval_half_widths, cfg.context_len, cfg.horizon, len(ckpt.columns)))
    notes = []
    own_file = model_file.parent / CALIBRATION_DIR / MODEL_FILE  # train.interval_calibration=refit
    refit = ckpt.config.train.interval_calibration == "refit" and bool(ckpt.interval_levels)
    if refit and not own_file.is_file():
        notes.append(f"intervals/refit skipped: {own_file} not found (the run folder without its calibration model)")
    else:
        own = load_checkpoint(own_file).borders if refit else None
        results.append(check_calibration_model(ckpt.borders, own))
    path = Path(csv) if csv is not None else Path(ckpt.config.data.path)
    if not path.is_file():
        notes.append(f"data checks skipped: {path} not found (pass --csv to run them)")
        return results, "; ".join(notes)
    data = load_run_data(ckpt, path)
    return results + check_data(data, ckpt.config), "; ".join(notes)

"""One writer per run folder, and no half-made run after a failure.

`claim` takes an exclusive lock beside the folder (`.NAME.lock`, held with flock, so a killed
owner releases it), then a new run is written into a hidden staging sibling (`.NAME.staging`).
`publish` moves it into place once its first epoch is saved, replacing an old run only then.
So after any failure the folder is the old run, a resumable run, or absent.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from tsformer.config import Config
from tsformer.errors import CheckpointError, ConfigError
from tsformer.files import remove_temp_files

MODEL_FILE = "model.pt"  # the predictor, for evaluate/predict/check
LAST_FILE = "last.pt"  # latest epoch with optimizer and RNG state, for --resume
CONFIG_FILE = "config.yaml"  # the resolved config
CHECKPOINTS = (MODEL_FILE, LAST_FILE)  # a run holds one of these beside its config (`_is_run`)
CONFIG_SECTIONS = {section.name for section in fields(Config)}  # a run's config.yaml holds exactly these


@dataclass
class RunFolder:
    final: Path  # the folder the user named (--out)
    path: Path  # where files go now: the staging sibling until `publish`, then `final`
    lock_fd: int | None = None
    notes: list[str] = field(default_factory=list)  # things the user should hear about (a stale lock)

    @property
    def published(self) -> bool:
        return self.path == self.final

    def publish(self) -> None:
        """Move the staged run into place (the old run, if any, goes only now)."""
        if self.published:
            return
        old = _sibling(self.final, "replaced")
        if self.final.exists():
            os.replace(self.final, old)
        try:
            os.replace(self.path, self.final)
        except BaseException:  # put the old run back; the staged one stays staged
            if old.exists():
                os.replace(old, self.final)
            raise
        self.path = self.final
        shutil.rmtree(old, ignore_errors=True)

    def release(self) -> None:
        """Drop an unpublished staging folder and the lock."""
        if not self.published:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = self.final
        if self.lock_fd is not None:
            _sibling(self.final, "lock").unlink(missing_ok=True)  # unlink before unlocking: see _lock
            os.close(self.lock_fd)
            self.lock_fd = None


def claim(out_dir: Path, overwrite: bool, resume: bool, resumable: bool = True, named: str = "--out") -> RunFolder:
    """Lock `out_dir` for this process and say where to write; refuse a second writer or a folder in the way
    (`resumable`: whether the writer could continue the run there instead, which the refusal then offers;
    `named`: what the caller calls the folder, `--out` or `Predictor.save`'s path)."""
    out_dir = Path(os.path.abspath(out_dir))  # "." has no name to put a sibling beside
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{named} {out_dir} is a file; give a folder for the run")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(
            f"{named} {out_dir}: {out_dir.parent} is a file, not a folder; choose another {named}"
        ) from None
    folder = RunFolder(final=out_dir, path=out_dir)
    folder.lock_fd, stale_owner = _lock(out_dir, named)
    if stale_owner:
        folder.notes.append(
            f"note: took over the lock of {out_dir} left by process {stale_owner}, which is no longer running"
        )
    try:
        _recover(out_dir)
        for leftover in ("staging", "replaced"):  # from a run killed before it could clean up
            shutil.rmtree(_sibling(out_dir, leftover), ignore_errors=True)
        if resume and out_dir.is_dir():
            remove_temp_files(out_dir)  # of checkpoint writes a kill interrupted
        if not resume:
            _check_replaceable(out_dir, overwrite, resumable, named)
            folder.path = _sibling(out_dir, "staging")
            folder.path.mkdir()
    except BaseException:
        folder.release()
        raise
    return folder


def _recover(out_dir: Path) -> None:
    """A kill between publish's two renames leaves no run in place: put back the new run if it saved an
    epoch, else the old one."""
    if out_dir.exists():
        return
    staged, replaced = _sibling(out_dir, "staging"), _sibling(out_dir, "replaced")
    if (staged / "last.pt").is_file():
        os.replace(staged, out_dir)
    elif replaced.is_dir():
        os.replace(replaced, out_dir)


def _check_replaceable(out_dir: Path, overwrite: bool, resumable: bool, named: str) -> None:
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if not overwrite:
        continued = "--resume to continue it, " if resumable else ""
        raise ConfigError(
            f"run folder {out_dir} already exists and is not empty; pass --overwrite to replace it, "
            f"{continued}or choose another {named}"
        )
    if not _is_run(out_dir):
        raise ConfigError(
            f"{out_dir} is not a tsformer run folder (it has no {CONFIG_FILE} of tsformer's beside a "
            f"{' or '.join(CHECKPOINTS)}), so --overwrite will not replace it; choose another {named}"
        )


def _is_run(folder: Path) -> bool:
    """Whether `folder` holds a tsformer run: a config.yaml of exactly the Config's sections, and a
    checkpoint beside it (a file merely named config.yaml or model.pt is no proof: --overwrite deletes the folder)."""
    if not any((folder / name).is_file() for name in CHECKPOINTS):
        return False
    try:
        raw = yaml.safe_load((folder / CONFIG_FILE).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(raw, dict) and set(raw) == CONFIG_SECTIONS


def _sibling(out_dir: Path, kind: str) -> Path:
    return out_dir.parent / f".{out_dir.name}.{kind}"


def _lock(out_dir: Path, named: str) -> tuple[int, int]:
    """An exclusive flock on `.NAME.lock`, holding our pid; returns (fd, pid of a killed previous owner or 0).

    The owner unlinks the file before unlocking, so a waiter may lock an unlinked file: it checks
    that the path still names the file it locked, and tries again if not.
    """
    path = _sibling(out_dir, "lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_pid(fd)
            os.close(fd)
            raise ConfigError(
                f"run folder {out_dir} is being written by another tsformer (process {owner or 'unknown'}); "
                f"wait for it to finish, or choose another {named}"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    stale = _read_pid(fd)  # a pid in a file nobody holds: its owner was killed before it could unlink it
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd, stale


def _read_pid(fd: int) -> int:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0)
    except (ValueError, UnicodeDecodeError, OSError):
        return 0


def resolve_checkpoint(run: str | Path) -> Path:
    """A run folder (its model.pt) or a checkpoint file."""
    run = Path(run)
    if run.is_dir():
        path = run / MODEL_FILE
        if not path.is_file():
            raise CheckpointError(
                f"run folder {run} has no {MODEL_FILE}; train into it first (tsformer train ... --out {run})"
            )
        return path
    if run.is_file():
        return run
    raise CheckpointError(f"run {run} not found; give a run folder made by tsformer train")

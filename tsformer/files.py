"""Atomic file writes: every file tsformer writes appears whole or not at all.

The content is written to a hidden temp file beside the destination, flushed to disk, then
renamed over it. A failure (full disk, kill, exception in the writer) leaves the old file,
or none, and removes the temp file. A symlink destination is written through: its target is
replaced and the link stays.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from tsformer.errors import ConfigError, DataError

TEMP_SUFFIX = ".tmp"


def destination(path: str | Path) -> Path:
    """The file a write to `path` replaces: the final target of a symlink, else `path` itself."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """`with atomic_open(path) as handle:` write bytes; renamed over `path` only if the block succeeds."""
    target = destination(path)
    check_output_path(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.errno is None:  # not the file system's (a network error inside the block, say): as it is
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None  # the user's path, not the temp file
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_path(path: str | Path, flag: str = "") -> None:
    """Refuse, before any work, an output path that is a folder or whose folder does not exist."""
    path = Path(path)
    named = f"{flag} {path}" if flag else str(path)
    if path.is_dir():
        raise ConfigError(f"{named} is a folder; give a file path, such as {path / 'forecast.csv'}")
    if not destination(path).parent.is_dir():
        raise ConfigError(f"{named}: folder {path.parent} does not exist; create it or choose another path")


def require_file(path: Path) -> None:
    """A DataError unless `path` is a file (the commands check their inputs so, before they load torch)."""
    if not path.exists():
        raise DataError(f"file {path} not found; check the path")
    if not path.is_file():
        raise DataError(f"{path} is not a file; give the path of a CSV file")


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """Call `write(handle)` on a temp file, then rename it over `path`."""
    with atomic_open(path) as handle:
        write(handle)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def remove_temp_files(folder: Path) -> None:
    """Temp files of writes into `folder` that a kill interrupted (the rename never happened)."""
    for stale in folder.glob(f".*{TEMP_SUFFIX}"):
        stale.unlink(missing_ok=True)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current

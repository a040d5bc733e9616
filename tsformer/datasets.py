"""Known benchmark datasets: where they live on disk, and fetching them into a cache.

Data files are never part of the repository: they are read at run time from a data directory,
the first that exists of --data-dir, $TSFORMER_DATA_DIR, ../shared/data and the download cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tsformer.errors import DataError


@dataclass(frozen=True)
class Dataset:
    name: str
    file: str
    url: str  # public download address; "" when there is no stable one
    sha256: str
    about: str


REGISTRY = {
    d.name: d
    for d in (
        Dataset(
            "etth1",
            "ETTh1.csv",
            "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/ETTh1.csv",
            "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066",
            "Electricity Transformer Temperature, hourly, 7 columns, 17420 rows (CC BY-ND 4.0, ETDataset)",
        ),
        Dataset(
            "illness",
            "national_illness.csv",
            "",
            "8594cecb98c6f2f9dc014eca11c4d5d1e38ad5ce6ed0592d4abe65b146fce395",
            "US CDC weekly influenza-like illness, 7 columns, 966 rows (from the Autoformer benchmark bundle)",
        ),
    )
}


def cache_dir() -> Path:
    return Path(os.environ.get("TSFORMER_CACHE_DIR") or Path.home() / ".cache" / "tsformer")


def data_dirs(data_dir: str | Path | None = None) -> list[Path]:
    """Where data files are looked up, in order."""
    candidates = [data_dir, os.environ.get("TSFORMER_DATA_DIR"), Path("..") / "shared" / "data", cache_dir()]
    return [Path(c) for c in candidates if c]


def resolve_data_path(path: str | Path, data_dir: str | Path | None = None) -> Path:
    """`path` itself when it exists, else a bare file name looked up in the data directories."""
    path = Path(path)
    if path.exists() or path.is_absolute():
        return path
    for folder in data_dirs(data_dir):
        if (folder / path.name).is_file():
            return folder / path.name
    return path  # reading it reports "not found" with the path the user gave


def fetch(name: str, dest: str | Path | None = None, timeout: float = 30.0) -> Path:
    """Download a registered dataset into `dest` (default: the cache), verifying its sha256."""
    if name not in REGISTRY:
        raise DataError(f"unknown dataset {name!r}; known datasets: {', '.join(REGISTRY)}")
    entry = REGISTRY[name]
    folder = Path(dest) if dest else cache_dir()
    target = folder / entry.file
    if target.is_file() and sha256_of(target) == entry.sha256:
        return target
    if not entry.url:
        raise DataError(f"{name} has no stable public download address; put {entry.file} in {folder} or a --data-dir")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{entry.file}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(entry.url, timeout=timeout) as response:
            while chunk := response.read(1 << 20):
                out.write(chunk)
        digest = sha256_of(Path(tmp))
        if digest != entry.sha256:
            raise DataError(f"downloaded {entry.file} has sha256 {digest}, expected {entry.sha256}; try again later")
        os.replace(tmp, target)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DataError(
            f"cannot download {name} from {entry.url} ({getattr(exc, 'reason', exc)}); if offline, copy "
            f"{entry.file} into {folder} by hand"
        ) from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

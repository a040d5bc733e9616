"""Known benchmark datasets: where they live on disk, and fetching them into a cache.

Data files are never part of the repository. A CSV given by bare file name is looked up, in order,
in --data-dir, $TSFORMER_DATA_DIR and the download cache ($TSFORMER_CACHE_DIR, default
~/.cache/tsformer). Nothing is looked up relative to the package, so an installed wheel behaves like
a checkout; `make` sets TSFORMER_DATA_DIR=../shared/data for the benchmark, batch runs and tests.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tsformer.errors import DataError
from tsformer.files import atomic_open


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
    """Where `fetch` downloads to: $TSFORMER_CACHE_DIR, default ~/.cache/tsformer."""
    return Path(os.environ.get("TSFORMER_CACHE_DIR") or Path.home() / ".cache" / "tsformer")


def data_dirs(data_dir: str | Path | None = None) -> list[Path]:
    """Where data files are looked up, in order: `data_dir` (--data-dir), $TSFORMER_DATA_DIR, the cache."""
    candidates = [data_dir, os.environ.get("TSFORMER_DATA_DIR"), cache_dir()]
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


def beside_config(path: str | Path, config: str | Path | None) -> Path:
    """A config's relative data path: as given where it exists from the current folder, else from the config's own
    folder where it is a file there (`tsformer train --config` and `tsformer bench` alike), else as given."""
    path = Path(path)
    if config is None or path.exists() or path.is_absolute():
        return path
    beside = Path(config).parent / path
    return beside if beside.is_file() else path


def find_data_file(
    path: str | Path, data_dir: str | Path | None = None, flag: str = "--data-dir", config: str | Path | None = None
) -> Path:
    """`resolve_data_path` (of `beside_config` where the path is a config's), refusing a relative path found
    nowhere with where it was looked for (and, for a known dataset's file, how to fetch it); `flag`: the option
    that names a data directory ("" where there is none)."""
    found = resolve_data_path(beside_config(path, config), data_dir)
    if found.exists() or found.is_absolute():
        return found  # an absolute path missing: reading it says so
    places = ", ".join(str(folder) for folder in data_dirs(data_dir))
    known = [d for d in REGISTRY.values() if d.file.lower() == found.name.lower()]
    fetch = f", or fetch it: tsformer datasets fetch {known[0].name}" if known else ""
    beside = f", beside the config {config}" if config is not None else ""
    raise DataError(
        f"file {path} not found here{beside} or in the data directories ({places}); check the path, or "
        f"{f'pass {flag} (or set TSFORMER_DATA_DIR)' if flag else 'set TSFORMER_DATA_DIR'} to the folder that holds "
        f"it{fetch}"
    )


def fetch(name: str, dest: str | Path | None = None, timeout: float = 30.0) -> Path:
    """Download a registered dataset into `dest` (default: the cache), verifying its sha256.

    The file appears under its final name only once its checksum matches; a failed or wrong
    download leaves nothing behind (and an existing valid file is not downloaded again).
    """
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
    try:
        with atomic_open(target) as out, urllib.request.urlopen(entry.url, timeout=timeout) as response:
            digest = hashlib.sha256()
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
            if digest.hexdigest() != entry.sha256:  # raised inside the block: the temp file is removed, no rename
                raise DataError(
                    f"downloaded {entry.file} has sha256 {digest.hexdigest()}, expected {entry.sha256} "
                    "(a broken download or a changed upstream file); nothing was kept"
                )
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DataError(
            f"cannot download {name} from {entry.url} ({getattr(exc, 'reason', exc)}); if offline, copy "
            f"{entry.file} into {folder} by hand"
        ) from None
    return target


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

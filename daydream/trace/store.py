"""The on-disk form of a normalized `Trace`, and the cache built on it.

A trace is stored as one uncompressed `.npz`: numpy arrays and UTF-8 bytes
only, read back with `allow_pickle=False`, so opening a cache file someone
hands you never runs code. The cache lives in `$DAYDREAM_CACHE_DIR` (default
`$XDG_CACHE_HOME/daydream`, else `~/.cache/daydream`); an entry is reused only
while the source's path, size and mtime and daydream's `STORE_VERSION` match.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from daydream._files import atomic_output
from daydream.trace.model import GpuInfo, Trace, TraceMeta, Track, TrackKind

#: Bump whenever the normalized model or what readers put in it changes.
STORE_VERSION = 6


def cache_dir() -> Path:
    explicit = os.environ.get("DAYDREAM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "daydream"


def cache_path(identity: str) -> Path:
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:32]
    return cache_dir() / f"{digest}.npz"


def save(trace: Trace, path: Path, stamp: dict[str, Any]) -> None:
    """Write `trace` to `path` atomically (temporary file, then rename)."""
    arrays: dict[str, np.ndarray] = {}
    header = {
        "store_version": STORE_VERSION,
        "stamp": stamp,
        "meta": _meta_to_json(trace.meta),
        "tracks": [[int(t.kind), t.pid, t.tid, t.device, t.stream] for t in trace.tracks],
    }
    arrays["header"] = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    blob, offsets = _pack_strings(trace.strings)
    arrays["strings.blob"] = blob
    arrays["strings.offsets"] = offsets
    for key, column in trace.columns.items():
        arrays[f"col.{key}"] = column
    for table, columns in trace.tables.items():
        for key, column in columns.items():
            arrays[f"tab.{table}.{key}"] = column
    for key, column in trace.derived.items():
        arrays[f"der.{key}"] = column
    with atomic_output(path) as out:
        np.savez(out, **arrays)  # type: ignore[arg-type]


def load(path: Path, stamp: dict[str, Any] | None = None) -> Trace | None:
    """Read a stored trace; None when it is missing, stale (stamp differs) or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            header = json.loads(stored["header"].tobytes().decode("utf-8"))
            if header.get("store_version") != STORE_VERSION:
                return None
            if stamp is not None and header.get("stamp") != stamp:
                return None
            arrays = {key: stored[key] for key in stored.files}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return _assemble(header, arrays)


def _assemble(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> Trace:
    columns: dict[str, np.ndarray] = {}
    tables: dict[str, dict[str, np.ndarray]] = {}
    derived: dict[str, np.ndarray] = {}
    for key, array in arrays.items():
        if key.startswith("col."):
            columns[key[4:]] = array
        elif key.startswith("tab."):
            table, column = key[4:].split(".", 1)
            tables.setdefault(table, {})[column] = array
        elif key.startswith("der."):
            derived[key[4:]] = array
    tracks = [Track(TrackKind(k), pid, tid, device, stream) for k, pid, tid, device, stream in header["tracks"]]
    strings = _unpack_strings(arrays["strings.blob"], arrays["strings.offsets"])
    return Trace(
        meta=_meta_from_json(header["meta"]),
        strings=strings,
        tracks=tracks,
        columns=columns,
        tables=tables,
        derived=derived,
    )


def _pack_strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def _unpack_strings(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    data = blob.tobytes()
    bounds = offsets.tolist()
    return [data[a:b].decode("utf-8", "surrogatepass") for a, b in zip(bounds, bounds[1:])]


def _meta_to_json(meta: TraceMeta) -> dict[str, Any]:
    return asdict(meta)


def _meta_from_json(data: dict[str, Any]) -> TraceMeta:
    data = dict(data)
    data["gpus"] = [GpuInfo(**g) for g in data.get("gpus", [])]
    return TraceMeta(**data)

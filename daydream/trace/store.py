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
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from daydream._files import atomic_output
from daydream.trace.model import (
    EVENT_COLUMNS,
    SIDE_TABLES,
    GpuInfo,
    Trace,
    TraceMeta,
    Track,
    TrackKind,
)

#: Bump whenever the normalized model or what readers put in it changes.
STORE_VERSION = 13


def cache_dir() -> Path:
    explicit = os.environ.get("DAYDREAM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME")
    if base:
        return Path(base) / "daydream"
    home = os.environ["HOME"] if "HOME" in os.environ else os.path.expanduser("~")
    if home and home != "/" and os.path.isdir(home):
        return Path(home) / ".cache" / "daydream"
    # No usable home (HOME empty, "/" or missing): a per-user folder in the temporary directory,
    # never "/.cache" or a home folder created on the way.
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"daydream-cache-{user}"


def cache_path(identity: str) -> Path:
    # a path of non-UTF-8 bytes
    digest = hashlib.sha256(identity.encode("utf-8", errors="surrogateescape")).hexdigest()[:32]
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
    with atomic_output(path, cache=True) as out:
        # numpy's stubs omit the binary file object it takes
        np.savez(out, **arrays)  # type: ignore[arg-type]
    remove_stale_temporaries(path.parent)


def load(path: Path, stamp: dict[str, Any] | None = None) -> Trace | None:
    """Read a stored trace; None when it is missing, stale (stamp
    differs), unreadable or inconsistent.

    A cache file is checked as untrusted input: any defect (empty, truncated, columns of
    different lengths, string offsets or row references out of range) means "read the
    trace again", never a wrong answer or an error.
    """
    try:
        if not path.is_file():
            # missing, or a FIFO / device / folder in its place (or a
            # link to one): opening would hang
            return None
        with np.load(path, allow_pickle=False) as stored:
            header = json.loads(stored["header"].tobytes().decode("utf-8"))
            if not isinstance(header, dict) or header.get("store_version") != STORE_VERSION:
                return None
            if stamp is not None and header.get("stamp") != stamp:
                return None
            arrays = {key: stored[key] for key in stored.files}
        trace = _assemble(header, arrays)
        return trace if _consistent(trace) else None
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 — a damaged cache entry of any kind is a cache miss
        return None


def _consistent(trace: Trace) -> bool:
    """Whether every column has one row per event and every reference points inside its target."""
    rows = {column.shape[0] for column in trace.columns.values()}
    if len(rows) != 1 or any(column.ndim != 1 for column in trace.columns.values()):
        return False
    (count,) = rows
    for key, dtype in EVENT_COLUMNS.items():
        if key not in trace.columns or trace.columns[key].dtype != np.dtype(dtype):
            return False
    if count and (_out_of(trace.columns["name"], len(trace.strings))
                  or _out_of(trace.columns["track"], len(trace.tracks))):
        return False
    for name, table in trace.tables.items():
        lengths = {column.shape[0] for column in table.values()}
        if (len(lengths) > 1
            or ("event" in table and table["event"].size and _out_of(table["event"], count))):
            return False
        if name not in SIDE_TABLES or set(table) != set(SIDE_TABLES[name]):
            return False
    return True


def _out_of(references: np.ndarray, size: int) -> bool:
    return bool(references.min() < 0 or references.max() >= size)


def remove_stale_temporaries(folder: Path, older_than_s: float = 3600.0) -> None:
    """Delete temporary files a killed writer left in `folder`
    (atomic_output's .tmp-*), once they are old."""
    now = time.time()
    for leftover in folder.glob(".tmp-*"):
        try:
            if now - leftover.stat().st_mtime > older_than_s:
                leftover.unlink()
        except OSError:
            pass


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
    tracks = [Track(TrackKind(k), pid, tid, device, stream)
              for k, pid, tid, device, stream in header["tracks"]]
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
    if (offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0 or offsets[-1] != len(data)
        or np.any(np.diff(offsets) < 0)):
        raise ValueError("string offsets do not fit the string table")
    bounds = offsets.tolist()
    return [data[a:b].decode("utf-8", "surrogatepass") for a, b in zip(bounds, bounds[1:])]


def _meta_to_json(meta: TraceMeta) -> dict[str, Any]:
    return asdict(meta)


def _meta_from_json(data: dict[str, Any]) -> TraceMeta:
    data = dict(data)
    data["gpus"] = [GpuInfo(**g) for g in data.get("gpus", [])]
    return TraceMeta(**data)

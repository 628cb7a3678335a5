"""The window scanner (what it reads: layout.py), in whichever implementation is here: the C
extension `_scan`, built with the package where a compiler was at hand, else the numba kernels of
scan_jit.py, else none (msgspec then reads every window). Both implementations take and give the
same values through the functions below; `IMPLEMENTATION` names the one in use.

The C one costs a process nothing to load; the numba one about 0.13 s (numba's own start, the first
call of any compiled function), which is why stream.py scans with it only past `SCAN_FROM` bytes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType
from typing import Any

import numpy as np

from daydream.trace.kineto.layout import (
    DIMS,
    END,
    FAILED,
    HOT,
    HOT_FIELDS,
    HOT_KEYS,
    KNOWN,
    LAYOUT,
    MAX_DEPTH,
    PARTIAL,
    RAWS,
    TOP,
)

__all__ = ["END", "FAILED", "HOT_FIELDS", "HOT_KEYS", "IMPLEMENTATION", "PARTIAL", "available",
           "joined_spans", "number", "same_spans", "scan", "span_hashes", "value_end"]

Text = bytes | bytearray

def _built() -> Any:
    """The C scanner, where it was built for this layout (an extension left from an older build of
    other columns is not used: numba's kernels read instead); else None."""
    try:
        compiled = importlib.import_module("daydream.trace.kineto._scan")
    except ImportError:  # built without a compiler: the numba kernels, where numba is here
        return None
    if compiled.LAYOUT_SIZE != LAYOUT.size or compiled.MAX_DEPTH != MAX_DEPTH:
        return None
    return compiled


_compiled: Any = _built()


def available() -> tuple[str, ...]:
    """The implementations here, the one used by default first: "c", "numba" (DAYDREAM_NO_JIT
    turns numba off, as in _jit.py)."""
    found: tuple[str, ...] = ("c",) if _compiled is not None else ()
    if not os.environ.get("DAYDREAM_NO_JIT") and importlib.util.find_spec("numba") is not None:
        found += ("numba",)
    return found


#: The implementation the functions below use (tests set it to check one against the other).
IMPLEMENTATION: str | None = next(iter(available()), None)


def _kernels() -> ModuleType:
    from daydream.trace.kineto import scan_jit  # numba: compiled (or loaded) on first use

    return scan_jit


def _int64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64)


def _c() -> Any:
    return _compiled if IMPLEMENTATION == "c" else None


def scan(text: Text, start: int, end: int, out: np.ndarray,
         times: np.ndarray) -> tuple[int, int, int]:
    """Read the events of text[start:end] (the text after a list's "[" or an event's comma) into
    `out` (rows of layout.WIDTH int64) and `times` (rows of ts and dur): (events read, where
    reading stopped, END, PARTIAL or FAILED). Reading stops at the "]" (END); where the text or
    `out` ends, before the event there (PARTIAL); before an event the scanner does not read
    (FAILED). An event counts once the comma or "]" after it is read."""
    compiled = _c()
    if compiled is not None:
        result: tuple[int, int, int] = compiled.scan(text, start, end, out, times, LAYOUT,
                                                     *TOP, *HOT, *DIMS, *RAWS,
                                                     *KNOWN)
        return result
    buffer = np.frombuffer(text, dtype=np.uint8)
    count, stop, status = _kernels().scan(buffer, start, end, out, times)
    del buffer
    return int(count), int(stop), int(status)


def span_hashes(text: Text, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """FNV-1a of each span's bytes, as int64 (an absent span, start -1, as the empty text)."""
    compiled = _c()
    if compiled is not None:
        hashes = np.empty(starts.size, dtype=np.int64)
        compiled.span_hashes(text, _int64(starts), _int64(stops), hashes)
        return hashes
    buffer = np.frombuffer(text, dtype=np.uint8)
    hashes = _kernels().span_hashes(buffer, _int64(starts), _int64(stops))
    del buffer
    return hashes


def same_spans(text: Text, starts: np.ndarray, stops: np.ndarray, first: np.ndarray) -> bool:
    """Whether each span holds the same bytes as the span `first` names for it."""
    compiled = _c()
    if compiled is not None:
        return bool(compiled.same_spans(text, _int64(starts), _int64(stops), _int64(first)))
    buffer = np.frombuffer(text, dtype=np.uint8)
    same = bool(_kernels().same_spans(buffer, _int64(starts), _int64(stops), _int64(first)))
    del buffer
    return same


def joined_spans(text: Text, starts: np.ndarray, stops: np.ndarray) -> bytes:
    """The spans' bytes as one JSON list: "[" span "," span ... "]"."""
    compiled = _c()
    if compiled is not None:
        joined: bytes = compiled.joined_spans(text, _int64(starts), _int64(stops))
        return joined
    buffer = np.frombuffer(text, dtype=np.uint8)
    array = _kernels().joined_spans(buffer, _int64(starts), _int64(stops))
    del buffer
    return bytes(array)


def number(text: bytes, pos: int) -> tuple[int, int, int, float]:
    """The JSON number at text[pos:]: (past it, kind, its int, its float). Kind 1: an int (exact),
    2: an int beyond int64, 3: a fraction read exactly, 4: a number to read in Python."""
    compiled = _c()
    if compiled is not None:
        result: tuple[int, int, int, float] = compiled.number(text, pos, len(text))
        return result
    buffer = np.frombuffer(text, dtype=np.uint8)
    after, kind, value, real = _kernels()._number(buffer, pos, buffer.size)
    return int(after), int(kind), int(value), float(real)


def value_end(text: bytes, pos: int) -> int:
    """Past the JSON value at text[pos:] as the scanner skips a value it does not keep; OUT where
    the text ends first, BAD where it is not JSON the scanner reads."""
    compiled = _c()
    if compiled is not None:
        return int(compiled.value_end(text, pos, len(text)))
    buffer = np.frombuffer(text, dtype=np.uint8)
    return int(_kernels()._skip(buffer, pos, buffer.size))

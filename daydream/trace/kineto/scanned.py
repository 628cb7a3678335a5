"""The events the compiled scanner (scan.py) read, as `_Columns` reads a chunk (`rows.Rows`): its
columns, the strings and numbers it left to Python decoded, and the args it left to msgspec decoded
in one batch.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import numpy as np

from daydream.trace.kineto import layout, scan
from daydream.trace.kineto.rows import Coded, Flow, arg_ints, arg_marks
from daydream.trace.kineto.schema import _EMPTY_ARGS, _Args, _within_limit
from daydream.trace.model import NO_VALUE

Text = bytes | bytearray

_FULL_ARGS = msgspec.json.Decoder(list[_Args])
#: Rows scanned at a time (the columns the scanner writes: layout.WIDTH int64 a row).
SCAN_ROWS = 1 << 15


class NotScanned(Exception):
    """What the scanner read cannot be taken as msgspec would read it: the text is read by
    msgspec instead."""


class Scratch:
    """The scanner's output columns, kept from one window to the next: columns made fresh for each
    window are handed fresh pages by the C library, and taking them costs about as much as the scan
    (a 35 MB trace: 56 ms scanned into fresh columns, 33 ms into kept ones). Given up where anything
    still views them once a chunk's rows are added."""

    def __init__(self) -> None:
        self.arrays: tuple[np.ndarray, np.ndarray] | None = None

    def get(self) -> tuple[np.ndarray, np.ndarray]:
        if self.arrays is None:
            self.arrays = (np.empty((SCAN_ROWS, layout.WIDTH), dtype=np.int64),
                           np.empty((SCAN_ROWS, 2), dtype=np.float64))
        return self.arrays

    def release(self) -> None:
        """The chunk read into them is done with: keep them only where nothing else refers to
        them (a view of them kept would see the next window's rows)."""
        if self.arrays is not None and max(map(sys.getrefcount, self.arrays)) > _UNVIEWED:
            self.arrays = None


#: What sys.getrefcount gives for an array only `Scratch.arrays` refers to (the tuple, the
#: argument).
_UNVIEWED = 2


def scan_events(buffer: bytearray, start: int, end: int | None = None,
                scratch: Scratch | None = None) -> tuple[ScannedRows | None, int, int]:
    """The events of `buffer[:end]` from `start` (just after "[" or a comma) as far as the scanner
    reads them: (their rows, None where it read none; where it stopped; scan.END, PARTIAL or
    FAILED); into `scratch`'s columns where given."""
    end = len(buffer) if end is None else end
    if scratch is not None:
        out, times = scratch.get()
    else:
        rows = min(SCAN_ROWS, end // 32 + 16)
        out = np.empty((rows, layout.WIDTH), dtype=np.int64)
        times = np.empty((rows, 2), dtype=np.float64)
    count, stop, status = scan.scan(buffer, start, end, out, times)
    if count == 0:
        return None, stop, status
    try:
        scanned = ScannedRows(buffer, out[:count], times[:count])
    except NotScanned:
        return None, start, scan.FAILED
    return scanned, stop, status


class ScannedRows:
    """Events the scanner read: its columns, the strings and numbers it left to Python decoded, and
    the args it left to msgspec decoded (`full`: row -> `_Args`)."""

    def __init__(self, text: Text, out: np.ndarray, times: np.ndarray) -> None:
        """Every string and number decoded now, from `text` (not kept): what cannot be is found
        before any column takes these rows."""
        self.out = out
        self.at: np.ndarray | None = None  # the row of `out` each row is (None: the same)
        self.size = out.shape[0]
        self.ts, self.dur = _slow_numbers(text, out, times)
        self.full = _full_args(text, out)
        flags = out[:, layout.I_FLAGS]
        self._coded: dict[int, Coded] = {
            column: _distinct_texts(text, out[:, column], out[:, column + 1],
                                    (flags & flag) != 0, out[:, hashes])
            for column, hashes, flag in ((layout.I_CAT, layout.I_CAT_HASH, layout.F_CAT),
                                         (layout.I_NAME, layout.I_NAME_HASH, layout.F_NAME))}
        self._coded[layout.I_PID] = _ids(text, out, layout.I_PID, layout.F_PID)
        self._coded[layout.I_TID] = _ids(text, out, layout.I_TID, layout.F_TID)
        self.raws = _raw_values(text, out)

    def _cells(self, rows: Any, columns: Any) -> Any:
        """The scanner's cells of these rows (an index, a slice, an array of rows) and columns."""
        return self.out[rows if self.at is None else self.at[rows], columns]

    def cats(self) -> Coded:
        return self._coded[layout.I_CAT]

    def names(self) -> Coded:
        return self._coded[layout.I_NAME]

    def pids(self) -> Coded:
        return self._coded[layout.I_PID]

    def tids(self) -> Coded:
        return self._coded[layout.I_TID]

    def matching(self, rows: np.ndarray, test: Callable[[str], bool],
                 phs: tuple[str, ...]) -> np.ndarray:
        names, at = self.names()
        assert at is not None
        passed = np.array([test(name) for name in names], dtype=bool)
        # ph as the scanner writes it: one ASCII character's code (layout.I_PH)
        codes = [ord(ph) if len(ph) == 1 and ph.isascii() else _PH_CODE.get(ph, -3) for ph in phs]
        return rows[passed[at[rows]] & np.isin(self._cells(rows, layout.I_PH), codes)]

    def flows(self, rows: list[int]) -> Iterator[Flow]:
        pids, pid_at = self.pids()
        tids, tid_at = self.tids()
        assert pid_at is not None and tid_at is not None
        picked = self._cells(rows, slice(None))
        ph = picked[:, layout.I_PH]
        flowing = np.flatnonzero(((ph == 115) | (ph == 102)) & (picked[:, layout.I_ID] == 1))
        chosen = np.asarray(rows, dtype=np.int64)[flowing]
        for flow_id, ts, pid, tid, mark in zip(picked[flowing, layout.I_ID + 1].tolist(),
                                              self.ts[chosen].tolist(), pid_at[chosen].tolist(),
                                              tid_at[chosen].tolist(), ph[flowing].tolist()):
            yield flow_id, ts, (pids[pid], tids[tid]), mark == 115

    def take(self, rows: np.ndarray) -> ScannedRows:
        if rows.size == self.size:
            return self
        taken = object.__new__(ScannedRows)
        taken.out, taken.size = self.out, rows.size
        taken.at = rows if self.at is None else self.at[rows]
        taken.ts, taken.dur = self.ts[rows], self.dur[rows]
        taken.full = {}
        if self.full:
            renumbered = np.full(self.size, -1, dtype=np.int64)
            renumbered[rows] = np.arange(rows.size)
            new_rows = renumbered.tolist()
            taken.full = {new_rows[row]: args for row, args in self.full.items()
                          if new_rows[row] >= 0}
        # the names of the rows kept, no other: the trace's strings hold only names of its events
        # (a pid or tid of no kept row is harmless: tracks are made from rows)
        taken._coded = {column: _subset(values, at, rows) if column == layout.I_NAME
                        else (values, None if at is None else at[rows])
                        for column, (values, at) in self._coded.items()}
        taken.raws = {field: (values, at[rows]) for field, (values, at) in self.raws.items()}
        return taken

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        return self.ts.copy(), self.dur.copy()

    def arg_values(self, rows: list[int], fields: tuple[str, ...]) -> list[list[Any]]:
        """From the scanner's columns where it read the field, msgspec's args where it did not."""
        picked = np.asarray(rows, dtype=np.int64)
        seen = self._cells(picked, layout.I_SEEN)
        full = [(at, self.full[row]) for at, row in enumerate(rows) if row in self.full] if (
            self.full) else []
        values = []
        for field in fields:
            listed = self._read(picked, seen, field)
            for at, args in full:
                listed[at] = getattr(args, field)
            values.append(listed)
        return values

    def _read(self, rows: np.ndarray, seen: np.ndarray, field: str) -> list[Any]:
        """`field` of each of `rows` as the scanner read it: its default where it read none (the
        rows whose args msgspec read are replaced by the caller)."""
        default = getattr(_EMPTY_ARGS, field)
        read = (seen & layout.SEEN_BIT.get(field, 0)) != 0
        if field in self.raws:
            values, at = self.raws[field]
            return [values[i] if i >= 0 else default for i in at[rows].tolist()]
        if field in layout.DIM_KEYS:
            column = layout.I_DIMS + 3 * layout.DIM_KEYS.index(field)
            dims = self._cells(rows, slice(column, column + 3)).tolist()
            return [dim if was_read else default for dim, was_read in zip(dims, read.tolist())]
        if field not in layout.HOT_FIELDS:
            return [default] * rows.size
        values = self._cells(rows, layout.I_HOT + layout.HOT_FIELDS.index(field))
        return np.where(read, values, default).tolist()

    def device_stream(self, row: int) -> tuple[Any, Any]:
        if row in self.full:
            return self.full[row].device, self.full[row].stream
        hot = layout.I_HOT + layout.HOT_FIELDS.index("device")
        return int(self._cells(row, hot)), int(self._cells(row, hot + 1))

    def ints(self) -> dict[str, np.ndarray]:
        hot = {field: self._cells(slice(None), layout.I_HOT + k)
               for k, field in enumerate(layout.HOT_FIELDS)}
        columns = {"correlation": hot["correlation"],
                   "external_id": np.where(hot["external_id"] != NO_VALUE, hot["external_id"],
                                           hot["external_id_legacy"]),
                   "sequence": hot["sequence"], "bytes": hot["bytes"]}
        columns = {key: _within_limit(values.copy()) for key, values in columns.items()}
        if self.full:
            rows = np.fromiter(self.full, dtype=np.int64, count=len(self.full))
            for key, values in arg_ints(list(self.full.values())).items():
                columns[key][rows] = values
        return columns

    def marks(self) -> dict[str, np.ndarray]:
        seen = self._cells(slice(None), layout.I_SEEN)
        marks = {"collective": np.zeros(self.size, dtype=bool),
                 "grid": (seen & layout.SEEN_BIT["grid"]) != 0,
                 "dims": (seen & layout.SEEN_BIT["input_dims"]) != 0}
        if self.full:
            rows = np.fromiter(self.full, dtype=np.int64, count=len(self.full))
            for key, values in arg_marks(list(self.full.values())).items():
                marks[key][rows] = values
        return marks


def _subset(values: list[Any], at: np.ndarray | None, rows: np.ndarray) -> Coded:
    """The coded values of `rows`: only the distinct values they use."""
    assert at is not None
    picked = at[rows]
    used = np.zeros(len(values), dtype=bool)
    used[picked] = True
    renumbered = np.cumsum(used) - 1
    return [value for value, kept in zip(values, used.tolist()) if kept], renumbered[picked]


#: ph as the scanner writes it when it is not one ASCII character: absent (-1), another string (-2).
_PH_CODE = {"": -1}


def _raw_values(text: Text, out: np.ndarray) -> dict[str, tuple[list[msgspec.Raw], np.ndarray]]:
    """Per recorded-shape field the scanner read in some row: its distinct values (the JSON text,
    as msgspec.Raw), and each row's index among them (-1 where it read none)."""
    found = {}
    scanned = (out[:, layout.I_FULL] == 0)
    for k, field in enumerate(layout.RAW_FIELDS):
        rows = np.flatnonzero(scanned & ((out[:, layout.I_SEEN] & layout.SEEN_BIT[field]) != 0))
        if not rows.size:
            continue
        starts = out[rows, layout.I_RAWS + 2 * k]
        stops = out[rows, layout.I_RAWS + 2 * k + 1]
        first, inverse = _distinct_spans(text, starts, stops)
        at = np.full(out.shape[0], -1, dtype=np.int64)
        at[rows] = inverse
        found[field] = ([msgspec.Raw(bytes(text[starts[i]:stops[i]])) for i in first.tolist()],
                        at)
    return found


def _ids(text: Text, out: np.ndarray, column: int, flag: int) -> Coded:
    """pid or tid: ints as written, strings where written as strings, NO_VALUE where absent."""
    kind, value = out[:, column], out[:, column + 1]
    texts = kind == 2
    inverse = np.zeros(out.shape[0], dtype=np.int64)
    distinct, _, inverse[~texts] = unique(np.where(kind == 1, value, NO_VALUE)[~texts])
    values: list[Any] = distinct.tolist()
    if texts.any():
        written = out[texts]
        strings, at = _distinct_texts(text, written[:, column + 1], written[:, column + 2],
                                      (written[:, layout.I_FLAGS] & flag) != 0)
        assert at is not None
        inverse[texts] = at + len(values)
        values += strings
    return values, inverse


def _distinct_texts(text: Text, starts: np.ndarray, stops: np.ndarray, marked: np.ndarray,
                    hashes: np.ndarray | None = None) -> Coded:
    """The distinct strings of the spans and each span's index among them (`hashes`: the spans'
    `scan.span_hashes`, where the scanner gave them)."""
    first, inverse = _distinct_spans(text, starts, stops, hashes)
    values = [_string(text, int(starts[row]), int(stops[row]), bool(marked[row]))
              for row in first.tolist()]
    return values, inverse


#: Distinct values `unique` looks for one at a time before it sorts instead.
FEW = 12


def unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`np.unique(values, return_index=True, return_inverse=True)`: one pass per distinct value
    where there are at most FEW (a chunk's categories, processes, threads), a sort where there are
    more."""
    left = np.ones(values.size, dtype=bool)
    firsts = []
    for _ in range(FEW if values.size else 0):
        at = int(np.argmax(left))
        if not left[at]:
            break
        firsts.append(at)
        left &= values != values[at]
    else:
        distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        return distinct, first, inverse.reshape(-1)
    first = np.array(firsts, dtype=np.int64)
    first = first[np.argsort(values[first], kind="stable")]
    distinct = values[first]
    return distinct, first, np.searchsorted(distinct, values)


def _distinct_spans(text: Text, starts: np.ndarray, stops: np.ndarray,
                    hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the first span of each distinct text, each span's index among them), the texts told apart
    by hash and every span checked against its hash's first."""
    if hashes is None:
        hashes = scan.span_hashes(text, starts, stops)
    distinct, first, inverse = unique(hashes)
    if hashes.size > 1 and not scan.same_spans(text, starts, stops, first[inverse]):
        raise NotScanned("two strings share a hash")
    return first, inverse


def _string(text: Text, start: int, stop: int, marked: bool) -> str:
    if start < 0:
        return ""
    if not marked:
        return text[start:stop].decode("ascii")
    try:
        value: str = msgspec.json.decode(text[start - 1:stop + 1], type=str)
    except msgspec.DecodeError as exc:
        raise NotScanned(str(exc)) from None
    return value


def _slow_numbers(text: Text, out: np.ndarray,
                  times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ts and dur, with the numbers the scanner left to Python read as msgspec reads them."""
    ts, dur = times[:, 0].copy(), times[:, 1].copy()
    for column, flag, values in ((layout.I_TS, layout.F_TS_SLOW, ts),
                                 (layout.I_DUR, layout.F_DUR_SLOW, dur)):
        for row in np.flatnonzero(out[:, layout.I_FLAGS] & flag).tolist():
            number = float(text[out[row, column]:out[row, column + 1]])
            if not math.isfinite(number):
                raise NotScanned("a number beyond a double")  # msgspec refuses it
            values[row] = number
    return ts, dur


def _full_args(text: Text, out: np.ndarray) -> dict[int, _Args]:
    """row -> its args as msgspec reads them, for the rows the scanner marked."""
    rows = np.flatnonzero(out[:, layout.I_FULL])
    if not rows.size:
        return {}
    joined = scan.joined_spans(text, out[rows, layout.I_ARGS], out[rows, layout.I_ARGS + 1])
    try:
        decoded = _FULL_ARGS.decode(joined)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise NotScanned(str(exc)) from None
    return dict(zip(rows.tolist(), decoded))


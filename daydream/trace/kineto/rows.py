"""A chunk of events as `_Columns` reads it (`Rows`), from either reader: `EventRows` over the
structs msgspec decoded, `scanned.ScannedRows` over what the compiled scanner (scan.py) read
straight from the text. Both give the same values for the same events; the scanner's side holds no
object per event.

Values that name something (categories, names, pids, tids) come as `Coded`: the distinct values and
each row's index into them (None: one value per row, in order).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any, Protocol

import numpy as np

from daydream.trace.kineto.schema import (
    _EMPTY_ARGS,
    _Args,
    _Event,
    _get_bytes,
    _get_cat,
    _get_collective,
    _get_correlation,
    _get_dims,
    _get_dur,
    _get_grid,
    _get_name,
    _get_pid,
    _get_sequence,
    _get_tid,
    _get_ts,
    _ints,
)
from daydream.trace.model import NO_VALUE

Coded = tuple[list[Any], np.ndarray | None]
#: A flow event's (id, ts in µs, (pid, tid), whether it starts the flow).
Flow = tuple[Any, float, tuple[Any, Any], bool]


def _flags(values: Iterator[Any] | map[Any], count: int) -> np.ndarray:
    return np.fromiter(values, dtype=bool, count=count)


class Rows(Protocol):
    """A chunk of events, as `_Columns.add_rows` reads it."""

    size: int

    def cats(self) -> Coded: ...

    def names(self) -> Coded: ...

    def pids(self) -> Coded: ...

    def tids(self) -> Coded: ...

    def matching(self, rows: np.ndarray, test: Callable[[str], bool],
                 phs: tuple[str, ...]) -> np.ndarray:
        """Those of `rows` whose name passes `test` and whose ph is one of `phs`."""
        ...

    def flows(self, rows: list[int]) -> Iterator[Flow]:
        """The flow events among `rows` (ph "s" or "f", an int id)."""
        ...

    def take(self, rows: np.ndarray) -> Rows:
        """These rows only, renumbered from 0."""
        ...

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        """ts and dur in µs (NaN where absent), arrays the caller may change."""
        ...

    def arg_values(self, rows: list[int], fields: tuple[str, ...]) -> list[list[Any]]:
        """Per field of `_Args`, its value in each of `rows` (the field's default where absent)."""
        ...

    def device_stream(self, row: int) -> tuple[Any, Any]:
        """The device and stream args of `row`, as written."""
        ...

    def ints(self) -> dict[str, np.ndarray]: ...

    def marks(self) -> dict[str, np.ndarray]: ...


class EventRows:
    """Events msgspec decoded (`_Event` structs)."""

    def __init__(self, events: list[_Event]) -> None:
        self.events = events
        self.size = len(events)
        self._args: list[_Args] | None = None

    def cats(self) -> Coded:
        return list(map(_get_cat, self.events)), None

    def matching(self, rows: np.ndarray, test: Callable[[str], bool],
                 phs: tuple[str, ...]) -> np.ndarray:
        events = self.events
        return np.array([i for i in rows.tolist() if events[i].ph in phs and test(events[i].name)],
                        dtype=np.int64)

    def flows(self, rows: list[int]) -> Iterator[Flow]:
        for e in map(self.events.__getitem__, rows):
            if e.ph in ("s", "f") and isinstance(e.id, int):
                yield e.id, e.ts, (e.pid, e.tid), e.ph == "s"

    def take(self, rows: np.ndarray) -> EventRows:
        if rows.size == self.size:
            return self
        return EventRows(list(map(self.events.__getitem__, rows.tolist())))

    def times(self) -> tuple[np.ndarray, np.ndarray]:
        count = self.size
        return (np.fromiter(map(_get_ts, self.events), dtype=np.float64, count=count),
                np.fromiter(map(_get_dur, self.events), dtype=np.float64, count=count))

    def names(self) -> Coded:
        return list(map(_get_name, self.events)), None

    def pids(self) -> Coded:
        return list(map(_get_pid, self.events)), None

    def tids(self) -> Coded:
        return list(map(_get_tid, self.events)), None

    @property
    def args(self) -> list[_Args]:
        """Each row's args (`_EMPTY_ARGS` where it has none): `args[row]` for the few rows read
        field by field."""
        if self._args is None:
            self._args = [e.args if e.args is not None else _EMPTY_ARGS for e in self.events]
        return self._args

    def args_of(self, rows: list[int]) -> list[_Args]:
        args = self.args
        return [args[i] for i in rows]

    def arg_values(self, rows: list[int], fields: tuple[str, ...]) -> list[list[Any]]:
        picked = self.args_of(rows)
        return [list(map(attrgetter(field), picked)) for field in fields]

    def device_stream(self, row: int) -> tuple[Any, Any]:
        return self.args[row].device, self.args[row].stream

    def ints(self) -> dict[str, np.ndarray]:
        return arg_ints(self.args)

    def marks(self) -> dict[str, np.ndarray]:
        return arg_marks(self.args)


def arg_ints(args: list[_Args]) -> dict[str, np.ndarray]:
    """The int columns every row has: correlation, external_id, sequence, bytes."""
    return {"correlation": _ints(list(map(_get_correlation, args))),
            "external_id": _ints([a.external_id if a.external_id != NO_VALUE
                                  else a.external_id_legacy for a in args]),
            "sequence": _ints(list(map(_get_sequence, args))),
            "bytes": _ints(list(map(_get_bytes, args)))}


def arg_marks(args: list[_Args]) -> dict[str, np.ndarray]:
    """Per row, whether its args name a collective, give a launch grid, record input shapes."""
    count = len(args)
    return {"collective": _flags(map(bool, map(_get_collective, args)), count),
            "grid": _flags(map(is_not, map(_get_grid, args), repeat(None)), count),
            "dims": _flags(map(len, map(_get_dims, args)), count)}

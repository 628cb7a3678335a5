"""Decoded events into the columns and side tables of a `Trace`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from daydream.errors import TraceFormatError
from daydream.trace.kineto.metadata import _meta
from daydream.trace.kineto.rows import Coded, EventRows, Flow, Rows
from daydream.trace.kineto.schema import (
    _CATEGORY_KIND,
    _COLLECTIVE_KERNEL,
    _GLOO_PREFIX,
    _GPU_KINDS,
    _INSTANT_KINDS,
    _INT32_MAX,
    _STREAM_TID,
    DURATION_LIMIT_US,
    MODULE_SPAN_PREFIX,
    SPAN_LIMIT_NS,
    TIME_LIMIT_US,
    _as_int,
    _Event,
    _Interner,
    _ints,
    _table,
)
from daydream.trace.kineto.shapes import _elementwise_bytes, _gemm_flops
from daydream.trace.model import (
    NO_VALUE,
    SIDE_TABLES,
    EventKind,
    Trace,
    Track,
    TrackKind,
    empty_table,
)

#: Per side table, its columns as the file writes them: (column, the `_Args` field it comes from,
#: how the value is kept: as given, or as text). `finish` turns the values into the table's dtypes
#: ("grid" and "block" into their x, y, z columns; "_str" columns into string ids).
_Field = tuple[str, str, Callable[[Any], Any] | None]
_SIDE_FIELDS: dict[str, list[_Field]] = {
    "memory": [(column, column, None) for column in
               ("addr", "total_allocated", "total_reserved", "device_type", "device_id")],
    "collective": [("collective_str", "collective", None), ("in_nelems", "in_nelems", None),
                   ("out_nelems", "out_nelems", None), ("group_size", "group_size", None),
                   ("dtype_str", "dtype", str), ("group_name_str", "group_name", str),
                   ("group_ranks_str", "group_ranks", str)],
    "launch_config": [(column, column, None)
                      for column in ("grid", "block", "registers", "shared_memory")],
    # kept as the file's bytes (`finish` decodes each distinct one once)
    "shapes": [("dims_str", "input_dims", bytes), ("types_str", "input_types", bytes),
               ("concrete_str", "concrete_inputs", bytes),
               ("strides_str", "input_strides", bytes)],
    "sync": [("sync_kind_str", "sync_kind", None), ("wait_on_stream", "wait_on_stream", None),
             ("wait_on_event_record_correlation", "wait_on_event_record_correlation", None),
             ("wait_on_event_id", "wait_on_event_id", None)],
}


class _Columns:
    """The trace's columns, built a chunk of decoded events at a time.

    Names, pids and tids get provisional ids as chunks arrive; `finish` renumbers them in the
    order a whole-file build gives (names sorted, "" first; tracks by pid and tid), and interns
    the side tables' strings after the names, so the result does not depend on the chunk size.
    """

    def __init__(self) -> None:
        self.decoded = 0  # events decoded, kept or not
        # events of a kind daydream keeps, before the malformed ones are dropped
        self.classified = 0
        self.cats: dict[Any, int] = {}  # category -> provisional id
        self.cat_counts = np.zeros(0, dtype=np.int64)
        self.names = _Interner()
        self.pids: dict[Any, int] = {}
        self.tids: dict[Any, int] = {}
        # first (device, stream) per track
        self.track_args: dict[tuple[int, int, int], tuple[Any, Any]] = {}
        self.pieces: defaultdict[str, list[np.ndarray]] = defaultdict(list)
        self.side: defaultdict[str, defaultdict[str, list[Any]]] = (
            defaultdict(lambda: defaultdict(list)))
        self.flows: defaultdict[str, list[Any]] = defaultdict(list)
        self.rows = 0
        # what an op's recorded shapes give (shapes.py), by its shapes: a step repeats them
        self.shape_memo: dict[Any, Any] = {}

    def add(self, events: list[_Event], skipped: dict[str, int]) -> None:
        self.add_rows(EventRows(events), skipped)

    def add_rows(self, rows: Rows, skipped: dict[str, int]) -> None:
        """One chunk of events, from either reader."""
        self.decoded += rows.size
        cats = _coded(self.cats, rows.cats())
        counts = np.bincount(cats, minlength=len(self.cats))
        counts[:self.cat_counts.size] += self.cat_counts
        self.cat_counts = counts
        if "fwdbwd" in self.cats:
            self._add_flows(rows.flows(np.flatnonzero(cats == self.cats["fwdbwd"]).tolist()))
        kinds = _classify(rows, cats, self.cats)
        keep = np.flatnonzero(kinds >= 0)
        self.classified += keep.size
        if keep.size == 0:
            return
        kept, kind = rows.take(keep), kinds[keep]
        ts_ns, dur_ns, valid = _times(*kept.times(), kind, skipped)
        if not valid.all():
            select = np.flatnonzero(valid)
            kept, kind = kept.take(select), kind[select]
            ts_ns, dur_ns = ts_ns[select], dur_ns[select]
            if not kept.size:
                return
        self._add_kept(kept, kind, ts_ns, dur_ns)

    def _add_kept(self, kept: Rows, kind: np.ndarray, ts_ns: np.ndarray,
                  dur_ns: np.ndarray) -> None:
        names = self.names.many_coded(kept.names())
        is_gpu = np.isin(kind, [int(k) for k in _GPU_KINDS])
        pids = _coded(self.pids, kept.pids())
        tids = _coded(self.tids, kept.tids())
        combined = (is_gpu.astype(np.int64) << 62) | (pids << 31) | tids
        _, first = np.unique(combined, return_index=True)
        for row in first.tolist():
            track = (int(is_gpu[row]), int(pids[row]), int(tids[row]))
            if track not in self.track_args:
                self.track_args[track] = kept.device_stream(row)
        ints, marks = kept.ints(), kept.marks()
        self._add_side_rows(kind, kept, names, ints["bytes"], marks)
        for key, values in (
            ("kind", kind), ("name", names), ("ts_ns", ts_ns), ("dur_ns", dur_ns),
            ("is_gpu", is_gpu), ("pid", pids), ("tid", tids),
            ("correlation", ints["correlation"]), ("external_id", ints["external_id"]),
            ("sequence", ints["sequence"]), ("bytes", ints["bytes"]),
            ("collective_arg", marks["collective"]),
        ):
            self.pieces[key].append(values)
        self.rows += kept.size

    def _add_flows(self, flows: Iterable[Flow]) -> None:
        for flow_id, ts, host, is_start in flows:
            self.flows["flow_id"].append(flow_id)
            self.flows["ts"].append(ts if math.isfinite(ts) else 0.0)
            self.flows["host"].append(host)
            self.flows["is_start"].append(is_start)

    def _add_side_rows(self, kind: np.ndarray, kept: Rows, names: np.ndarray,
                       bytes_column: np.ndarray, marks: dict[str, np.ndarray]) -> None:
        """This chunk's rows of the side tables, as the file writes
        them (`finish` makes the columns)."""
        memory = np.flatnonzero(kind == EventKind.MEMORY)
        if memory.size:
            bytes_column[memory] = _ints(kept.arg_values(memory.tolist(), ("memory_bytes",))[0])
        chosen = {
            "memory": memory,
            "collective": np.flatnonzero(marks["collective"]),
            "launch_config": np.flatnonzero(marks["grid"]),
            "sync": np.flatnonzero(kind == EventKind.SYNC),
            "shapes": np.flatnonzero((kind == EventKind.CPU_OP) & marks["dims"]),
        }
        for name, rows in chosen.items():
            if rows.size:
                table = self.side[name]
                table["event"].extend((rows + self.rows).tolist())
                fields = _SIDE_FIELDS[name]
                values = kept.arg_values(rows.tolist(), tuple(field for _, field, _ in fields))
                for (column, _, kept_as), listed in zip(fields, values):
                    table[column].extend(listed if kept_as is None else map(kept_as, listed))
        shaped = (kind == EventKind.CPU_OP) & marks["dims"]
        flops = _gemm_flops(shaped, kept.arg_values, self.names, names, self.shape_memo)
        if flops["event"].size:
            table = self.side["flops"]
            table["event"].extend((flops["event"] + self.rows).tolist())
            table["flops"].extend(flops["flops"].tolist())
            table["elements"].extend(flops["elements"].tolist())
        moved = _elementwise_bytes(shaped, kept.arg_values, self.names, names, self.shape_memo)
        if moved["event"].size:
            table = self.side["elementwise"]
            table["event"].extend((moved["event"] + self.rows).tolist())
            table["bytes"].extend(moved["bytes"].tolist())

    def finish(self, envelope: Any, source: str, skipped: dict[str, int]) -> Trace:
        categories = _count_categories(dict(zip(self.cats, self.cat_counts.tolist())))
        if self.classified == 0:
            found = ", ".join(f"{cat} {n}" for cat, n in list(categories.items())[:6])
            raise TraceFormatError(
                source,
                f"none of its {self.decoded} events is a profiler event daydream reads (found: "
                f"{found})",
                "expected cpu_op / cuda_runtime / kernel events from torch.profiler",
            )
        if self.rows == 0:
            reasons = ", ".join(f"{why}: {n}" for why, n in skipped.items())
            raise TraceFormatError(source, f"every profiler event is malformed ({reasons})")
        # one column's copy at a time
        column = {key: np.concatenate(self.pieces.pop(key)) for key in list(self.pieces)}
        ts_ns, dur_ns = column["ts_ns"], column["dur_ns"]
        span = int((ts_ns + dur_ns).max()) - int(ts_ns.min())
        if span + int(dur_ns.sum()) > SPAN_LIMIT_NS:
            raise TraceFormatError(source, f"its events span {span / 1e9 / 86400:.0f} days",
                                   "timestamps are damaged (a profiler trace covers seconds to "
                                   "hours)")
        strings = _Interner()
        strings("")
        names = strings.many(self.names.strings)[column["name"]].astype(np.int32)
        kind = _refine_kinds(column["kind"], column["collective_arg"], names, strings)
        tracks, track_ids = self._tracks(column["is_gpu"], column["pid"], column["tid"])
        columns = {
            "kind": kind.astype(np.int8),
            "name": names,
            "track": track_ids,
            "ts_ns": ts_ns,
            "dur_ns": dur_ns,
            "correlation": column["correlation"],
            "external_id": column["external_id"],
            "sequence": column["sequence"],
            "bytes": column["bytes"],
        }
        tables = self._side_tables(strings)
        tables["flow"] = self._flow_table(tracks)
        meta = _meta(envelope, source, self.decoded, categories, skipped)
        trace = Trace(meta=meta, strings=strings.strings, tracks=tracks, columns=columns,
                      tables=tables)
        _sort_by_time(trace)
        return trace

    def _tracks(self, is_gpu: np.ndarray, pids: np.ndarray,
                tids: np.ndarray) -> tuple[list[Track], np.ndarray]:
        """One track per (host or GPU, pid, tid), ordered host first, then by pid and tid as written
        (numbers before names); each row's track id."""
        pid_values, tid_values = list(self.pids), list(self.tids)
        combined = (is_gpu.astype(np.int64) << 62) | (_ranks(pid_values)[pids] << 31) | _ranks(
            tid_values)[tids]
        _, first_row, ids = np.unique(combined, return_index=True, return_inverse=True)
        tracks = []
        for row in first_row.tolist():
            key = (int(is_gpu[row]), int(pids[row]), int(tids[row]))
            tracks.append(_make_track(bool(is_gpu[row]), pid_values[pids[row]],
                                      tid_values[tids[row]], *self.track_args[key]))
        return tracks, ids.astype(np.int32).reshape(-1)

    def _side_tables(self, strings: _Interner) -> dict[str, dict[str, np.ndarray]]:
        tables: dict[str, dict[str, Any]] = {name: dict(empty_table(name)) for name in SIDE_TABLES}
        for name, rows in self.side.items():
            columns: dict[str, Any] = dict(rows)
            if name == "launch_config":
                grid, block = _dims(columns.pop("grid")), _dims(columns.pop("block"))
                columns.update(grid_x=grid[:, 0], grid_y=grid[:, 1], grid_z=grid[:, 2],
                               block_x=block[:, 0], block_y=block[:, 1], block_z=block[:, 2])
            tables[name] = columns
        # Interned after the names, column by column, in the order a whole-file build interns them.
        for name in ("collective", "sync", "shapes"):
            for key in [k for k in SIDE_TABLES[name] if k.endswith("_str")]:
                if key in tables[name] and isinstance(tables[name][key], list):
                    tables[name][key] = strings.in_order(tables[name][key])
        return {name: _table(name, **columns) if isinstance(columns.get("event"), list) else columns
                for name, columns in tables.items()}

    def _flow_table(self, tracks: list[Track]) -> dict[str, np.ndarray]:
        if not self.flows:
            return empty_table("flow")
        host_track = {(t.pid, t.tid): i for i, t in enumerate(tracks) if t.kind is TrackKind.HOST}
        return _table(
            "flow",
            flow_id=self.flows["flow_id"],
            ts_ns=_us_to_ns(np.array(self.flows["ts"], dtype=np.float64)),
            track=[host_track.get(key, NO_VALUE) for key in self.flows["host"]],
            is_start=self.flows["is_start"],
        )


def _codes(index: dict[Any, int], values: list[Any]) -> np.ndarray:
    """Provisional ids of `values` (categories, pids or tids as
    written), new ones numbered as they come."""
    try:
        return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    except KeyError:  # values not seen before (most chunks after the first have none)
        for value in set(values).difference(index):
            index[value] = len(index)
        return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))


def _coded(index: dict[Any, int], coded: Coded) -> np.ndarray:
    """`_codes` of values given distinct (and each row's index into them) or one per row."""
    values, at = coded
    codes = _codes(index, values)
    return codes if at is None else codes[at]


def _ranks(values: list[Any]) -> np.ndarray:
    """Each value's position among `values` sorted numbers first, then names."""
    order = sorted(range(len(values)), key=lambda i: (isinstance(values[i], str),
                                                      values[i] if isinstance(values[i], str)
                                                      else int(values[i])))
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.arange(len(values))
    return ranks


def _count_categories(counts: dict[str, int]) -> dict[str, int]:
    counts = dict(counts)
    if "" in counts:
        counts["<none>"] = counts.pop("")
    return dict(sorted(counts.items()))


_KIND_OF_CATEGORY = {c: int(k) for c, k in _CATEGORY_KIND.items()}


def _classify(events: Rows, cats: np.ndarray, ids: dict[Any, int]) -> np.ndarray:
    """Kind per event from its category (`cats`: ids into `ids`); -1
    for events daydream does not keep."""
    kind_of_id = np.full(len(ids), -1, dtype=np.int16)
    for cat, index in ids.items():
        kind_of_id[index] = _KIND_OF_CATEGORY.get(cat, -1)
    kinds = kind_of_id[cats]
    # [memory] instant events: cat cpu_instant_event, or no cat at all in 2021 files.
    instant = [ids[cat] for cat in ("cpu_instant_event", "") if cat in ids]
    if instant:
        rows = np.flatnonzero(np.isin(cats, instant))
        kinds[events.matching(rows, "[memory]".__eq__, ("i", "I"))] = int(EventKind.MEMORY)
    # Module spans recorded with with_stack=True: the only
    # python_function events kept (layer attribution).
    if "python_function" in ids:
        rows = np.flatnonzero(cats == ids["python_function"])
        modules = events.matching(rows, lambda name: name.startswith(MODULE_SPAN_PREFIX), ("X",))
        kinds[modules] = int(EventKind.ANNOTATION)
    return kinds


def _refine_kinds(kind: np.ndarray, collective_arg: np.ndarray, names: np.ndarray,
                  strings: _Interner) -> np.ndarray:
    kind = kind.copy()
    # Collective kernels are communication tasks (still kernels, as the file lists them).
    kernel_rows = np.flatnonzero(kind == EventKind.KERNEL)
    table = strings.strings
    collective_names = np.array([bool(_COLLECTIVE_KERNEL.match(text)) for text in table],
                                dtype=bool)
    is_collective = collective_names[names[kernel_rows]] | collective_arg[kernel_rows]
    kind[kernel_rows[is_collective]] = EventKind.COMMUNICATION
    # gloo runs a CPU collective on its own worker threads, under a `gloo:<op>` annotation.
    gloo_names = np.array([text.startswith(_GLOO_PREFIX) for text in table], dtype=bool)
    kind[(kind == EventKind.ANNOTATION) & gloo_names[names]] = EventKind.HOST_COMMUNICATION
    # The 2021 format files ProfilerStep#N under Operator.
    step_names = np.array([text.startswith("ProfilerStep#") for text in table], dtype=bool)
    kind[(kind == EventKind.CPU_OP) & step_names[names]] = EventKind.ANNOTATION
    return kind


def _times(ts_us: np.ndarray, dur_us: np.ndarray, kind: np.ndarray,
           skipped: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer ns from fractional µs (`dur_us` is changed), exact to the precision the file's
    doubles carry."""
    instant = np.isin(kind, [int(k) for k in _INSTANT_KINDS])
    dur_us[instant & np.isnan(dur_us)] = 0.0
    bad_ts = ~np.isfinite(ts_us)
    bad_dur = ~bad_ts & ~np.isfinite(dur_us)
    with np.errstate(invalid="ignore"):
        negative = ~bad_ts & ~bad_dur & (dur_us < 0)
        far_ts = ~bad_ts & (np.abs(ts_us) > TIME_LIMIT_US)
        long_dur = ~bad_ts & ~bad_dur & ~far_ts & (dur_us > DURATION_LIMIT_US)
    for reason, mask in (("missing ts", bad_ts), ("missing dur", bad_dur),
                         ("negative dur", negative), ("ts out of range", far_ts),
                         ("dur over a day", long_dur)):
        count = int(np.count_nonzero(mask))
        if count:
            skipped[reason] = skipped.get(reason, 0) + count
    valid = ~(bad_ts | bad_dur | negative | far_ts | long_dur)
    ts_us = np.where(valid, ts_us, 0.0)
    dur_us = np.where(valid, dur_us, 0.0)
    return _us_to_ns(ts_us), _us_to_ns(dur_us), valid


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    # Split off the whole µs first: 1.7e18 ns does not fit a double exactly.
    # callers skip events beyond it; this keeps the rest exact
    us = np.clip(us, -TIME_LIMIT_US, TIME_LIMIT_US)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


def _make_track(is_gpu: bool, pid: Any, tid: Any, device: Any, stream: Any) -> Track:
    """A track from its first event: a host thread, or a GPU stream (device and stream from its
    args, else from the pid and tid as older files write them)."""
    if not is_gpu:
        return Track(TrackKind.HOST, pid, tid)
    device = (_as_int(device) if device != NO_VALUE
              else (_as_int(pid) if isinstance(pid, int) else NO_VALUE))
    stream = _as_int(stream)
    if stream == NO_VALUE:
        if isinstance(tid, int):
            stream = _as_int(tid)
        else:
            match = _STREAM_TID.search(str(tid)[:64])
            stream = _as_int(match.group(1)) if match else NO_VALUE
    return Track(TrackKind.GPU, pid, tid, device=device, stream=stream)


def _dims(values: Iterable[list[int] | None]) -> np.ndarray:
    """An (n, 3) int32 array of CUDA dim3 values; short or missing ones padded with -1."""
    listed = list(values)
    try:
        dims = np.array(listed, dtype=np.int32)
        if dims.ndim == 2 and dims.shape[1] == 3:
            return dims
    except (ValueError, TypeError, OverflowError):
        pass
    return np.array([_dim3(v) for v in listed], dtype=np.int32).reshape(-1, 3)


def _dim3(value: list[int] | None) -> list[int]:
    dims = [d if 0 <= d <= _INT32_MAX else NO_VALUE for d in map(_as_int, list(value or [])[:3])]
    return dims + [NO_VALUE] * (3 - len(dims))


def _sort_by_time(trace: Trace) -> None:
    """Order rows by start time, enclosing spans before the spans they enclose."""
    order = np.lexsort((-trace.dur_ns, trace.ts_ns))
    if np.array_equal(order, np.arange(order.size)):
        return
    for key, column in trace.columns.items():
        trace.columns[key] = column[order]
    new_row = np.empty_like(order)
    new_row[order] = np.arange(order.size)
    for name, table in trace.tables.items():
        if "event" in table and table["event"].size:
            moved = np.argsort(new_row[table["event"]], kind="stable")
            trace.tables[name] = {col: values[moved] for col, values in table.items()}
            trace.tables[name]["event"] = new_row[table["event"]][moved]

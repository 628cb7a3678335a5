"""The Kineto document as msgspec decodes it: the structs of its events and envelope, what each
category is, the limits of the values daydream accepts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from operator import attrgetter
from typing import Any, Union

import msgspec
import numpy as np

from daydream.trace.model import NO_VALUE, SIDE_TABLES, EventKind

_NAN = math.nan
#: Integers beyond this magnitude (ids, sizes, devices written as 2^64 - 1 or garbage) are read as
#: missing: columns are int64 and sums and differences of them must not overflow.
INT_LIMIT = 2**62
_INT32_MAX = 2**31 - 1
#: Timestamps beyond ±TIME_LIMIT_US (2^62 ns, year 2116 as Unix time) and durations over
#: DURATION_LIMIT_US (a day) are not times a profiler writes; such events are skipped and counted.
TIME_LIMIT_US = 2**62 / 1000
DURATION_LIMIT_US = 86_400e6
#: A trace whose events span more than this cannot be simulated in
#: int64 nanoseconds with room to spare.
SPAN_LIMIT_NS = 2**60
#: ranks beyond this are not a job daydream can read (distributedInfo written wrong)
MAX_WORLD_SIZE = 2**20


# Numeric args as the file writes them: ROCm builds write some as strings ("stream": "0x0",
# "bytes": "128"); `_ints` turns either into integers when the columns are built.
_Int = Union[int, str]
_NO_RAW = msgspec.Raw(b"")


class _Args(msgspec.Struct, gc=False):
    correlation: _Int = NO_VALUE
    external_id: _Int = msgspec.field(default=NO_VALUE, name="External id")
    external_id_legacy: _Int = msgspec.field(default=NO_VALUE, name="external id")
    sequence: _Int = msgspec.field(default=NO_VALUE, name="Sequence number")
    bytes: _Int = NO_VALUE
    device: _Int = NO_VALUE
    stream: _Int = NO_VALUE
    # [memory] events
    addr: _Int = msgspec.field(default=NO_VALUE, name="Addr")
    memory_bytes: _Int = msgspec.field(default=0, name="Bytes")
    total_allocated: _Int = msgspec.field(default=NO_VALUE, name="Total Allocated")
    total_reserved: _Int = msgspec.field(default=NO_VALUE, name="Total Reserved")
    device_type: _Int = msgspec.field(default=NO_VALUE, name="Device Type")
    device_id: _Int = msgspec.field(default=NO_VALUE, name="Device Id")
    # collectives (NCCL kernels and record_param_comms)
    collective: str = msgspec.field(default="", name="Collective name")
    in_nelems: _Int = msgspec.field(default=NO_VALUE, name="In msg nelems")
    out_nelems: _Int = msgspec.field(default=NO_VALUE, name="Out msg nelems")
    group_size: _Int = msgspec.field(default=NO_VALUE, name="Group size")
    dtype: Any = ""
    group_name: Any = msgspec.field(default="", name="Process Group Name")
    group_ranks: Any = msgspec.field(default="", name="Process Group Ranks")
    # kernel launch configuration
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: _Int = msgspec.field(default=NO_VALUE, name="registers per thread")
    shared_memory: _Int = msgspec.field(default=NO_VALUE, name="shared memory")
    # cuda_sync records
    sync_kind: str = msgspec.field(default="", name="cuda_sync_kind")
    wait_on_stream: _Int = NO_VALUE
    wait_on_event_record_correlation: _Int = msgspec.field(
        default=NO_VALUE, name="wait_on_cuda_event_record_corr_id"
    )
    wait_on_event_id: _Int = msgspec.field(default=NO_VALUE, name="wait_on_cuda_event_id")
    # input shapes and types (record_shapes): kept undecoded, read only for the matrix multiplies
    # whose FLOPs they give and the elementwise ops whose bytes they give
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    input_strides: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Strides")


_EMPTY_ARGS = _Args()


#: A chunk's `Rows.arg_values`: per field of `_Args`, its value in each of the given rows.
ArgValues = Callable[[list[int], tuple[str, ...]], list[list[Any]]]


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = NO_VALUE
    tid: int | str = NO_VALUE
    ts: float = _NAN
    dur: float = _NAN
    id: int | str | None = None
    args: _Args | None = None


class _Envelope(msgspec.Struct, kw_only=True):
    """The file's fields around its events: devices, ranks, time base,
    versions of the GPU software stack."""

    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    daydream: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    hip_driver_version: Any = None


class _RawFile(_Envelope, kw_only=True):
    traceEvents: list[msgspec.Raw]


_CATEGORY_KIND: dict[str, EventKind] = {
    "cpu_op": EventKind.CPU_OP,
    "Operator": EventKind.CPU_OP,
    "cuda_runtime": EventKind.RUNTIME,
    "Runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.DRIVER,
    "kernel": EventKind.KERNEL,
    "Kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "Memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "Memset": EventKind.MEMSET,
    "cuda_sync": EventKind.SYNC,
    "user_annotation": EventKind.ANNOTATION,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "overhead": EventKind.OVERHEAD,
}
MODULE_SPAN_PREFIX = "nn.Module: "
_LEGACY_CATEGORIES = {"Operator", "Runtime", "Kernel", "Memcpy", "Memset"}
_GPU_KINDS = {
    EventKind.KERNEL,
    EventKind.COMMUNICATION,
    EventKind.MEMCPY,
    EventKind.MEMSET,
    EventKind.SYNC,
    EventKind.GPU_ANNOTATION,
}
_INSTANT_KINDS = {EventKind.MEMORY}
_get_cat = attrgetter("cat")
_get_name = attrgetter("name")
_get_ts = attrgetter("ts")
_get_dur = attrgetter("dur")
_get_pid = attrgetter("pid")
_get_tid = attrgetter("tid")
_get_correlation = attrgetter("correlation")
_get_sequence = attrgetter("sequence")
_get_bytes = attrgetter("bytes")
_get_collective = attrgetter("collective")
_get_grid = attrgetter("grid")
_get_dims = attrgetter("input_dims")
_STREAM_TID = re.compile(r"stream\s*(-?\d+)")
_COLLECTIVE_KERNEL = re.compile(r"^(nccl|rccl)", re.IGNORECASE)
_GLOO_PREFIX = "gloo:"




class _Interner:
    """Maps strings to dense int ids; deterministic (sorted) for the bulk load."""

    __slots__ = ("index",)

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        index = self.index
        return index.setdefault(text, len(index))

    def many(self, texts: list[str]) -> np.ndarray:
        index = self.index
        for text in sorted(set(texts).difference(index)):
            index[text] = len(index)
        return np.fromiter(map(index.__getitem__, texts), dtype=np.int32, count=len(texts))

    def many_coded(self, coded: tuple[list[str], np.ndarray | None]) -> np.ndarray:
        """`many` of strings given distinct (and each row's index into them) or one per row."""
        texts, at = coded
        ids = self.many(texts)
        return ids if at is None else ids[at]

    def in_order(self, values: list[Any]) -> np.ndarray:
        """Ids of `values` (strings, or UTF-8 bytes read with replacement), new ones numbered in
        the order they first appear, as calling the interner on each in turn numbers them."""
        index = self.index
        unique = dict.fromkeys(values)
        for value in unique:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            unique[value] = index.setdefault(text, len(index))
        return np.fromiter(map(unique.__getitem__, values), dtype=np.int64, count=len(values))

    @property
    def strings(self) -> list[str]:
        return list(self.index)


def _table(name: str, **columns: Any) -> dict[str, np.ndarray]:
    return {col: _fit(_ints(columns[col]), dt) if isinstance(columns[col], list)
            and np.dtype(dt).kind == "i"
            else np.asarray(columns[col], dtype=dt) for col, dt in SIDE_TABLES[name].items()}


def _fit(column: np.ndarray, dtype: Any) -> np.ndarray:
    """`column` as `dtype`; values that do not fit it are missing
    (NO_VALUE), never wrapped around."""
    limits = np.iinfo(dtype)
    if column.size and (column.min() < limits.min or column.max() > limits.max):
        column = np.where((column < limits.min) | (column > limits.max), NO_VALUE, column)
    return column.astype(dtype)


def _ints(values: list[Any]) -> np.ndarray:
    """An int64 column from numbers as written: ints, or strings such as "128" and "0x0" (ROCm).

    Numbers beyond ±INT_LIMIT are missing (NO_VALUE).
    """
    try:
        column = np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(_as_int, values), dtype=np.int64, count=len(values))
    return _within_limit(column)


def _within_limit(column: np.ndarray) -> np.ndarray:
    """`column` (int64) with the numbers beyond ±INT_LIMIT made missing (NO_VALUE), in place."""
    if column.size and (column.min() < -INT_LIMIT or column.max() > INT_LIMIT):
        column[(column < -INT_LIMIT) | (column > INT_LIMIT)] = NO_VALUE
    return column


def _as_int(value: Any) -> int:
    """One number as written (decimal or 0x-hex string, int, or float); NO_VALUE when it is not one
    or is beyond ±INT_LIMIT."""
    if isinstance(value, bool):
        number = int(value)
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float):
        number = int(value) if math.isfinite(value) else NO_VALUE
    else:
        text = str(value).strip()[:64]
        try:
            number = int(text, 0)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                return NO_VALUE
            number = int(as_float) if math.isfinite(as_float) else NO_VALUE
    return number if -INT_LIMIT <= number <= INT_LIMIT else NO_VALUE

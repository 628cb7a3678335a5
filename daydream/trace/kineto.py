"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON of every vintage.

Handles the 2021 legacy categories (`Operator`/`Runtime`/`Kernel`/`Memcpy`/
`Memset`, flows `async`, lowercase `external id`, `"stream 7"` GPU tids,
cat-less `[memory]` events) through 2025 files (`cuda_driver`, `overhead`,
`cuda_sync`, `baseTimeNanoseconds`-relative `ts`).

Speed and memory: the decompressed text is streamed a window at a time and cut
where two events meet (a cut msgspec cannot decode, "},{" inside a string or a
nested list, is refused and an earlier one tried); each window is decoded by
msgspec straight into slotted structs that carry only the fields daydream uses
(everything else, e.g. call stacks, is skipped without being materialized), and
turned into numpy column pieces before the next window is read. When the typed
decode rejects a window because some events are malformed, its events are
decoded one by one and the bad ones are skipped and counted by reason.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any, Protocol, Union

import msgspec
import numpy as np

from daydream._heap import give_back
from daydream.errors import TraceFormatError
from daydream.trace.model import (
    NO_VALUE,
    SIDE_TABLES,
    EventKind,
    GpuInfo,
    Trace,
    TraceMeta,
    Track,
    TrackKind,
    empty_table,
)

Progress = Callable[[str, int, int], None]

_NAN = math.nan
#: Integers beyond this magnitude (ids, sizes, devices written as 2^64 - 1 or garbage) are read as missing:
#: columns are int64 and sums and differences of them must not overflow.
INT_LIMIT = 2**62
_INT32_MAX = 2**31 - 1
#: Timestamps beyond ±TIME_LIMIT_US (2^62 ns, year 2116 as Unix time) and durations over DURATION_LIMIT_US
#: (a day) are not times a profiler writes; such events are skipped and counted.
TIME_LIMIT_US = 2**62 / 1000
DURATION_LIMIT_US = 86_400e6
#: A trace whose events span more than this cannot be simulated in int64 nanoseconds with room to spare.
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
    # input shapes and types (record_shapes): kept undecoded, read only for the matrix multiplies whose FLOPs they give
    # and the elementwise ops whose bytes they give
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    input_strides: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Strides")


_EMPTY_ARGS = _Args()


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
    """The file's fields around its events: devices, ranks, time base, versions of the GPU software stack."""

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


class Readable(Protocol):
    @property
    def label(self) -> str: ...

    def read(self, progress: Progress | None = None) -> bytes | bytearray: ...

    def blocks(self, progress: Progress | None = None) -> Iterator[bytes]: ...


def read(document: Readable, progress: Progress | None = None) -> Trace:
    """Read one Kineto JSON document (a `Source`) into a `Trace`.

    Streamed: the decompressed text is read a window at a time, cut between two events,
    and each window's events are decoded and turned into column pieces before the next
    is read, so the peak memory holds one window, its decoded events and the columns —
    neither the whole text nor every event as an object. A document the stream cannot
    cut with certainty (an unusual layout, a damaged file) is read whole instead, which
    gives the same trace and the precise error.
    """
    skipped: dict[str, int] = {}
    columns = _Columns()
    streamable = callable(getattr(document, "blocks", None))  # a document that can only be read whole is read whole
    envelope = _stream(document, columns, skipped, progress) if streamable else _NOT_STREAMED
    if envelope is not _NOT_STREAMED:
        trace = columns.finish(envelope, document.label, skipped)
        del columns
        give_back()
        return trace
    del columns
    trace = decode(document.read(progress), document.label, progress)
    give_back()
    return trace


#: Bytes of text decoded at a time when a document is streamed.
WINDOW = 8 << 20
_NOT_STREAMED: Any = object()
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
#: Cuts tried per window before the document is read whole (a cut inside a string or a nested list fails to decode).
_CUT_ATTEMPTS = 8


class _Window:
    """The document's text from where reading has got to: a growing buffer of its blocks."""

    def __init__(self, document: Readable, progress: Progress | None) -> None:
        self.blocks = iter(document.blocks(progress))
        self.buffer = bytearray()
        self.at_end = False

    def more(self) -> bool:
        """Append the next block; False (and `at_end`) when there is none."""
        block = next(self.blocks, None)
        if block is None:
            self.at_end = True
            return False
        self.buffer.extend(block)
        return True

    def fill(self, size: int) -> None:
        """Read on until the buffer holds `size` bytes or the text ends."""
        while not self.at_end and len(self.buffer) < size:
            self.more()


def _stream(document: Readable, columns: _Columns, skipped: dict[str, int], progress: Progress | None) -> Any:
    """Read `document`'s events into `columns` a window at a time; its envelope (None for a bare list of events), or
    _NOT_STREAMED when the text cannot be cut with certainty (`columns` is then partly filled: discard it)."""
    window = _Window(document, progress)
    window.fill(4096)
    opened = _open_events(window)
    if opened is _NOT_STREAMED:
        return _NOT_STREAMED
    prefix_envelope, start = opened
    window.buffer[:start] = b"["  # from here on the buffer reads as the start of a list of events
    if not _cut_windows(window, columns, skipped):
        return _NOT_STREAMED
    return _last_events(window.buffer, prefix_envelope, columns, skipped, document.label)


def _open_events(window: _Window) -> Any:
    """(the envelope before the events, or None for a bare list; where the first event starts), or _NOT_STREAMED."""
    buffer = window.buffer
    first = _first_byte(buffer)
    if first == b"[":
        return None, buffer.index(b"[") + 1
    if first != b"{":
        return _NOT_STREAMED
    found = _EVENTS_KEY.search(buffer)
    while found is None and len(buffer) < 64 * WINDOW and window.more():
        found = _EVENTS_KEY.search(buffer)
    if found is None:
        return _NOT_STREAMED
    try:  # the key is the document's own, not text inside another value, when what precedes it closes as a document
        envelope = msgspec.json.decode(bytes(buffer[:found.start()]) + b'"traceEvents":[]}', type=_RawFile)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return _NOT_STREAMED
    return envelope, found.end()


def _cut_windows(window: _Window, columns: _Columns, skipped: dict[str, int]) -> bool:
    """Decode the events a window at a time, up to the text's end; False when the text cannot be cut with certainty."""
    buffer = window.buffer
    while True:
        window.fill(WINDOW)
        try:
            cut = _cut(buffer, columns, skipped) if not window.at_end else None
        except RecursionError:  # an event nested deeper than the decoder goes: the whole-document path says so
            return False
        if cut is None:
            if window.at_end:
                return True
            if len(buffer) > 8 * WINDOW:  # no event ends in this much text: not a layout the stream can cut
                return False
            window.more()
            continue
        try:
            del buffer[1:cut]
        except BufferError:  # something decoded still views the old text: start a new buffer
            buffer[:] = b"[" + bytes(buffer[cut:])


def _last_events(buffer: bytearray, prefix_envelope: Any, columns: _Columns, skipped: dict[str, int],
                 label: str) -> Any:
    """The rest: the last events, the array's end and the keys after it; the whole envelope, or _NOT_STREAMED."""
    try:
        if prefix_envelope is None:
            tail_events = msgspec.json.decode(bytes(buffer), type=list[msgspec.Raw])
            envelope = None
        else:
            tail = msgspec.json.decode(b'{"traceEvents":' + bytes(buffer), type=_RawFile)
            tail_events, tail.traceEvents = tail.traceEvents, []
            envelope = _merged(prefix_envelope, tail)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return _NOT_STREAMED
    buffer.clear()
    for chunk in _decoded_chunks(tail_events, skipped, label):
        columns.add(chunk, skipped)
    if columns.decoded == 0:
        return _NOT_STREAMED  # no event read: the whole-document path says why
    return envelope


def _cut(buffer: bytearray, columns: _Columns, skipped: dict[str, int]) -> int | None:
    """Decode the events of `buffer` ("[" and then events) up to the last place two events meet, into `columns`; the
    offset of the next event's start, or None when no place decodes (the text ends inside one event, or only false
    cuts were found)."""
    end = len(buffer)
    for _ in range(_CUT_ATTEMPTS):
        brace = buffer.rfind(b"}", 1, end)
        found = None
        while brace >= 0 and not (found := _BETWEEN_EVENTS.match(buffer, brace)):
            brace = buffer.rfind(b"}", 1, brace)
        if found is None:
            return None
        # Close the list in place of the byte after the brace (a space or the comma), decode, put the byte back.
        after = buffer[brace + 1]
        buffer[brace + 1] = ord("]")
        try:
            events = _EVENTS.decode(memoryview(buffer)[:brace + 2])
        except msgspec.ValidationError:
            try:
                events = _tolerant(msgspec.json.decode(bytes(buffer[:brace + 2]), type=list[msgspec.Raw]), skipped)
            except msgspec.DecodeError:
                events = None
        except msgspec.DecodeError as exc:
            # a "},{" inside a string or a nested list: try the one before; text that is not UTF-8: replaced
            events = _repaired_events(bytes(buffer[:brace + 2]), skipped) if _not_utf8(exc) else None
        finally:
            buffer[brace + 1] = after
        if events is None:
            end = brace
            continue
        columns.add(events, skipped)
        return found.end() - 1
    return None


def _merged(before: Any, after: Any) -> Any:
    """The envelope from the keys before the events and those after them."""
    for name in _Envelope.__struct_fields__:
        if getattr(before, name) is None:
            setattr(before, name, getattr(after, name))
    return before


def decode(raw: bytes | bytearray, source: str, progress: Progress | None = None) -> Trace:
    """Decode one Kineto JSON document (already decompressed) into a `Trace`.

    Raises `TraceFormatError` when `raw` is not a trace at all; events that are
    malformed are skipped and counted in `Trace.meta.skipped`.
    """
    envelope, events = _split_checked(raw, source, progress)
    return _build_trace(envelope, events, source, progress)


#: Events decoded at a time.
CHUNK_EVENTS = 65_536
_EVENTS = msgspec.json.Decoder(list[_Event])
_ONE_EVENT = msgspec.json.Decoder(_Event)


def _split_checked(raw: bytes | bytearray, source: str, progress: Progress | None) -> tuple[Any, list[msgspec.Raw]]:
    if _is_blank(raw):
        raise TraceFormatError(source, "file is empty")
    if progress:
        progress("splitting events", 0, 1)
    envelope, events = _split_events(raw, source)
    if not events:
        raise TraceFormatError(source, "trace holds no events")
    return envelope, events


def _is_blank(raw: bytes | bytearray) -> bool:
    return not raw[:4096].strip() and not raw.strip()


def _first_byte(raw: bytes | bytearray) -> bytes:
    head = raw[:4096].lstrip()
    return bytes(head[:1] if head else raw.lstrip()[:1])


def _split_events(raw: bytes | bytearray, source: str, repaired: bool = False) -> tuple[Any, list[msgspec.Raw]]:
    """(the envelope, each event's undecoded JSON): one pass that only checks the JSON and finds where each
    event begins and ends. A document whose strings hold bytes that are not UTF-8 (in its envelope too: a device
    name) is read again with those bytes replaced by U+FFFD."""
    try:
        if _first_byte(raw) == b"[":
            return None, msgspec.json.decode(raw, type=list[msgspec.Raw])
        document = msgspec.json.decode(raw, type=_RawFile)
    except msgspec.ValidationError:
        raise TraceFormatError(source, _describe_non_trace(raw)) from None
    except msgspec.DecodeError as exc:
        if _not_utf8(exc) and not repaired:
            return _split_events(_utf8(raw), source, repaired=True)
        raise TraceFormatError(source, f"not valid JSON ({_short(exc)})") from None
    except RecursionError:
        raise _too_deep(source) from None
    events, document.traceEvents = document.traceEvents, []
    return document, events


def _decoded_chunks(events: list[msgspec.Raw], skipped: dict[str, int], source: str) -> Iterator[list[_Event]]:
    """The events, decoded `CHUNK_EVENTS` at a time; a chunk the fast typed decode rejects is decoded event by
    event, and the malformed events are skipped and counted by reason."""
    for start in range(0, len(events), CHUNK_EVENTS):
        chunk = events[start:start + CHUNK_EVENTS]
        try:
            try:
                decoded = _EVENTS.decode(b"[" + b",".join(chunk) + b"]")
            except msgspec.ValidationError:
                decoded = _tolerant(chunk, skipped)
            except msgspec.DecodeError as exc:
                if not _not_utf8(exc):
                    raise
                decoded = _tolerant([_utf8(item) for item in chunk], skipped)
        except RecursionError:
            raise _too_deep(source) from None
        yield decoded


def _tolerant(chunk: Sequence[msgspec.Raw | bytes], skipped: dict[str, int]) -> list[_Event]:
    events: list[_Event] = []
    for item in chunk:
        try:
            events.append(_ONE_EVENT.decode(item))
        except msgspec.ValidationError as exc:
            reason = _validation_reason(exc)
            skipped[reason] = skipped.get(reason, 0) + 1
    return events


def _not_utf8(exc: msgspec.DecodeError) -> bool:
    return "UTF-8" in str(exc)


def _utf8(raw: bytes | bytearray | msgspec.Raw) -> bytes:
    """`raw` with every byte sequence that is not UTF-8 (a lone surrogate's bytes, Latin-1 text) replaced by U+FFFD:
    a name keeps its readable part."""
    return bytes(raw).decode("utf-8", "replace").encode("utf-8")


def _repaired_events(text: bytes, skipped: dict[str, int]) -> list[_Event] | None:
    """The events of `text` (a JSON list) with what is not UTF-8 replaced; None when it is still not a list of
    events (a false cut)."""
    repaired = _utf8(text)
    try:
        try:
            return _EVENTS.decode(repaired)
        except msgspec.ValidationError:
            return _tolerant(msgspec.json.decode(repaired, type=list[msgspec.Raw]), skipped)
    except msgspec.DecodeError:
        return None


def _too_deep(source: str) -> TraceFormatError:
    return TraceFormatError(source, "JSON nested deeper than a trace ever is (thousands of levels)",
                            "the file is damaged or not a profiler trace")


def _describe_non_trace(raw: bytes | bytearray) -> str:
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return f"not valid JSON ({_short(exc)})"
    if isinstance(value, dict):
        if "traceEvents" not in value:
            keys = ", ".join(list(value)[:5]) or "none"
            return f"JSON object has no 'traceEvents' list (keys: {keys})"
        return f"'traceEvents' holds {_json_type(value['traceEvents'])}, not a list of events"
    return f"top-level JSON is {_json_type(value)}, not a trace object or a list of events"


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _validation_reason(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    where = text.rsplit(" - at `", 1)
    field = where[1].rstrip("`") if len(where) == 2 else ""
    field = field.replace("$.", "").replace("$", "event")
    if text.startswith("Expected `object`"):
        return "event is not a JSON object"
    return f"mistyped {field}" if field else text


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120]


# --------------------------------------------------------------------------- columns


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

    @property
    def strings(self) -> list[str]:
        return list(self.index)


def _build_trace(envelope: Any, events: list[msgspec.Raw], source: str, progress: Progress | None) -> Trace:
    skipped: dict[str, int] = {}
    columns = _Columns()
    for chunk in _decoded_chunks(events, skipped, source):
        columns.add(chunk, skipped)
        if progress:
            progress("decoding events", columns.decoded, len(events))
    if columns.decoded == 0:
        reasons = ", ".join(f"{why}: {n}" for why, n in skipped.items())
        raise TraceFormatError(source, f"none of its {len(events)} events could be read ({reasons})")
    return columns.finish(envelope, source, skipped)


#: Per side table, its columns as the file writes them: (column, the arg it comes from). `finish` turns the values
#: into the table's dtypes ("grid" and "block" into their x, y, z columns; "_str" columns into string ids).
_SIDE_FIELDS: dict[str, list[tuple[str, Callable[[_Args], Any]]]] = {
    "memory": [(column, attrgetter(column)) for column in
               ("addr", "total_allocated", "total_reserved", "device_type", "device_id")],
    "collective": [("collective_str", attrgetter("collective")), ("in_nelems", attrgetter("in_nelems")),
                   ("out_nelems", attrgetter("out_nelems")), ("group_size", attrgetter("group_size")),
                   ("dtype_str", lambda a: str(a.dtype)), ("group_name_str", lambda a: str(a.group_name)),
                   ("group_ranks_str", lambda a: str(a.group_ranks))],
    "launch_config": [(column, attrgetter(column)) for column in ("grid", "block", "registers", "shared_memory")],
    "shapes": [("dims_str", lambda a: bytes(a.input_dims).decode("utf-8", "replace")),
               ("types_str", lambda a: bytes(a.input_types).decode("utf-8", "replace")),
               ("concrete_str", lambda a: bytes(a.concrete_inputs).decode("utf-8", "replace")),
               ("strides_str", lambda a: bytes(a.input_strides).decode("utf-8", "replace"))],
    "sync": [("sync_kind_str", attrgetter("sync_kind"))] + [(column, attrgetter(column)) for column in
             ("wait_on_stream", "wait_on_event_record_correlation", "wait_on_event_id")],
}


class _Columns:
    """The trace's columns, built a chunk of decoded events at a time.

    Names, pids and tids get provisional ids as chunks arrive; `finish` renumbers them in the
    order a whole-file build gives (names sorted, "" first; tracks by pid and tid), and interns
    the side tables' strings after the names, so the result does not depend on the chunk size.
    """

    def __init__(self) -> None:
        self.decoded = 0  # events decoded, kept or not
        self.classified = 0  # events of a kind daydream keeps, before the malformed ones are dropped
        self.cats: dict[Any, int] = {}  # category -> provisional id
        self.cat_counts = np.zeros(0, dtype=np.int64)
        self.names = _Interner()
        self.pids: dict[Any, int] = {}
        self.tids: dict[Any, int] = {}
        self.track_args: dict[tuple[int, int, int], tuple[Any, Any]] = {}  # first (device, stream) per track
        self.pieces: defaultdict[str, list[np.ndarray]] = defaultdict(list)
        self.side: defaultdict[str, defaultdict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
        self.flows: defaultdict[str, list[Any]] = defaultdict(list)
        self.rows = 0

    def add(self, events: list[_Event], skipped: dict[str, int]) -> None:
        self.decoded += len(events)
        cats = _codes(self.cats, list(map(_get_cat, events)))
        counts = np.bincount(cats, minlength=len(self.cats))
        counts[:self.cat_counts.size] += self.cat_counts
        self.cat_counts = counts
        if "fwdbwd" in self.cats:
            self._add_flows(events, np.flatnonzero(cats == self.cats["fwdbwd"]))
        kinds = _classify(events, cats, self.cats)
        keep = np.flatnonzero(kinds >= 0)
        self.classified += keep.size
        if keep.size == 0:
            return
        kept = [events[i] for i in keep.tolist()]
        kind = kinds[keep]
        ts_ns, dur_ns, valid = _times(kept, kind, skipped)
        if not valid.all():
            select = np.flatnonzero(valid)
            kept = [kept[i] for i in select.tolist()]
            kind, ts_ns, dur_ns = kind[select], ts_ns[select], dur_ns[select]
            if not kept:
                return
        args = [e.args if e.args is not None else _EMPTY_ARGS for e in kept]
        names = self.names.many(list(map(_get_name, kept)))
        is_gpu = np.isin(kind, [int(k) for k in _GPU_KINDS])
        pids = _codes(self.pids, list(map(_get_pid, kept)))
        tids = _codes(self.tids, list(map(_get_tid, kept)))
        combined = (is_gpu.astype(np.int64) << 62) | (pids << 31) | tids
        _, first = np.unique(combined, return_index=True)
        for row in first.tolist():
            track = (int(is_gpu[row]), int(pids[row]), int(tids[row]))
            if track not in self.track_args:
                self.track_args[track] = (args[row].device, args[row].stream)
        bytes_column = _ints(list(map(_get_bytes, args)))
        collective_arg = np.fromiter(map(bool, map(_get_collective, args)), dtype=bool, count=len(args))
        self._add_side_rows(kind, args, names, bytes_column, collective_arg)
        for key, values in (
            ("kind", kind), ("name", names), ("ts_ns", ts_ns), ("dur_ns", dur_ns), ("is_gpu", is_gpu),
            ("pid", pids), ("tid", tids),
            ("correlation", _ints(list(map(_get_correlation, args)))),
            ("external_id", _ints([a.external_id if a.external_id != NO_VALUE else a.external_id_legacy for a in args])),
            ("sequence", _ints(list(map(_get_sequence, args)))),
            ("bytes", bytes_column),
            ("collective_arg", collective_arg),
        ):
            self.pieces[key].append(values)
        self.rows += len(kept)

    def _add_flows(self, events: list[_Event], rows: np.ndarray) -> None:
        for e in map(events.__getitem__, rows.tolist()):
            if e.ph in ("s", "f") and isinstance(e.id, int):
                self.flows["flow_id"].append(e.id)
                self.flows["ts"].append(e.ts if math.isfinite(e.ts) else 0.0)
                self.flows["host"].append((e.pid, e.tid))
                self.flows["is_start"].append(e.ph == "s")

    def _add_side_rows(self, kind: np.ndarray, args: list[_Args], names: np.ndarray, bytes_column: np.ndarray,
                       collective_arg: np.ndarray) -> None:
        """This chunk's rows of the side tables, as the file writes them (`finish` makes the columns)."""
        memory = np.flatnonzero(kind == EventKind.MEMORY)
        if memory.size:
            bytes_column[memory] = _ints([args[i].memory_bytes for i in memory.tolist()])
        chosen = {
            "memory": memory,
            "collective": np.flatnonzero(collective_arg),
            "launch_config": np.flatnonzero(np.fromiter(map(is_not, map(_get_grid, args), repeat(None)), dtype=bool,
                                                        count=len(args))),
            "sync": np.flatnonzero(kind == EventKind.SYNC),
            "shapes": np.flatnonzero((kind == EventKind.CPU_OP) & np.fromiter(map(len, map(_get_dims, args)), dtype=bool,
                                                                              count=len(args))),
        }
        for name, rows in chosen.items():
            if rows.size:
                table = self.side[name]
                table["event"].extend((rows + self.rows).tolist())
                picked = [args[i] for i in rows.tolist()]
                for column, field in _SIDE_FIELDS[name]:
                    table[column].extend(map(field, picked))
        flops = _gemm_flops(kind, args, self.names, names)
        if flops["event"].size:
            table = self.side["flops"]
            table["event"].extend((flops["event"] + self.rows).tolist())
            table["flops"].extend(flops["flops"].tolist())
            table["elements"].extend(flops["elements"].tolist())
        moved = _elementwise_bytes(kind, args, self.names, names)
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
                f"none of its {self.decoded} events is a profiler event daydream reads (found: {found})",
                "expected cpu_op / cuda_runtime / kernel events from torch.profiler",
            )
        if self.rows == 0:
            reasons = ", ".join(f"{why}: {n}" for why, n in skipped.items())
            raise TraceFormatError(source, f"every profiler event is malformed ({reasons})")
        column = {key: np.concatenate(self.pieces.pop(key)) for key in list(self.pieces)}  # one column's copy at a time
        ts_ns, dur_ns = column["ts_ns"], column["dur_ns"]
        span = int((ts_ns + dur_ns).max()) - int(ts_ns.min())
        if span + int(dur_ns.sum()) > SPAN_LIMIT_NS:
            raise TraceFormatError(source, f"its events span {span / 1e9 / 86400:.0f} days",
                                   "timestamps are damaged (a profiler trace covers seconds to hours)")
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
        trace = Trace(meta=meta, strings=strings.strings, tracks=tracks, columns=columns, tables=tables)
        _sort_by_time(trace)
        return trace

    def _tracks(self, is_gpu: np.ndarray, pids: np.ndarray, tids: np.ndarray) -> tuple[list[Track], np.ndarray]:
        """One track per (host or GPU, pid, tid), ordered host first, then by pid and tid as written (numbers before
        names); each row's track id."""
        pid_values, tid_values = list(self.pids), list(self.tids)
        combined = (is_gpu.astype(np.int64) << 62) | (_ranks(pid_values)[pids] << 31) | _ranks(tid_values)[tids]
        _, first_row, ids = np.unique(combined, return_index=True, return_inverse=True)
        tracks = []
        for row in first_row.tolist():
            key = (int(is_gpu[row]), int(pids[row]), int(tids[row]))
            tracks.append(_make_track(bool(is_gpu[row]), pid_values[pids[row]], tid_values[tids[row]], *self.track_args[key]))
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
                    tables[name][key] = list(map(strings, tables[name][key]))
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
    """Provisional ids of `values` (categories, pids or tids as written), new ones numbered as they come."""
    try:
        return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    except KeyError:  # values not seen before (most chunks after the first have none)
        for value in set(values).difference(index):
            index[value] = len(index)
        return np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))


def _ranks(values: list[Any]) -> np.ndarray:
    """Each value's position among `values` sorted numbers first, then names."""
    order = sorted(range(len(values)), key=lambda i: (isinstance(values[i], str),
                                                      values[i] if isinstance(values[i], str) else int(values[i])))
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.arange(len(values))
    return ranks


def _count_categories(counts: dict[str, int]) -> dict[str, int]:
    counts = dict(counts)
    if "" in counts:
        counts["<none>"] = counts.pop("")
    return dict(sorted(counts.items()))


_KIND_OF_CATEGORY = {c: int(k) for c, k in _CATEGORY_KIND.items()}


def _classify(events: list[_Event], cats: np.ndarray, ids: dict[Any, int]) -> np.ndarray:
    """Kind per event from its category (`cats`: ids into `ids`); -1 for events daydream does not keep."""
    kind_of_id = np.full(len(ids), -1, dtype=np.int16)
    for cat, index in ids.items():
        kind_of_id[index] = _KIND_OF_CATEGORY.get(cat, -1)
    kinds = kind_of_id[cats]
    # [memory] instant events: cat cpu_instant_event, or no cat at all in 2021 files.
    instant = [ids[cat] for cat in ("cpu_instant_event", "") if cat in ids]
    if instant:
        rows = np.flatnonzero(np.isin(cats, instant)).tolist()
        memory = [i for i in rows if events[i].name == "[memory]" and events[i].ph in ("i", "I")]
        kinds[memory] = int(EventKind.MEMORY)
    # Module spans recorded with with_stack=True: the only python_function events kept (layer attribution).
    if "python_function" in ids:
        rows = np.flatnonzero(cats == ids["python_function"]).tolist()
        modules = [i for i in rows if events[i].name.startswith(MODULE_SPAN_PREFIX) and events[i].ph == "X"]
        kinds[modules] = int(EventKind.ANNOTATION)
    return kinds


def _refine_kinds(kind: np.ndarray, collective_arg: np.ndarray, names: np.ndarray, strings: _Interner) -> np.ndarray:
    kind = kind.copy()
    # Collective kernels are communication tasks (still kernels, as the file lists them).
    kernel_rows = np.flatnonzero(kind == EventKind.KERNEL)
    table = strings.strings
    collective_names = np.array([bool(_COLLECTIVE_KERNEL.match(text)) for text in table], dtype=bool)
    is_collective = collective_names[names[kernel_rows]] | collective_arg[kernel_rows]
    kind[kernel_rows[is_collective]] = EventKind.COMMUNICATION
    # gloo runs a CPU collective on its own worker threads, under a `gloo:<op>` annotation.
    gloo_names = np.array([text.startswith(_GLOO_PREFIX) for text in table], dtype=bool)
    kind[(kind == EventKind.ANNOTATION) & gloo_names[names]] = EventKind.HOST_COMMUNICATION
    # The 2021 format files ProfilerStep#N under Operator.
    step_names = np.array([text.startswith("ProfilerStep#") for text in table], dtype=bool)
    kind[(kind == EventKind.CPU_OP) & step_names[names]] = EventKind.ANNOTATION
    return kind


def _times(kept: list[_Event], kind: np.ndarray, skipped: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Integer ns from fractional µs, exact to the precision the file's doubles carry."""
    ts_us = np.fromiter(map(_get_ts, kept), dtype=np.float64, count=len(kept))
    dur_us = np.fromiter(map(_get_dur, kept), dtype=np.float64, count=len(kept))
    instant = np.isin(kind, [int(k) for k in _INSTANT_KINDS])
    dur_us[instant & np.isnan(dur_us)] = 0.0
    bad_ts = ~np.isfinite(ts_us)
    bad_dur = ~bad_ts & ~np.isfinite(dur_us)
    with np.errstate(invalid="ignore"):
        negative = ~bad_ts & ~bad_dur & (dur_us < 0)
        far_ts = ~bad_ts & (np.abs(ts_us) > TIME_LIMIT_US)
        long_dur = ~bad_ts & ~bad_dur & ~far_ts & (dur_us > DURATION_LIMIT_US)
    for reason, mask in (("missing ts", bad_ts), ("missing dur", bad_dur), ("negative dur", negative),
                         ("ts out of range", far_ts), ("dur over a day", long_dur)):
        count = int(np.count_nonzero(mask))
        if count:
            skipped[reason] = skipped.get(reason, 0) + count
    valid = ~(bad_ts | bad_dur | negative | far_ts | long_dur)
    ts_us = np.where(valid, ts_us, 0.0)
    dur_us = np.where(valid, dur_us, 0.0)
    return _us_to_ns(ts_us), _us_to_ns(dur_us), valid


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    # Split off the whole µs first: 1.7e18 ns does not fit a double exactly.
    us = np.clip(us, -TIME_LIMIT_US, TIME_LIMIT_US)  # callers skip events beyond it; this keeps the rest exact
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


def _make_track(is_gpu: bool, pid: Any, tid: Any, device: Any, stream: Any) -> Track:
    """A track from its first event: a host thread, or a GPU stream (device and stream from its args, else from the
    pid and tid as older files write them)."""
    if not is_gpu:
        return Track(TrackKind.HOST, pid, tid)
    device = _as_int(device) if device != NO_VALUE else (_as_int(pid) if isinstance(pid, int) else NO_VALUE)
    stream = _as_int(stream)
    if stream == NO_VALUE:
        if isinstance(tid, int):
            stream = _as_int(tid)
        else:
            match = _STREAM_TID.search(str(tid)[:64])
            stream = _as_int(match.group(1)) if match else NO_VALUE
    return Track(TrackKind.GPU, pid, tid, device=device, stream=stream)


def _numel(dims: list[Any]) -> float:
    """Elements of a tensor from its recorded dims ([] is a scalar)."""
    return float(math.prod(dims))


#: op name -> (FLOPs, elements read and written) from its input shapes: 2 x multiply-adds, and the operands plus
#: the result, for the matrix multiplies that do the work themselves (aten::linear and aten::matmul call these, so
#: they are not counted again).
_GEMM_SHAPES: dict[str, Callable[[list[Any]], tuple[float, float]]] = {
    "aten::mm": lambda d: (2.0 * d[0][0] * d[0][1] * d[1][1],
                           _numel(d[0]) + _numel(d[1]) + d[0][0] * d[1][1]),
    "aten::addmm": lambda d: (2.0 * d[1][0] * d[1][1] * d[2][1],
                              _numel(d[0]) + _numel(d[1]) + _numel(d[2]) + d[1][0] * d[2][1]),
    "aten::bmm": lambda d: (2.0 * d[0][0] * d[0][1] * d[0][2] * d[1][2],
                            _numel(d[0]) + _numel(d[1]) + d[0][0] * d[0][1] * d[1][2]),
    "aten::baddbmm": lambda d: (2.0 * d[1][0] * d[1][1] * d[1][2] * d[2][2],
                                _numel(d[0]) + _numel(d[1]) + _numel(d[2]) + d[1][0] * d[1][1] * d[2][2]),
}


def _gemm_flops(kind: np.ndarray, args: list[_Args], strings: _Interner, names: np.ndarray) -> dict[str, np.ndarray]:
    gemm_names = {strings.index[name]: formula for name, formula in _GEMM_SHAPES.items() if name in strings.index}
    if not gemm_names:
        return empty_table("flops")
    rows = np.flatnonzero((kind == EventKind.CPU_OP) & np.isin(names, list(gemm_names)))
    events, flops, elements = [], [], []
    for row in rows.tolist():
        raw = args[row].input_dims
        if not len(raw):
            continue
        try:
            value, moved = gemm_names[int(names[row])](msgspec.json.decode(raw))
        except (msgspec.DecodeError, TypeError, IndexError, KeyError, ValueError, RecursionError):
            continue  # shapes missing or written otherwise: no FLOPs for this op
        if all(isinstance(v, float) and math.isfinite(v) and 0 <= v < 1e21 for v in (value, moved)):
            events.append(row)
            flops.append(value)
            elements.append(moved)
    return _table("flops", event=events, flops=flops, elements=elements)


#: Elementwise ops that only stream their operands (a copy, a scale, a sum): what DDP's bucket copies are.
ELEMENTWISE_OPS = ("aten::copy_", "aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::div", "aten::div_",
                   "aten::sub", "aten::sub_")
#: Bytes per element of the tensor types torch.profiler names ("Input type"); other types are not counted.
_ITEM_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
               "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16}


def _streamed_bytes(dims: list[Any], types: list[Any]) -> float:
    """Bytes an elementwise op reads and writes: every tensor operand once, and its result (the largest operand, as
    broadcasting gives) once more. Scalars and untyped operands count nothing."""
    sizes = [_numel(d) * _ITEM_BYTES[t] for d, t in zip(dims, types) if isinstance(d, list) and t in _ITEM_BYTES]
    return float(sum(sizes) + max(sizes)) if sizes else 0.0


def _elementwise_bytes(kind: np.ndarray, args: list[_Args], strings: _Interner, names: np.ndarray) -> dict[str, np.ndarray]:
    ids = [strings.index[name] for name in ELEMENTWISE_OPS if name in strings.index]
    if not ids:
        return empty_table("elementwise")
    events, moved = [], []
    for row in np.flatnonzero((kind == EventKind.CPU_OP) & np.isin(names, ids)).tolist():
        dims, types = args[row].input_dims, args[row].input_types
        if not len(dims) or not len(types):
            continue
        try:
            value = _streamed_bytes(msgspec.json.decode(dims), msgspec.json.decode(types))
        except (msgspec.DecodeError, TypeError, ValueError, RecursionError):
            continue  # shapes written otherwise: no bytes for this op
        if math.isfinite(value) and 0 < value < 1e18:
            events.append(row)
            moved.append(value)
    return _table("elementwise", event=events, bytes=moved)


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


def _table(name: str, **columns: Any) -> dict[str, np.ndarray]:
    return {col: _fit(_ints(columns[col]), dt) if isinstance(columns[col], list) and np.dtype(dt).kind == "i"
            else np.asarray(columns[col], dtype=dt) for col, dt in SIDE_TABLES[name].items()}


def _fit(column: np.ndarray, dtype: Any) -> np.ndarray:
    """`column` as `dtype`; values that do not fit it are missing (NO_VALUE), never wrapped around."""
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
    if column.size and (column.min() < -INT_LIMIT or column.max() > INT_LIMIT):
        column[(column < -INT_LIMIT) | (column > INT_LIMIT)] = NO_VALUE
    return column


def _as_int(value: Any) -> int:
    """One number as written (decimal or 0x-hex string, int, or float); NO_VALUE when it is not one or is beyond ±INT_LIMIT."""
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


# --------------------------------------------------------------------------- metadata


def _meta(envelope: Any, source: str, event_count: int, categories: dict[str, int], skipped: dict[str, int]) -> TraceMeta:
    distributed = envelope.distributedInfo if envelope is not None else None
    distributed = distributed if isinstance(distributed, dict) else {}
    base = envelope.baseTimeNanoseconds if envelope is not None else None
    collector = envelope.daydream if envelope is not None and isinstance(envelope.daydream, dict) else {}
    features = _features(categories, isinstance(base, int))
    rank, world = _int_or_none(distributed.get("rank")), _int_or_none(distributed.get("world_size"))
    if world is not None and not 1 <= world <= MAX_WORLD_SIZE:
        skipped[f"distributedInfo.world_size {world} out of range (ignored)"] = 1
        world = None
    if rank is not None and not 0 <= rank < (world or MAX_WORLD_SIZE):
        skipped[f"distributedInfo.rank {rank} out of range (ignored)"] = 1
        rank = None
    return TraceMeta(
        source=source,
        rank=rank,
        world_size=world,
        gpus=_gpus(envelope.deviceProperties if envelope is not None else None),
        format=_format_label(features),
        features=features,
        base_time_ns=base if isinstance(base, int) and abs(base) <= INT_LIMIT else 0,
        events_in_file=event_count,
        categories=categories,
        skipped=skipped,
        distributed=distributed,
        collector=collector,
        runtime=_runtime(envelope),
    )


#: The envelope's version fields: the GPU software stack the trace was recorded with.
_RUNTIME_FIELDS = ("cuda_runtime_version", "cuda_driver_version", "cupti_version",
                   "hip_runtime_version", "hip_driver_version", "roctracer_version")


def _runtime(envelope: Any) -> dict[str, Any]:
    """{"vendor": "NVIDIA CUDA" | "AMD ROCm", and each version field the file records}; empty when none is."""
    if envelope is None:
        return {}
    found = {name: value for name in _RUNTIME_FIELDS
             if isinstance(value := getattr(envelope, name, None), (int, float, str)) and not isinstance(value, bool)}
    if any(name.startswith(("hip", "roctracer")) for name in found):
        return {"vendor": "AMD ROCm", **found}
    return {"vendor": "NVIDIA CUDA", **found} if found else {}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= INT_LIMIT else None


def _gpus(properties: Any) -> list[GpuInfo]:
    if not isinstance(properties, list):
        return []
    gpus = []
    for position, entry in enumerate(properties):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        major, minor = entry.get("computeMajor"), entry.get("computeMinor")
        device = _int_or_none(entry.get("id"))
        gpus.append(
            GpuInfo(
                device=device if device is not None else position,
                name=entry["name"],
                total_memory_bytes=_int_or_none(entry.get("totalGlobalMem")),
                compute_capability=f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else None,
                sm_count=_int_or_none(entry.get("numSms")),
                arch=entry["gcnArchName"] if isinstance(entry.get("gcnArchName"), str) else None,
            )
        )
    return gpus


def _features(categories: dict[str, int], relative_time: bool) -> list[str]:
    features = []
    if _LEGACY_CATEGORIES & categories.keys():
        features.append("legacy categories")
    if relative_time:
        features.append("baseTimeNanoseconds")
    for cat in ("cuda_driver", "cuda_sync", "overhead", "python_function", "fwdbwd"):
        if cat in categories:
            features.append(cat)
    return features


def _format_label(features: list[str]) -> str:
    if "legacy categories" in features:
        return "Kineto 2021 (Operator/Runtime/Kernel)"
    if "cuda_driver" in features or "overhead" in features:
        return "Kineto 2025 (cuda_driver, relative time)" if "baseTimeNanoseconds" in features else "Kineto 2025 (cuda_driver)"
    if "baseTimeNanoseconds" in features:
        return "Kineto 2024 (relative time)"
    return "Kineto 2022 (cpu_op/cuda_runtime)"

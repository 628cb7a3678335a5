"""Reading a document a window at a time: the decompressed text cut where two events meet, each
window decoded and turned into column pieces before the next is read; a document that cannot be cut
with certainty is read whole.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import msgspec

from daydream._heap import give_back
from daydream.trace.kineto import scan
from daydream.trace.kineto.columns import _Columns
from daydream.trace.kineto.document import (
    _EVENTS,
    _decoded_chunks,
    _first_byte,
    _not_utf8,
    _repaired_events,
    _tolerant,
    decode,
)
from daydream.trace.kineto.schema import _Envelope, _RawFile
from daydream.trace.model import Trace

Progress = Callable[[str, int, int], None]


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
    with _collector_paused():
        return _read(document, progress)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a document is read: reading makes many
    containers (lists of values, the decoded events) and no cycles among them, and each of the
    collections they would set off walks all of them again (about a twentieth of a read)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _read(document: Readable, progress: Progress | None) -> Trace:
    skipped: dict[str, int] = {}
    columns = _Columns()
    # a document that can only be read whole is read whole
    streamable = callable(getattr(document, "blocks", None))
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
#: Whether windows are read by the scanner first (scan.py: the C extension, or numba's kernels where
#: it was not built; as plain Python it would be slower than msgspec), and from how many bytes of
#: text on: the C scanner from the first; numba's takes a process about 0.13 s to load (its own
#: start), and saves up to 8 ms a MB on a GPU trace, little on one of CPU ops and `[memory]` events
#: (`scripts/bench_ingest.py` prints both for a trace), so a smaller document is read as fast by
#: msgspec alone.
SCANNER = scan.IMPLEMENTATION is not None
SCAN_FROM = 0 if scan.IMPLEMENTATION == "c" else 64 << 20
#: Cuts tried per window before the document is read whole (a cut
#: inside a string or a nested list fails to decode).
_CUT_ATTEMPTS = 8


class _Window:
    """The document's text from where reading has got to: a growing buffer of its blocks."""

    def __init__(self, document: Readable, progress: Progress | None) -> None:
        self.blocks = iter(document.blocks(progress))
        self.buffer = bytearray()
        self.at_end = False
        self.read = 0  # bytes of text appended so far

    @property
    def scanning(self) -> bool:
        """Whether the compiled scanner reads the windows from here on."""
        return SCANNER and self.read >= SCAN_FROM

    def more(self) -> bool:
        """Append the next block; False (and `at_end`) when there is none."""
        block = next(self.blocks, None)
        if block is None:
            self.at_end = True
            return False
        self.buffer.extend(block)
        self.read += len(block)
        return True

    def fill(self, size: int) -> None:
        """Read on until the buffer holds `size` bytes or the text ends."""
        while not self.at_end and len(self.buffer) < size:
            self.more()


def _stream(document: Readable, columns: _Columns, skipped: dict[str, int],
            progress: Progress | None) -> Any:
    """Read `document`'s events into `columns` a window at a time; its envelope (None for a bare
    list of events), or _NOT_STREAMED when the text cannot be cut with certainty (`columns` is then
    partly filled: discard it)."""
    window = _Window(document, progress)
    window.fill(4096)
    opened = _open_events(window)
    if opened is _NOT_STREAMED:
        return _NOT_STREAMED
    prefix_envelope, start = opened
    window.buffer[:start] = b"["  # from here on the buffer reads as the start of a list of events
    if not _cut_windows(window, columns, skipped):
        return _NOT_STREAMED
    return _last_events(window.buffer, prefix_envelope, columns, skipped, document.label,
                        window.scanning)


def _open_events(window: _Window) -> Any:
    """(the envelope before the events, or None for a bare list; where
    the first event starts), or _NOT_STREAMED."""
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
    try:
        # the key is the document's own, not text inside another value,
        # when what precedes it closes as a document
        envelope = msgspec.json.decode(bytes(buffer[:found.start()]) + b'"traceEvents":[]}',
                                       type=_RawFile)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return _NOT_STREAMED
    return envelope, found.end()


def _cut_windows(window: _Window, columns: _Columns, skipped: dict[str, int]) -> bool:
    """Decode the events a window at a time, up to the text's end;
    False when the text cannot be cut with certainty."""
    while True:
        window.fill(WINDOW)
        buffer = window.buffer
        try:
            cut = _cut(buffer, columns, skipped, window.scanning) if not window.at_end else None
        except RecursionError:
            # an event nested deeper than the decoder goes: the whole-document path says so
            return False
        if cut is None:
            if window.at_end:
                return True
            if len(buffer) > 8 * WINDOW:
                # no event ends in this much text: not a layout the stream can cut
                return False
            window.more()
            continue
        window.buffer = _without(buffer, cut)


def _last_events(buffer: bytearray, prefix_envelope: Any, columns: _Columns,
                 skipped: dict[str, int], label: str, scanning: bool) -> Any:
    """The rest: the last events, the array's end and the keys after
    it; the whole envelope, or _NOT_STREAMED."""
    scanned = _scanned(buffer, columns, skipped) if scanning else None
    if scanned is not None:
        buffer = _without(buffer, scanned)
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


def _cut(buffer: bytearray, columns: _Columns, skipped: dict[str, int],
         scanning: bool = False) -> int | None:
    """Decode the events of `buffer` ("[" and then events) up to the last place two events meet,
    into `columns`; the offset of the next event's start, or None when no place decodes (the text
    ends inside one event, or only false cuts were found)."""
    scanned = _scanned(buffer, columns, skipped) if scanning else None
    if scanned is not None:
        return scanned
    end = len(buffer)
    for _ in range(_CUT_ATTEMPTS):
        brace = buffer.rfind(b"}", 1, end)
        found = None
        while brace >= 0 and not (found := _BETWEEN_EVENTS.match(buffer, brace)):
            brace = buffer.rfind(b"}", 1, brace)
        if found is None:
            return None
        # Close the list in place of the byte after the brace (a space
        # or the comma), decode, put the byte back.
        after = buffer[brace + 1]
        buffer[brace + 1] = ord("]")
        try:
            events = _EVENTS.decode(memoryview(buffer)[:brace + 2])
        except msgspec.ValidationError:
            try:
                events = _tolerant(msgspec.json.decode(bytes(buffer[:brace + 2]),
                                                       type=list[msgspec.Raw]), skipped)
            except msgspec.DecodeError:
                events = None
        except msgspec.DecodeError as exc:
            # a "},{" inside a string or a nested list: try the one
            # before; text that is not UTF-8: replaced
            events = (_repaired_events(bytes(buffer[:brace + 2]), skipped) if _not_utf8(exc)
                      else None)
        finally:
            buffer[brace + 1] = after
        if events is None:
            end = brace
            continue
        columns.add(events, skipped)
        return found.end() - 1
    return None


def _scanned(buffer: bytearray, columns: _Columns, skipped: dict[str, int]) -> int | None:
    """The events at the start of `buffer` ("[" and then events) that the compiled scanner reads,
    into `columns`: where the next event starts, or None where it read none (msgspec reads the
    window instead)."""
    from daydream.trace.kineto.scanned import scan_events

    rows, stop, _ = scan_events(buffer, 1)
    if rows is None:
        return None
    columns.add_rows(rows, skipped)
    return stop


def _without(buffer: bytearray, cut: int) -> bytearray:
    """`buffer` without the events read (its bytes 1 to `cut`): itself, or a new buffer where
    something still views the old one's text (a decoded value, the compiler of the scanner), which
    then cannot be resized."""
    try:
        del buffer[1:cut]
    except BufferError:
        return bytearray(b"[") + buffer[cut:]
    return buffer


def _merged(before: Any, after: Any) -> Any:
    """The envelope from the keys before the events and those after them."""
    for name in _Envelope.__struct_fields__:
        if getattr(before, name) is None:
            setattr(before, name, getattr(after, name))
    return before

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
from daydream.trace.kineto import scan, scanned
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
    """The document's text from where reading has got to: its blocks appended to one buffer that
    keeps its memory as windows come and go (`text[:size]` is the text; what lies past `size` is
    stale). A buffer let shrink and grow again each window would be handed fresh pages by the C
    library each time, and taking them costs more than the copies."""

    def __init__(self, document: Readable, progress: Progress | None) -> None:
        self.blocks = iter(document.blocks(progress))
        self.text = bytearray()
        self.size = 0
        self.at_end = False
        self.read = 0  # bytes of text appended so far
        self._scratch: scanned.Scratch | None = None

    @property
    def scratch(self) -> scanned.Scratch | None:
        """The scanner's columns where it reads the windows from here on; else None."""
        if not (SCANNER and self.read >= SCAN_FROM):
            return None
        if self._scratch is None:
            self._scratch = scanned.Scratch()
        return self._scratch

    def more(self) -> bool:
        """Append the next block; False (and `at_end`) when there is none."""
        block = next(self.blocks, None)
        if block is None:
            self.at_end = True
            return False
        room = len(self.text) - self.size
        if len(block) <= room:
            self.text[self.size:self.size + len(block)] = block
        else:  # the buffer grows (as the C library grows it: no copy, no page touched twice)
            self._own_text()
            self.text[self.size:] = memoryview(block)[:room]
            self.text += memoryview(block)[room:]
        self.size += len(block)
        self.read += len(block)
        return True

    def fill(self, size: int) -> None:
        """Read on until the buffer holds `size` bytes or the text ends."""
        while not self.at_end and self.size < size:
            self.more()

    def drop(self, cut: int) -> None:
        """Drop the text from byte 1 to `cut` (the events read; byte 0 stays). Where something
        still views the text (a value msgspec decoded), it is left that text and the window goes
        on in a copy."""
        self._own_text()
        rest = self.size - cut
        self.text[1:1 + rest] = self.text[cut:self.size]
        self.size = 1 + rest

    def release(self) -> None:
        self.text, self.size = bytearray(), 0

    def _own_text(self) -> None:
        """Before the buffer is changed: a copy of it where something still views it."""
        if _viewed(self.text):
            self.text = bytearray(self.text)


def _viewed(text: bytearray) -> bool:
    """Whether a buffer is exported (a memoryview or a decoded value views it): then it cannot
    be resized, which is how this asks."""
    if not text:
        return False  # nothing in it to be seen
    try:
        last = text.pop()  # within its memory: no copy, unlike growing it
    except BufferError:
        return True
    text.append(last)
    return False


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
    window.text[0] = ord("[")  # from here on the text reads as the start of a list of events
    window.drop(start)
    if not _cut_windows(window, columns, skipped):
        return _NOT_STREAMED
    return _last_events(window, prefix_envelope, columns, skipped, document.label)


def _open_events(window: _Window) -> Any:
    """(the envelope before the events, or None for a bare list; where
    the first event starts), or _NOT_STREAMED."""
    text = window.text
    first = _first_byte(bytes(text[:window.size]))
    if first == b"[":
        return None, text.index(b"[", 0, window.size) + 1
    if first != b"{":
        return _NOT_STREAMED
    found = _EVENTS_KEY.search(text, 0, window.size)
    while found is None and window.size < 64 * WINDOW and window.more():
        text = window.text
        found = _EVENTS_KEY.search(text, 0, window.size)
    if found is None:
        return _NOT_STREAMED
    try:
        # the key is the document's own, not text inside another value,
        # when what precedes it closes as a document
        envelope = msgspec.json.decode(bytes(text[:found.start()]) + b'"traceEvents":[]}',
                                       type=_RawFile)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return _NOT_STREAMED
    return envelope, found.end()


def _cut_windows(window: _Window, columns: _Columns, skipped: dict[str, int]) -> bool:
    """Decode the events a window at a time, up to the text's end;
    False when the text cannot be cut with certainty."""
    while True:
        window.fill(WINDOW)
        try:
            cut = (_cut(window.text, window.size, columns, skipped, window.scratch)
                   if not window.at_end else None)
        except RecursionError:
            # an event nested deeper than the decoder goes: the whole-document path says so
            return False
        if cut is None:
            if window.at_end:
                return True
            if window.size > 8 * WINDOW:
                # no event ends in this much text: not a layout the stream can cut
                return False
            window.more()
            continue
        window.drop(cut)


def _last_events(window: _Window, prefix_envelope: Any, columns: _Columns,
                 skipped: dict[str, int], label: str) -> Any:
    """The rest: the last events, the array's end and the keys after
    it; the whole envelope, or _NOT_STREAMED."""
    scanned = _scanned(window.text, window.size, columns, skipped, window.scratch)
    if scanned is not None:
        window.drop(scanned)
    rest = bytes(window.text[:window.size])
    window.release()
    try:
        if prefix_envelope is None:
            tail_events = msgspec.json.decode(rest, type=list[msgspec.Raw])
            envelope = None
        else:
            tail = msgspec.json.decode(b'{"traceEvents":' + rest, type=_RawFile)
            tail_events, tail.traceEvents = tail.traceEvents, []
            envelope = _merged(prefix_envelope, tail)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return _NOT_STREAMED
    for chunk in _decoded_chunks(tail_events, skipped, label):
        columns.add(chunk, skipped)
    if columns.decoded == 0:
        return _NOT_STREAMED  # no event read: the whole-document path says why
    return envelope


def _cut(text: bytearray, size: int, columns: _Columns, skipped: dict[str, int],
         scratch: scanned.Scratch | None = None) -> int | None:
    """Decode the events of `text[:size]` ("[" and then events) up to the last place two events
    meet, into `columns`; the offset of the next event's start, or None when no place decodes (the
    text ends inside one event, or only false cuts were found). The scanner reads first where
    `scratch` is given (its columns)."""
    scanned = _scanned(text, size, columns, skipped, scratch)
    if scanned is not None:
        return scanned
    end = size
    for _ in range(_CUT_ATTEMPTS):
        brace = text.rfind(b"}", 1, end)
        found = None
        while brace >= 0 and not (found := _BETWEEN_EVENTS.match(text, brace, size)):
            brace = text.rfind(b"}", 1, brace)
        if found is None:
            return None
        events = _decoded_up_to(text, brace, skipped)
        if events is None:
            end = brace
            continue
        columns.add(events, skipped)
        return found.end() - 1
    return None


def _decoded_up_to(text: bytearray, brace: int, skipped: dict[str, int]) -> list[Any] | None:
    """The events of text[:brace + 1] ("[", events, the last one's closing brace); None where
    that does not decode (the brace was inside a string or a nested list)."""
    # Close the list in place of the byte after the brace (a space
    # or the comma), decode, put the byte back.
    after = text[brace + 1]
    text[brace + 1] = ord("]")
    try:
        events: list[Any] | None = _EVENTS.decode(memoryview(text)[:brace + 2])
    except msgspec.ValidationError:
        try:
            events = _tolerant(msgspec.json.decode(bytes(text[:brace + 2]),
                                                   type=list[msgspec.Raw]), skipped)
        except msgspec.DecodeError:
            events = None
    except msgspec.DecodeError as exc:
        # a "},{" inside a string or a nested list: try the one
        # before; text that is not UTF-8: replaced
        events = (_repaired_events(bytes(text[:brace + 2]), skipped) if _not_utf8(exc)
                  else None)
    finally:
        text[brace + 1] = after
    return events


def _scanned(text: bytearray, size: int, columns: _Columns, skipped: dict[str, int],
             scratch: scanned.Scratch | None) -> int | None:
    """The events at the start of `text[:size]` ("[" and then events) that the scanner reads into
    `scratch`, then into `columns`: where the next event starts, or None where it read none
    (msgspec reads the window instead) or is not to read (`scratch` None)."""
    if scratch is None:
        return None
    rows, stop, _ = scanned.scan_events(text, 1, size, scratch)
    if rows is None:
        return None
    columns.add_rows(rows, skipped)
    del rows
    scratch.release()
    return stop


def _merged(before: Any, after: Any) -> Any:
    """The envelope from the keys before the events and those after them."""
    for name in _Envelope.__struct_fields__:
        if getattr(before, name) is None:
            setattr(before, name, getattr(after, name))
    return before

"""The whole-document path: the text decoded at once, malformed events skipped one by one and
counted by reason, and the precise error for what is not a trace at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec

from daydream.errors import TraceFormatError
from daydream.trace.kineto.columns import _Columns
from daydream.trace.kineto.schema import _Event, _RawFile
from daydream.trace.model import Trace

Progress = Callable[[str, int, int], None]


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


def _split_checked(raw: bytes | bytearray, source: str,
                   progress: Progress | None) -> tuple[Any, list[msgspec.Raw]]:
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


def _split_events(raw: bytes | bytearray, source: str,
                  repaired: bool = False) -> tuple[Any, list[msgspec.Raw]]:
    """(the envelope, each event's undecoded JSON): one pass that only checks the JSON and finds
    where each event begins and ends. A document whose strings hold bytes that are not UTF-8 (in its
    envelope too: a device name) is read again with those bytes replaced by U+FFFD."""
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


def _decoded_chunks(events: list[msgspec.Raw], skipped: dict[str, int],
                    source: str) -> Iterator[list[_Event]]:
    """The events, decoded `CHUNK_EVENTS` at a time; a chunk the fast typed decode rejects is
    decoded event by event, and the malformed events are skipped and counted by reason."""
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
    """`raw` with every byte sequence that is not UTF-8 (a lone surrogate's bytes, Latin-1 text)
    replaced by U+FFFD: a name keeps its readable part."""
    return bytes(raw).decode("utf-8", "replace").encode("utf-8")


def _repaired_events(text: bytes, skipped: dict[str, int]) -> list[_Event] | None:
    """The events of `text` (a JSON list) with what is not UTF-8 replaced; None when it is still not
    a list of events (a false cut)."""
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
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             type(None): "null"}
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



def _build_trace(envelope: Any, events: list[msgspec.Raw], source: str,
                 progress: Progress | None) -> Trace:
    skipped: dict[str, int] = {}
    columns = _Columns()
    for chunk in _decoded_chunks(events, skipped, source):
        columns.add(chunk, skipped)
        if progress:
            progress("decoding events", columns.decoded, len(events))
    if columns.decoded == 0:
        reasons = ", ".join(f"{why}: {n}" for why, n in skipped.items())
        raise TraceFormatError(source,
                               f"none of its {len(events)} events could be read ({reasons})")
    return columns.finish(envelope, source, skipped)

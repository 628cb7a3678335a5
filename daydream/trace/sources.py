"""Where trace bytes come from: a file, a folder of rank files, or an archive.

A `Source` names one rank's trace document (a file, or a member of a tar
archive) and knows how to read its bytes, decompressing gzip or xz as it goes. The
identity of a source (path, member, size, mtime) is what the cache is keyed on.
"""

from __future__ import annotations

import lzma
import os
import stat
import tarfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from daydream._environment import environment_size
from daydream.errors import InputError, TraceFormatError

Progress = Callable[[str, int, int], None]

_GZIP_MAGIC = b"\x1f\x8b"
_XZ_MAGIC = b"\xfd7zXZ\x00"
#: .json.xz: profiler JSON in xz (`xz -9`) takes about a quarter less room than in gzip
_TRACE_SUFFIXES = (".json", ".json.gz", ".json.xz")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_CHUNK = 1 << 20
#: The most bytes one block of a document holds when it is read a block at a time.
BLOCK = 4 << 20
#: Default most decompressed bytes of one trace document (DAYDREAM_MAX_BYTES overrides, e.g. 64GB).
DEFAULT_MAX_BYTES = 32 * 2**30
#: A gzip member this many times larger than its compressed size, once
#: past BOMB_FLOOR bytes, is refused: profiler JSON compresses 5-50x;
#: deflate's ceiling is about 1000x, which only filler reaches.
BOMB_RATIO = 250
BOMB_FLOOR = 256 * 2**20


def max_bytes() -> int:
    """The most decompressed bytes daydream reads from one document:
    DAYDREAM_MAX_BYTES, else DEFAULT_MAX_BYTES."""
    return environment_size("DAYDREAM_MAX_BYTES", DEFAULT_MAX_BYTES)


@dataclass(slots=True, frozen=True)
class Source:
    """One trace document: `path`, or member `member` of the archive at `path`."""

    path: Path
    member: str | None = None
    size: int = 0
    mtime_ns: int = 0
    # a member's place in its archive (read in that order, an archive is read in one pass)
    index: int = -1

    @property
    def label(self) -> str:
        return f"{self.path}::{self.member}" if self.member else str(self.path)

    @property
    def identity(self) -> str:
        return f"{self.path.resolve()}::{self.member or ''}"

    def read(self, progress: Progress | None = None) -> bytearray:
        """The decompressed bytes of this document (at most `max_bytes()` of them)."""
        body = bytearray()
        for block in self.blocks(progress):
            body += block
        return body

    def blocks(self, progress: Progress | None = None) -> Iterator[bytes]:
        """The decompressed bytes of this document, a block at a time
        (at most `max_bytes()` in all)."""
        limit = max_bytes()
        if self.member is None:
            _check_regular(self.path)
            with open(self.path, "rb") as handle:
                yield from _blocks(handle, self.label, self.size, limit, progress)
            return
        try:
            info, member = _ArchivePass.member(self.path, self.member)
            if member is None:
                raise TraceFormatError(self.label, "member is not a regular file",
                                       "repack the archive with the files themselves")
            yield from _blocks(member, self.label, info.size, limit, progress)
        except (tarfile.TarError, EOFError, OSError, zlib.error, KeyError) as exc:
            _ArchivePass.close()
            raise TraceFormatError(self.label, f"cannot read archive member ({_first_line(exc)})",
                                   "is the archive complete?") from None


class _ArchivePass:
    """One forward pass over a tar archive, kept open between the reads of its members: each member
    is reached by reading on from the last one (a compressed archive cannot be entered in the
    middle), so members read in archive order (`Source.index`) cost one pass in all, not one pass
    each. Asking for a member already passed starts a new pass."""

    _open: _ArchivePass | None = None

    def __init__(self, path: Path) -> None:
        self.path = path
        # (closed by close(), when another archive or none is read)
        self.archive = tarfile.open(path, "r|*")  # noqa: SIM115
        self.passed: set[str] = set()

    @classmethod
    def member(cls, path: Path, name: str) -> tuple[tarfile.TarInfo, IO[bytes] | None]:
        """Member `name` of the archive at `path` and its bytes (None
        for a member that is not a regular file)."""
        current = cls._open
        if current is None or current.path != path or name in current.passed:
            cls.close()
            current = cls._open = cls(path)
        while (info := current.archive.next()) is not None:
            current.passed.add(info.name)
            if info.name == name:
                return info, current.archive.extractfile(info) if info.isfile() else None
        cls.close()
        raise KeyError(f"no member {name!r}")

    @classmethod
    def close(cls) -> None:
        if cls._open is not None:
            cls._open.archive.close()
            cls._open = None


def close_archives() -> None:
    """Close the archive a read left open for the next member (done reading a job's ranks)."""
    _ArchivePass.close()


def in_reading_order(sources: list[Source]) -> list[int]:
    """The positions of `sources` in the order that reads each archive
    in one pass: by path, then archive place."""
    return sorted(range(len(sources)),
                  key=lambda i: (str(sources[i].path), sources[i].index, sources[i].member or ""))


#: `example:NAME` names a trace shipped with daydream (daydream/data/traces), so that every example
#: of the help runs from an installed package.
EXAMPLE_PREFIX = "example:"


def example_names() -> list[str]:
    """The traces shipped with daydream, by the NAME of `example:NAME`."""
    return sorted(p.name.removesuffix(".json.gz") for p in _examples_folder().glob("*.json.gz"))


def packaged_example(text: str) -> Path | None:
    """The path of the shipped trace `text` names (`example:cnn_v100`), None for any other text;
    InputError for a name that is not shipped."""
    if not text.startswith(EXAMPLE_PREFIX):
        return None
    name = text[len(EXAMPLE_PREFIX):].removesuffix(".json.gz")
    path = _examples_folder() / f"{name}.json.gz"
    if name not in example_names():
        raise InputError(f"{text}: no such example trace — the examples are "
                         f"{', '.join(EXAMPLE_PREFIX + n for n in example_names())}")
    return path


def _examples_folder() -> Path:
    return Path(__file__).resolve().parents[1] / "data" / "traces"


def discover(path: str | os.PathLike[str]) -> list[Source]:
    """The trace documents at `path`: a trace file, a folder of them, a
    tar archive, or `example:NAME`."""
    root = packaged_example(str(path)) or Path(path)
    if not root.exists():
        raise InputError(f"{root}: no such file or folder — check the path")
    if root.is_dir():
        return _folder_sources(root)
    _check_regular(root)
    if _is_archive(root):
        return _archive_sources(root)
    info = root.stat()
    return [Source(root, None, info.st_size, info.st_mtime_ns)]


def _check_regular(path: Path) -> None:
    """Refuse devices, pipes and sockets before opening them: /dev/zero
    never ends, a pipe may never start."""
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        raise InputError(f"{path}: not a regular file (a device, pipe or socket) — save the trace "
                         "to a file and name that")


def _folder_sources(root: Path) -> list[Source]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(_TRACE_SUFFIXES))
    if not files:
        raise InputError(f"{root}: folder holds no *.json, *.json.gz or *.json.xz trace files — "
                         "point at a trace file or a folder of rank files")
    return [Source(p, None, p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def _is_archive(path: Path) -> bool:
    return path.name.endswith(_ARCHIVE_SUFFIXES)


def _archive_sources(root: Path) -> list[Source]:
    info = root.stat()
    try:
        with tarfile.open(root, "r:*") as archive:
            listed = [m for m in archive.getmembers() if m.name.endswith(_TRACE_SUFFIXES)]
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise TraceFormatError(str(root), f"not a readable tar archive ({_first_line(exc)})",
                               "is the archive complete?") from None
    counts = Counter(m.name for m in listed)
    twice = sorted(name for name, count in counts.items() if count > 1)
    if twice:
        raise TraceFormatError(str(root), f"archive lists {twice[0]!r} more than once",
                               "repack it with one file per rank")
    place = {m.name: index for index, m in enumerate(listed)}
    members = sorted(m.name for m in listed if m.isfile())
    if not members:
        raise InputError(f"{root}: archive holds no *.json, *.json.gz or *.json.xz trace files — "
                         "pack one trace file per rank")
    return ([Source(root, member, info.st_size, info.st_mtime_ns, place[member])
             for member in members])


def _blocks(handle: IO[bytes], label: str, size: int, limit: int,
            progress: Progress | None) -> Iterator[bytes]:
    """The document's bytes, decompressed when gzip or xz, a block (at most BLOCK bytes) at a
    time."""
    head = handle.read(2)
    if head == _GZIP_MAGIC:
        yield from _gunzipped_blocks(handle, head, label, size, limit, progress)
    elif head == _XZ_MAGIC[:2]:
        yield from _unxzed_blocks(handle, head + handle.read(len(_XZ_MAGIC) - 2), label, size,
                                  limit, progress)
    else:
        yield from _plain_blocks(handle, head, label, size, limit, progress)


def _plain_blocks(handle: IO[bytes], head: bytes, label: str, size: int, limit: int,
                  progress: Progress | None) -> Iterator[bytes]:
    if size > limit:
        raise _too_large(label, size, limit)
    produced = len(head)
    yield head
    while chunk := handle.read(BLOCK):
        produced += len(chunk)
        if produced > limit:
            raise _too_large(label, produced, limit)
        yield chunk
    if progress:
        progress("reading", produced, produced)


def _isal_zlib() -> Any:
    """python-isal's zlib-compatible module where it is installed, else None."""
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


def inflater() -> Any:
    """A gzip decompressor with zlib's interface (bounded output, `unconsumed_tail`, `unused_data`,
    `eof`): python-isal's where it is installed (about twice zlib's speed), else zlib's."""
    return (_isal_zlib() or zlib).decompressobj(wbits=31)


def _gunzipped_blocks(handle: IO[bytes], head: bytes, label: str, size: int, limit: int,
                      progress: Progress | None) -> Iterator[bytes]:
    """Each gzip member in turn (a file may hold several back to back), BLOCK bytes at most at a
    time, refusing output past `limit` or growing like a bomb."""
    stream, data = inflater(), head
    consumed = produced = 0
    try:
        while True:
            block = stream.decompress(data, BLOCK)
            while True:
                produced += len(block)
                _check_growth(label, produced, consumed, limit)
                if block:
                    yield block
                block, stream = _next_block(stream)
                if block is None:
                    break
            data, consumed = _more(handle, consumed, size, progress)
            if not data:
                break
    except (zlib.error, _isal_error()) as exc:
        raise _damaged(label, "gzip", exc) from None
    if not stream.eof:
        raise _damaged(label, "gzip")


def _unxzed_blocks(handle: IO[bytes], head: bytes, label: str, size: int, limit: int,
                   progress: Progress | None) -> Iterator[bytes]:
    """Each xz stream in turn (the null padding xz allows between them skipped), BLOCK bytes at
    most at a time, refusing output past `limit` or growing like a bomb."""
    stream, data = lzma.LZMADecompressor(lzma.FORMAT_XZ), head
    consumed = produced = 0
    try:
        while True:
            if stream.eof:  # what follows a stream: padding, then maybe another stream
                data = (stream.unused_data + data).lstrip(b"\x00")
                if data:
                    stream = lzma.LZMADecompressor(lzma.FORMAT_XZ)
            if data or not (stream.eof or stream.needs_input):
                block = stream.decompress(data, BLOCK)
                data = b""
                produced += len(block)
                _check_growth(label, produced, consumed, limit, "xz")
                if block:
                    yield block
                continue
            data, consumed = _more(handle, consumed, size, progress)
            if not data:
                break
    except lzma.LZMAError as exc:
        raise _damaged(label, "xz", exc) from None
    if not stream.eof:
        raise _damaged(label, "xz")


def _more(handle: IO[bytes], consumed: int, size: int,
          progress: Progress | None) -> tuple[bytes, int]:
    """The next chunk of compressed input and the bytes consumed with it, said to `progress`."""
    data = handle.read(_CHUNK)
    consumed += len(data)
    if progress:
        progress("decompressing", min(consumed, size), size)
    return data, consumed


def _damaged(label: str, compression: str, exc: BaseException | None = None) -> TraceFormatError:
    """Corrupt compressed data (the decoder's `exc`), or, without one, a stream cut short."""
    if exc is not None:
        return TraceFormatError(label, f"corrupt {compression} data ({_first_line(exc)})",
                                "re-copy the file; it is damaged")
    return TraceFormatError(label, f"{compression} stream is truncated",
                            "the file was cut short; re-copy or re-record it")


def _next_block(stream: Any) -> tuple[bytes | None, Any]:
    """The next block of what `stream` holds already, and the stream that holds the rest (a new one
    for a next member); None when it needs more input."""
    if stream.eof:  # first: past a member's end zlib keeps its input in `unconsumed_tail` too
        if not stream.unused_data:
            return None, stream
        rest, stream = stream.unused_data, inflater()
        return stream.decompress(rest, BLOCK), stream
    if stream.unconsumed_tail:
        return stream.decompress(stream.unconsumed_tail, BLOCK), stream
    return None, stream


def _isal_error() -> type[Exception]:
    """The error python-isal raises for damaged data (zlib's where it is not installed)."""
    module = _isal_zlib()
    error: type[Exception] = module.error if module is not None else zlib.error
    return error


def _check_growth(label: str, produced: int, consumed: int, limit: int,
                  compression: str = "gzip") -> None:
    if produced > limit:
        raise _too_large(label, produced, limit)
    if produced > BOMB_FLOOR and produced > BOMB_RATIO * max(consumed, 1):
        raise TraceFormatError(label, f"{compression} data expands over {BOMB_RATIO} times (to "
                                      f"more than {produced / 2**20:.0f} MiB)",
                               "a profiler trace does not compress this well; the file is damaged "
                               "or not a trace")


def _too_large(label: str, size: int, limit: int) -> InputError:
    return InputError(f"{label}: decompresses to more than {limit / 2**30:.3g} GiB "
                      "(DAYDREAM_MAX_BYTES) — raise the limit if the trace is real, e.g. "
                      f"DAYDREAM_MAX_BYTES={max(2 * size, limit * 2) // 2**30 + 1}GiB")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

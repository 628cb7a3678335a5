"""Where trace bytes come from: a file, a folder of rank files, or an archive.

A `Source` names one rank's trace document (a file, or a member of a tar
archive) and knows how to read its bytes, decompressing gzip as it goes. The
identity of a source (path, member, size, mtime) is what the cache is keyed on.
"""

from __future__ import annotations

import os
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from daydream.errors import InputError, TraceFormatError

Progress = Callable[[str, int, int], None]

_GZIP_MAGIC = b"\x1f\x8b"
_TRACE_SUFFIXES = (".json", ".json.gz")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_CHUNK = 1 << 20


@dataclass(slots=True, frozen=True)
class Source:
    """One trace document: `path`, or member `member` of the archive at `path`."""

    path: Path
    member: str | None = None
    size: int = 0
    mtime_ns: int = 0

    @property
    def label(self) -> str:
        return f"{self.path}::{self.member}" if self.member else str(self.path)

    @property
    def identity(self) -> str:
        return f"{self.path.resolve()}::{self.member or ''}"

    def read(self, progress: Progress | None = None) -> bytes:
        """The decompressed bytes of this document."""
        if self.member is None:
            with open(self.path, "rb") as handle:
                return _read_maybe_gzip(handle, self.label, self.size, progress)
        try:
            with tarfile.open(self.path, "r:*") as archive:
                member = archive.extractfile(self.member)
                if member is None:
                    raise TraceFormatError(self.label, "archive member is not a regular file", "")
                return _read_maybe_gzip(member, self.label, self.size, progress)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise TraceFormatError(self.label, f"cannot read archive member ({_first_line(exc)})", "is the archive complete?") from None


def discover(path: str | os.PathLike[str]) -> list[Source]:
    """The trace documents at `path`: a trace file, a folder of them, or a tar archive."""
    root = Path(path)
    if not root.exists():
        raise InputError(f"{root}: no such file or folder — check the path")
    if root.is_dir():
        return _folder_sources(root)
    if _is_archive(root):
        return _archive_sources(root)
    stat = root.stat()
    return [Source(root, None, stat.st_size, stat.st_mtime_ns)]


def _folder_sources(root: Path) -> list[Source]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(_TRACE_SUFFIXES))
    if not files:
        raise InputError(f"{root}: folder holds no *.json or *.json.gz trace files — point at a trace file or a folder of rank files")
    return [Source(p, None, p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def _is_archive(path: Path) -> bool:
    return path.name.endswith(_ARCHIVE_SUFFIXES)


def _archive_sources(root: Path) -> list[Source]:
    stat = root.stat()
    try:
        with tarfile.open(root, "r:*") as archive:
            members = sorted(
                m.name for m in archive.getmembers() if m.isfile() and m.name.endswith(_TRACE_SUFFIXES)
            )
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise TraceFormatError(str(root), f"not a readable tar archive ({_first_line(exc)})", "is the archive complete?") from None
    if not members:
        raise InputError(f"{root}: archive holds no *.json or *.json.gz trace files — pack one trace file per rank")
    return [Source(root, member, stat.st_size, stat.st_mtime_ns) for member in members]


def _read_maybe_gzip(handle: IO[bytes], label: str, size: int, progress: Progress | None) -> bytes:
    head = handle.read(2)
    if head != _GZIP_MAGIC:
        body = head + handle.read()
        if progress:
            progress("reading", len(body), len(body))
        return body
    chunks: list[bytes] = []
    inflater = zlib.decompressobj(wbits=31)
    data = head
    consumed = 0
    try:
        while True:
            chunks.append(inflater.decompress(data))
            while inflater.eof and inflater.unused_data:
                # A gzip file may hold several members back to back.
                rest = inflater.unused_data
                inflater = zlib.decompressobj(wbits=31)
                chunks.append(inflater.decompress(rest))
            data = handle.read(_CHUNK)
            consumed += len(data)
            if progress:
                progress("decompressing", min(consumed, size), size)
            if not data:
                break
    except zlib.error as exc:
        raise TraceFormatError(label, f"corrupt gzip data ({_first_line(exc)})", "re-copy the file; it is damaged") from None
    if not inflater.eof:
        raise TraceFormatError(label, "gzip stream is truncated", "the file was cut short; re-copy or re-record it")
    return b"".join(chunks)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__

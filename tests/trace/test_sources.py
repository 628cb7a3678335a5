"""Reading a document's bytes: gzip through python-isal where installed and zlib otherwise, the same bytes either way."""

from __future__ import annotations

import gzip
import json
import lzma
import zlib
from pathlib import Path

import pytest

from daydream.errors import DaydreamError
from daydream.trace import sources
from daydream.trace.sources import Source

#: Text that compresses well, long enough for several blocks of output.
TEXT = b"".join(b'{"ph": "X", "name": "aten::add", "ts": %d, "dur": 3},\n' % i for i in range(200_000))


@pytest.fixture(params=["as installed", "zlib"])
def decompressor(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "zlib":
        monkeypatch.setattr(sources, "inflater", lambda: zlib.decompressobj(wbits=31))
    return str(request.param)


def _read(path: Path, limit: int = 1 << 40) -> bytes:
    source = Source(path, None, path.stat().st_size, path.stat().st_mtime_ns)
    with open(path, "rb") as handle:
        return b"".join(sources._blocks(handle, str(path), source.size, limit, None))


def test_gzip_members_back_to_back_read_whole(tmp_path: Path, decompressor: str) -> None:
    # Two gzip members concatenated are one file to gunzip (`cat a.gz b.gz`); each block at most BLOCK bytes.
    path = tmp_path / "two.json.gz"
    path.write_bytes(gzip.compress(TEXT[:5_000_000]) + gzip.compress(TEXT[5_000_000:]))
    with open(path, "rb") as handle:
        blocks = list(sources._blocks(handle, str(path), path.stat().st_size, 1 << 40, None))
    assert b"".join(blocks) == TEXT and max(len(b) for b in blocks) <= sources.BLOCK


def test_plain_text_passes_through(tmp_path: Path, decompressor: str) -> None:
    path = tmp_path / "plain.json"
    path.write_bytes(TEXT)
    assert _read(path) == TEXT


def _damaged(tmp_path: Path, packed: bytes, suffix: str, at: int) -> tuple[Path, Path]:
    """`packed` cut in half, and with 40 bytes from `at` overwritten: (cut.json.SUFFIX, bad.json.SUFFIX)."""
    truncated, corrupt = tmp_path / f"cut.json{suffix}", tmp_path / f"bad.json{suffix}"
    truncated.write_bytes(packed[: len(packed) // 2])
    corrupt.write_bytes(packed[:at] + b"\xff" * 40 + packed[at + 40:])
    return truncated, corrupt


def test_damaged_gzip_is_one_error_naming_the_file(tmp_path: Path, decompressor: str) -> None:
    truncated, corrupt = _damaged(tmp_path, gzip.compress(TEXT), ".gz", 20)
    with pytest.raises(DaydreamError, match="truncated"):
        _read(truncated)
    with pytest.raises(DaydreamError, match=r"bad\.json\.gz"):
        _read(corrupt)


def test_output_past_the_limit_is_refused(tmp_path: Path, decompressor: str) -> None:
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(TEXT))
    with pytest.raises(DaydreamError, match="DAYDREAM_MAX_BYTES"):
        _read(path, limit=len(TEXT) // 2)


def test_xz_streams_back_to_back_read_whole_and_damage_is_one_error(tmp_path: Path) -> None:
    # `cat a.xz b.xz` (with the padding xz allows between streams) is one file to unxz; blocks at most BLOCK bytes.
    path = tmp_path / "two.json.xz"
    path.write_bytes(lzma.compress(TEXT[:5_000_000]) + b"\x00" * 4 + lzma.compress(TEXT[5_000_000:]))
    with open(path, "rb") as handle:
        blocks = list(sources._blocks(handle, str(path), path.stat().st_size, 1 << 40, None))
    assert b"".join(blocks) == TEXT and max(len(b) for b in blocks) <= sources.BLOCK
    assert [s.path.name for s in sources.discover(tmp_path)] == ["two.json.xz"]
    truncated, corrupt = _damaged(tmp_path, lzma.compress(TEXT), ".xz", 40)
    with pytest.raises(DaydreamError, match="xz stream is truncated"):
        _read(truncated)
    with pytest.raises(DaydreamError, match=r"bad\.json\.xz.*corrupt xz data"):
        _read(corrupt)
    with pytest.raises(DaydreamError, match="DAYDREAM_MAX_BYTES"):
        _read(path, limit=len(TEXT) // 2)


def test_a_trace_written_to_a_json_xz_name_is_xz_and_reads_back(tmp_path: Path) -> None:
    from daydream.trace.collect import write_trace_document

    document = {"traceEvents": [{"ph": "X", "name": "aten::add", "ts": i, "dur": 3} for i in range(1000)]}
    for name, magic in (("run.json.xz", b"\xfd7zXZ\x00"), ("run.json.gz", b"\x1f\x8b")):
        path = tmp_path / name
        write_trace_document(path, document)
        assert path.read_bytes().startswith(magic)
        assert json.loads(bytes(sources.discover(path)[0].read())) == document

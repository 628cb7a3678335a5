"""What the scripts that generate a docs/ page share: their options, a scratch cache, publishing the page."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "traces"


def page_options(description: str, page: str, corpus: bool = True) -> argparse.ArgumentParser:
    """--out (default docs/PAGE, '-' for none) and, for scripts that read it, --corpus."""
    parser = argparse.ArgumentParser(description=description)
    if corpus:
        parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--out", default=str(REPO / "docs" / page), help="markdown file to write, or - for none")
    return parser


def corpus_missing(script: str, corpus: Path) -> bool:
    """Say so (one line on stderr) when the corpus folder is not there."""
    if corpus.is_dir():
        return False
    print(f"{script}: {corpus}: no such folder — pass --corpus", file=sys.stderr)
    return True


@contextmanager
def scratch_cache() -> Iterator[Path]:
    """A temporary folder, also used as daydream's trace cache unless DAYDREAM_CACHE_DIR is set."""
    with tempfile.TemporaryDirectory() as folder:
        os.environ.setdefault("DAYDREAM_CACHE_DIR", str(Path(folder) / "cache"))
        yield Path(folder)


def write_or_print(text: str, out: str) -> None:
    """Write `text` to the file `out`, or to stdout for '-'."""
    if out == "-":
        sys.stdout.write(text)
    else:
        Path(out).write_text(text)


def publish(text: str, out: str) -> None:
    """Print the page and write it to `out` (unless '-')."""
    print(text)
    if out != "-":
        Path(out).write_text(text)

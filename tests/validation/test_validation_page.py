"""docs/validation.md's AMP section is what scripts/validate.py computes now from the corpus (deterministic: GPU
traces, modelled tier), so the page cannot drift from the code."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import validate  # noqa: E402


def test_the_amp_section_is_what_the_corpus_gives_now(corpus: Path) -> None:
    section = "\n".join(validate.amp_section(validate.amp_rows(corpus)))
    assert section in (REPO / "docs" / "validation.md").read_text()

"""Every corpus trace's predictions against those stored before (scripts/store_predictions.py).

The simulator is deterministic, so a refactor, a speed-up or a new reader must leave every number here
alone to the nanosecond. A change meant to move predictions regenerates the file
(`python scripts/store_predictions.py`) and says in its commit which moved and why.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import CORPUS

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import store_predictions  # noqa: E402

STORED = json.loads(store_predictions.STORED.read_text())


def test_the_stored_file_covers_the_corpus(corpus: Path) -> None:
    assert sorted(STORED) == sorted(str(p.relative_to(corpus)) for p in store_predictions.traces())
    assert all(len(found) == len(store_predictions.WHATIFS) for found in STORED.values())


@pytest.mark.parametrize("name", sorted(STORED))
def test_predictions_are_as_stored(corpus: Path, name: str) -> None:
    assert CORPUS == store_predictions.CORPUS
    now = {name: store_predictions.predictions_of(corpus / name)}
    assert store_predictions.differences({name: STORED[name]}, now) == []

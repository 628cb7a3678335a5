"""Shared fixtures: the real-trace corpus, an isolated cache, tiny hand-built traces."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("DAYDREAM_CORPUS", REPO.parent / "shared" / "traces"))


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty cache folder."""
    folder = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("DAYDREAM_CACHE_DIR", str(folder))
    # Predictions stay deterministic: a test that wants the cost stage's measured tier turns it on itself.
    monkeypatch.setenv("DAYDREAM_MEASURE", "0")
    return folder


def corpus_root() -> Path:
    """The shared trace corpus; missing is a failure in CI and a skip elsewhere."""
    if not (CORPUS / "MANIFEST.json").is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"trace corpus missing at {CORPUS} (CI=true requires it)")
        pytest.skip(f"trace corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def corpus() -> Path:
    return corpus_root()


@pytest.fixture(scope="session")
def manifest(corpus: Path) -> dict[str, Any]:
    return json.loads((corpus / "MANIFEST.json").read_text())

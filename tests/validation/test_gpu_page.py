"""docs/gpu-validation.md holds the what-if table that scripts/whatif_truth.py computes from the H200 traces kept in
examples/h200 (the modelled tier: no GPU needed), so the page cannot drift from the code."""

from __future__ import annotations

import argparse
import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import whatif_truth  # noqa: E402


def test_the_gpu_page_shows_what_the_recorded_traces_give_now() -> None:
    options = argparse.Namespace(device="cuda", budget=300.0)
    rows = [row for example in ("mlp", "cnn", "transformer")
            for row in whatif_truth.recorded(example, REPO / "examples" / "h200", options)]
    assert len(rows) == 15 and all(row.error is not None for row in rows)
    page = (REPO / "docs" / "gpu-validation.md").read_text()
    assert whatif_truth.table(rows) in page

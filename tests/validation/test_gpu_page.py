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


def test_the_gpu_page_shows_what_the_realistic_rounds_give_now() -> None:
    # Both rounds of the GPU-bound models combined (the median error per what-if), and the predicted peaks against the
    # allocator's that round 2 kept: `whatif_truth.py --recorded examples/h200/realistic --sizes realistic`.
    options = argparse.Namespace(device="cuda", budget=300.0, sizes="realistic")
    folder = REPO / "examples" / "h200" / "realistic"
    per_round = [[row for example in ("cnn", "transformer", "resnet")
                  for row in whatif_truth.recorded(example, folder / f"round-{n}", options)] for n in (1, 2)]
    rows = whatif_truth.combined(per_round)
    assert len(rows) == 21 and all(row.error is not None for row in rows)
    assert sum(row.real_peak is not None for row in rows) == 12
    page = (REPO / "docs" / "gpu-validation.md").read_text()
    assert whatif_truth.table(rows) + whatif_truth.memory_table(rows) in page

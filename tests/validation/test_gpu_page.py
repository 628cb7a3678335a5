"""docs/gpu-validation.md holds the what-if table that scripts/whatif_truth.py computes from the H200 traces kept in
examples/h200 (the modelled tier: no GPU needed), so the page cannot drift from the code."""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

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
    # Every round of the GPU-bound models combined (the median error per what-if), and the predicted peaks against the
    # allocator's that rounds 2 to 6 kept: `whatif_truth.py --recorded examples/h200/realistic --sizes realistic`.
    # Each (round, model) predicts in its own subprocesses: two at a time.
    options = argparse.Namespace(device="cuda", budget=300.0, sizes="realistic")
    folders = sorted((REPO / "examples" / "h200" / "realistic").glob("round-*"), key=lambda f: int(f.name.split("-")[1]))
    assert [f.name for f in folders] == [f"round-{n}" for n in range(1, 7)]
    pairs = [(example, folder) for folder in folders for example in ("cnn", "transformer", "resnet")]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda pair: whatif_truth.recorded(pair[0], pair[1], options), pairs))
    per_round = [[row for (_, folder), rows in zip(pairs, done) if folder == f for row in rows] for f in folders]
    # the variants each run recorded, counted from the folders (a model a round did not run has no baseline there)
    assert [sum(row.error is not None for row in rows) for rows in per_round] == [20, 12, 15, 4, 3, 13]
    rows = whatif_truth.combined(per_round)
    assert len(rows) == 21 and all(row.error is not None for row in rows)
    assert sum(row.real_peak is not None for row in rows) == 21
    page = (REPO / "docs" / "gpu-validation.md").read_text()
    assert whatif_truth.table(rows) + whatif_truth.memory_table(rows) in page
    # the sixth round alone (2026-12-05: out of sample; the cnn and the transformer), as its own section shows it
    sixth = [row for row in per_round[5] if row.example != "resnet"]
    assert whatif_truth.table(sixth) + whatif_truth.memory_table(sixth) in page

"""docs/validation-data-loading.md holds the table scripts/validate_data_loading.py computes from the rounds kept in
examples/loading (real DataLoader runs on the CPU, with and without workers), so the page cannot drift from the code."""

from __future__ import annotations

import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import validate_data_loading  # noqa: E402


def test_the_data_loading_page_shows_what_the_kept_rounds_give_now() -> None:
    folder = REPO / "examples" / "loading"
    assert len(list(folder.glob("round-*"))) >= 5
    text = validate_data_loading.figures(folder, ["cnn", "mlp"], [1, 2])
    assert text.count("overlap-data-loading:workers=") == 4
    assert text in (REPO / "docs" / "validation-data-loading.md").read_text()

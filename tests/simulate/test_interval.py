"""Intervals: a hand-computed one, the validated errors held to the pages they are read from, the coverage page held to
its script, and the interval in `whatif --json`."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from daydream.cli import main
from daydream.simulate import interval
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import interval_coverage  # noqa: E402
import validated_errors  # noqa: E402


def test_an_interval_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # Five steady iterations around a median of 100 ns (90 to 104), two validated rows of the what-if (-20% and +25%:
    # with fewer than five, their extremes), 30% of the critical path unexplained.
    monkeypatch.setattr(interval, "validated_errors",
                        lambda: {"errors": {"gpu": {"amp": [-0.2, 0.25]}}, "sources": {"gpu": {"amp": ["by hand"]}}})
    iterations = [{"measured_ns": 100, "predicted_ns": ns} for ns in (90, 100, 104, 100, 95)]
    found = interval.interval_of(100, iterations, ["amp"], on_gpu=True, unexplained_share=0.3)
    # spread: 10% below, 4% above; amp: a prediction 25% high means the run is 100 / 1.25 = 80 (20% below), 20% low
    # means 100 / 0.8 = 125 (25% above); unexplained 30% each way.
    below, above = math.sqrt(0.1**2 + 0.2**2 + 0.3**2), math.sqrt(0.04**2 + 0.25**2 + 0.3**2)
    assert (found.low_ns, found.high_ns) == (round(100 * (1 - below)), round(100 * (1 + above)))
    assert found.speedup(100) == (100 / found.high_ns, 100 / found.low_ns)
    unvalidated = interval.interval_of(100, iterations, ["gist"], on_gpu=True, unexplained_share=0.0)
    assert (unvalidated.low_ns, unvalidated.high_ns) == (90, 104)
    assert any("gist: no validation rows" in source for source in unvalidated.sources)


def test_the_validated_errors_are_the_pages(tmp_path: Path) -> None:
    shipped = json.loads((REPO / "daydream" / "data" / "validated_errors.json").read_text())
    assert shipped == json.loads(json.dumps(validated_errors.collect()))
    # Each row read independently: the H200 page's small-example table has 15 rows, three per what-if (amp,
    # fused-optimizer, cuda-graphs, batch-size, checkpoint), and its realistic table 21, three per what-if (those five,
    # fuse-elementwise and offload); its memory table's "peak error" is no iteration error and is not read.
    assert sorted(len(v) for k, v in shipped["errors"]["gpu"].items() if k not in ("gpu", "replay")) == [3, 3] + [6] * 5


def test_the_coverage_page_is_its_script(corpus: Path) -> None:
    groups = interval_coverage.all_groups(corpus)
    assert (REPO / "docs" / "intervals.md").read_text() == interval_coverage.page(groups)
    rows = [row for found in groups.values() for row in found]
    assert all(low <= predicted <= high for _, _, predicted, low, high, _ in rows)


def test_whatif_json_gives_the_interval(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", "--json", "--opt", "amp", str(REPO / "examples" / "h200" / "mlp-baseline.json.gz")]) == 0
    document = json.loads(capsys.readouterr().out)
    low, high = document["interval"]["iteration_ns"]
    assert low <= document["iteration_ns"]["predicted"] <= high
    slow, fast = document["interval"]["speedup"]
    assert slow <= document["speedup"] <= fast
    assert document["ranks"][0]["interval"]["iteration_ns"] == [low, high]

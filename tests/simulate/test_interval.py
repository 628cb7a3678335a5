"""Intervals: a hand-computed one, the validated errors held to the pages they are read from, the coverage page held to
its script, and the interval in `whatif --json`."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from daydream.cli import main
from daydream.simulate import interval
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import interval_coverage  # noqa: E402
import validated_errors  # noqa: E402


def test_an_interval_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # Five steady iterations around a median of 100 ns (90 to 104), two validated rows of the what-if (-20% and +25%:
    # their 10th and 90th percentiles by nearest rank are their extremes), 30% of the critical path unexplained.
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


def test_the_band_is_read_by_nearest_rank() -> None:
    # The k-th smallest, k = ceil(share x n): of six rows the 10th percentile is the 1st (0.6 -> 1) and the 90th the 6th
    # (5.4 -> 6), the extremes; of twenty, the 2nd and the 18th; never a value between two rows.
    six = np.array([0.3, -0.1, 0.05, -0.2, 0.1, 0.0])
    assert (interval.nearest_rank(six, 0.1), interval.nearest_rank(six, 0.9)) == (-0.2, 0.3)
    twenty = np.arange(20, dtype=np.float64)[::-1] / 100  # 0.19 down to 0.00
    assert (interval.nearest_rank(twenty, 0.1), interval.nearest_rank(twenty, 0.9)) == (0.01, 0.17)
    ten = np.arange(10, dtype=np.float64)  # ten rows: the 10th percentile is the lowest, the 90th the 9th
    assert (interval.nearest_rank(ten, 0.1), interval.nearest_rank(ten, 0.9)) == (0.0, 8.0)


def test_a_band_of_few_rows_says_extremes(monkeypatch: pytest.MonkeyPatch) -> None:
    errors = {"few": [-0.1, 0.2, 0.05], "many": [x / 100 for x in range(-10, 10)]}
    monkeypatch.setattr(interval, "validated_errors", lambda: {
        "errors": {"cpu": errors}, "sources": {"cpu": {name: ["by hand"] for name in errors}}})
    iterations = [{"measured_ns": 1000, "predicted_ns": 1000}] * 3  # no spread
    few = interval.interval_of(1000, iterations, ["few"], on_gpu=False, unexplained_share=0.0)
    # -10% to +20%: the run is 1000 / 1.2 = 833 to 1000 / 0.9 = 1111
    assert (few.low_ns, few.high_ns) == (round(1000 * (1 / 1.2)), round(1000 * (1 / 0.9)))
    assert any("(extremes)" in source for source in few.sources)
    many = interval.interval_of(1000, iterations, ["many"], on_gpu=False, unexplained_share=0.0)
    # twenty rows -10% .. +9%: the 2nd (-9%) and the 18th (+7%)
    assert (many.low_ns, many.high_ns) == (round(1000 * (1 / 1.07)), round(1000 * (1 / 0.91)))
    assert any("nearest rank" in source for source in many.sources)


def test_the_validated_errors_are_the_pages(tmp_path: Path) -> None:
    shipped = json.loads((REPO / "daydream" / "data" / "validated_errors.json").read_text())
    assert shipped == json.loads(json.dumps(validated_errors.collect()))
    # Each row read independently: the H200 page's small-example table has 15 rows, three per what-if (amp,
    # fused-optimizer, cuda-graphs, batch-size, checkpoint), its realistic table 21, three per what-if (those five,
    # fuse-elementwise and offload), and the sixth round's own table 13, two per what-if but offload (the cnn's alone);
    # its memory tables' "peak error" is no iteration error and is not read.
    assert sorted(len(v) for k, v in shipped["errors"]["gpu"].items() if k not in ("gpu", "replay")) == [4, 5] + [8] * 5


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

"""A seeded fuzz campaign: hostile files and options never end in an internal error, a traceback or a hang.

Every case runs the real CLI in a forked child (tests/hostile.py): exit 0 or 2, exactly one
line on stderr when it fails, within the time and memory limits. scripts/fuzz.py runs the
same classes at a larger scale and prints the figures.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from daydream.cli import main
from tests.hostile import DOCUMENT_MUTATIONS, Seeds, cases, parent_rss_mb, run, violation

SEED_TRACES = (
    "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
)
CASES = 240
SECONDS_PER_CASE = 30.0  # generous: the machine may be loaded; a hang is what this catches
RSS_OVER_PARENT_MB = 1024.0


def test_hostile_inputs_end_in_one_line_and_exit_0_or_2(corpus: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    seeds = Seeds([corpus / path for path in SEED_TRACES])
    todo = cases(seeds, random.Random(20261130), CASES, tmp_path / "cases")
    assert len(todo) == CASES
    classes = Counter(case.mutation for case in todo)
    assert set(DOCUMENT_MUTATIONS) <= set(classes), "every mutation class is exercised"
    # Warm the simulator in this process, so that each forked case starts with it compiled.
    assert main(["replay", str(corpus / SEED_TRACES[0]), "--no-cache"]) == 0
    capsys.readouterr()
    limit_mb = parent_rss_mb() + RSS_OVER_PARENT_MB
    broken = []
    codes: Counter[int | None] = Counter()
    for case in todo:
        outcome = run(case, SECONDS_PER_CASE, tmp_path)
        codes[outcome.code] += 1
        why = violation(outcome, SECONDS_PER_CASE, limit_mb)
        if why:
            broken.append(f"{case.mutation}: daydream {' '.join(case.argv)[:160]}: {why}")
    assert not broken, "\n".join(broken)
    # The commands really ran: many mutations leave a readable trace, many are refused.
    assert codes[0] > CASES // 4 and codes[2] > CASES // 10, codes

"""`daydream diff`: comparisons whose answers are known by construction.

The GPU pairs come from the trace generator (tests/generator.py), whose idealized machine
follows the rules daydream's replay claims, implemented independently: its ground truth
is the recorded step time of each trace. The CPU pair is built event by event.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.api import diff_jobs
from daydream.errors import InputError
from daydream.simulate.diff import Change, Comparison
from tests.conftest import REPO
from tests.generator import step_times
from tests.simulate.diff_pairs import (
    BACKWARD_LAUNCHES,
    FORWARD_LAUNCHES,
    cpu_iteration_us,
    gpu_program,
    write_cpu_trace,
    write_gpu_trace,
)

EXAMPLE = REPO / "examples" / "traces" / "cnn_v100.json.gz"
#: How close a simulated explanation must be to the change it explains: 1% of that change. The
#: generator's machine obeys the replay rules exactly, so what is left is the rounding of µs
#: timestamps to ns (well under 1%).
TOLERANCE = 0.01


def _named(changes: list[Change], name: str) -> Change:
    return next(change for change in changes if change.name == name)


def _mean_step_ns(document: dict) -> float:  # type: ignore[type-arg]
    return float(np.mean(step_times(document)))


def test_a_class_on_the_critical_path_explains_the_change_and_a_hidden_one_explains_nothing(tmp_path: Path) -> None:
    # B: elementwise kernels and GEMMs both exactly twice as long, and a different number of iterations.
    document_a = write_gpu_trace(tmp_path / "a.json", gpu_program(elementwise_ns=10_000, gemm_ns=100_000))
    document_b = write_gpu_trace(tmp_path / "b.json", gpu_program(elementwise_ns=20_000, gemm_ns=200_000, iterations=4))
    [comparison] = diff_jobs(tmp_path / "a.json", tmp_path / "b.json", cache=False)
    measured_change = _mean_step_ns(document_b) - _mean_step_ns(document_a)
    assert comparison.iterations == (3, 4)
    assert comparison.measured_change_ns == pytest.approx(measured_change, abs=1)

    gemm, elementwise = _named(comparison.classes, "gemm"), _named(comparison.classes, "elementwise")
    assert (gemm.a_ns, gemm.b_ns) == (BACKWARD_LAUNCHES * 100_000, BACKWARD_LAUNCHES * 200_000)
    assert (elementwise.a_ns, elementwise.b_ns) == (FORWARD_LAUNCHES * 10_000, FORWARD_LAUNCHES * 20_000)
    assert _named(comparison.classes, "optimizer").change_ns == 0

    # The GEMMs bound the iteration: their growth is the whole change. The elementwise work
    # grew by 300 µs per iteration, all of it hidden while the GPU waited for the host.
    assert gemm.explains_ns == pytest.approx(measured_change, rel=TOLERANCE)
    assert elementwise.explains_ns is not None and abs(elementwise.explains_ns) <= TOLERANCE * elementwise.change_ns
    assert comparison.together_ns == pytest.approx(measured_change, rel=TOLERANCE)
    assert abs(comparison.not_explained_ns) <= TOLERANCE * measured_change
    assert any("B has 4" in note for note in comparison.notes)


def test_a_trace_against_itself_differs_nowhere() -> None:
    [comparison] = diff_jobs(EXAMPLE, EXAMPLE, cache=False)
    assert comparison.measured_a_ns == comparison.measured_b_ns > 0
    assert comparison.classes and comparison.phases
    assert len({c.name for c in comparison.classes}) >= 5  # a real training step: gemm, convolution, normalization, ...
    for change in [*comparison.classes, *comparison.phases, comparison.host, *comparison.layers]:
        assert change.a_ns == change.b_ns
        assert change.explains_ns in (0, None)
    assert comparison.together_ns == 0 and comparison.not_explained_ns == 0


def _cpu_pair(tmp_path: Path, layers_b: tuple[str, str] = ("Net.fc", "Net.act")) -> Comparison:
    write_cpu_trace(tmp_path, "a.json", addmm_us=100, iterations=2)
    write_cpu_trace(tmp_path, "b.json", addmm_us=200, iterations=3, layers=layers_b)
    [comparison] = diff_jobs(tmp_path / "a.json", tmp_path / "b.json", cache=False)
    return comparison


def test_cpu_only_traces_compare_ops_by_self_time(tmp_path: Path) -> None:
    comparison = _cpu_pair(tmp_path)
    assert comparison.basis == ("cpu", "cpu")
    assert (comparison.measured_a_ns, comparison.measured_b_ns) == (cpu_iteration_us(100) * 1000, cpu_iteration_us(200) * 1000)
    # aten::linear's own 20 µs and aten::addmm inside it are GEMM work; aten::relu is elementwise.
    gemm = _named(comparison.classes, "gemm")
    assert (gemm.a_ns, gemm.b_ns) == (120_000, 220_000)
    relu = _named(comparison.classes, "elementwise")
    assert (relu.a_ns, relu.b_ns) == (30_000, 30_000) and relu.explains_ns == 0
    # One thread, no overlap: every µs of GEMM work lands on the iteration.
    assert gemm.explains_ns == pytest.approx(100_000, rel=TOLERANCE)
    assert comparison.host.change_ns == 0
    assert [(c.name, c.change_ns) for c in comparison.layers] == [("Net.fc", 100_000), ("Net.act", 0)]
    assert comparison.layers_in_common == (2, 2, 2)
    assert not any("different models" in note for note in comparison.notes)


def test_traces_of_different_models_are_compared_with_a_note(tmp_path: Path) -> None:
    comparison = _cpu_pair(tmp_path, layers_b=("Other.encoder", "Other.decoder"))
    assert comparison.layers_in_common == (2, 2, 0)
    assert any("different models" in note for note in comparison.notes)
    assert _named(comparison.classes, "gemm").change_ns == 100_000


def test_ranks_are_compared_one_by_one(tmp_path: Path) -> None:
    for side, gemm_of_rank_1 in (("a", 100_000), ("b", 200_000)):
        (tmp_path / side).mkdir()
        for rank, gemm_ns in ((0, 100_000), (1, gemm_of_rank_1)):
            write_gpu_trace(tmp_path / side / f"rank{rank}.json", gpu_program(10_000, gemm_ns), rank=rank)
    comparisons = diff_jobs(tmp_path / "a", tmp_path / "b", cache=False)
    assert [c.rank for c in comparisons] == [0, 1]
    unchanged, changed = comparisons
    assert unchanged.measured_change_ns == 0 and _named(unchanged.classes, "gemm").explains_ns == 0
    assert _named(changed.classes, "gemm").change_ns == BACKWARD_LAUNCHES * 100_000
    assert _named(changed.classes, "gemm").explains_ns == pytest.approx(changed.measured_change_ns, rel=TOLERANCE)


def test_different_ranks_are_an_input_error(tmp_path: Path) -> None:
    for side, ranks in (("a", (0, 1)), ("b", (0,))):
        (tmp_path / side).mkdir()
        for rank in ranks:
            write_gpu_trace(tmp_path / side / f"rank{rank}.json", gpu_program(10_000, 100_000), rank=rank)
    with pytest.raises(InputError, match="same ranks"):
        diff_jobs(tmp_path / "a", tmp_path / "b", cache=False)


def test_the_same_model_on_h100_and_mi300x_compares_gemms_with_gemms(corpus: Path) -> None:
    """cuBLAS (sm90_xmma_gemm, CUTLASS) on one side, hipBLASLt (Cijk_) on the other: both are gemm, and the
    class's time on each side is the summed duration of those kernels, read straight from the JSON."""
    import gzip
    import json
    import re

    pair = [corpus / f"tracelens/{gpu}/gaunernst_bert-small-uncased__1016001.json.gz" for gpu in ("h100", "mi300")]
    library = re.compile(r"^(nvjet|sm90_xmma_gemm|Cijk_)|cutlass::Kernel2<cutlass_\w+gemm")
    sums = []
    for path in pair:
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        sums.append(round(sum(e["dur"] * 1000 for e in events if e.get("cat") == "kernel" and library.search(e["name"]))))
    comparison = diff_jobs(*pair)[0]
    gemm = next(change for change in comparison.classes if change.name == "gemm")
    assert sums[0] > 0 and sums[1] > 0
    assert (gemm.a_ns, gemm.b_ns) == (sums[0], sums[1])
    assert all(change.name != "other" or change.a_ns + change.b_ns == 0 for change in comparison.classes)

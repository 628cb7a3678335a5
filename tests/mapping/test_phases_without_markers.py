"""Phases of traces that carry no phase annotations: forward and backward told by their autograd nodes.

The 2021-format ResNet-50 trace of the corpus has no `## forward ##` ranges, no module spans and no
`autograd::engine::evaluate_function` ops: backward runs as `XxxBackward` ops on the autograd thread, and the
forward ops carry the sequence numbers those nodes repeat. Expected figures come from the JSON itself.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from daydream.mapping import PHASES, attribute
from daydream.trace import GPU_ACTIVITY_KINDS, read_job

LEGACY = "kineto/tb_plugin_samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
FORWARD, BACKWARD, OPTIMIZER, OTHER = (PHASES.index(p) for p in ("forward", "backward", "optimizer", "other"))
#: Ops that only ever run in the forward of a ResNet (their backward has other names).
FORWARD_ONLY = {"aten::cudnn_convolution", "aten::cudnn_batch_norm", "aten::max_pool2d_with_indices", "aten::addmm",
                "aten::_log_softmax", "aten::nll_loss_forward", "aten::clamp_min_"}


@pytest.fixture(scope="module")
def legacy(corpus: Path) -> tuple[dict, object]:
    raw = json.loads(gzip.open(corpus / LEGACY).read())
    return raw, read_job(corpus / LEGACY).traces[0]


def _gpu_phase_counts(trace: object) -> dict[int, int]:
    attribution = attribute(trace)  # type: ignore[arg-type]
    gpu = trace.indices(*GPU_ACTIVITY_KINDS)  # type: ignore[attr-defined]
    phases, counts = np.unique(attribution.phase[gpu], return_counts=True)
    return dict(zip(phases.tolist(), counts.tolist()))


def test_backward_is_the_work_of_the_autograd_thread(legacy: tuple[dict, object]) -> None:
    raw, trace = legacy
    events = raw["traceEvents"]
    ops = [e for e in events if e.get("cat") == "Operator"]
    node_threads = {e["tid"] for e in ops if re.fullmatch(r"[A-Z]\w*Backward\w*", e["name"])}
    assert len(node_threads) == 1  # the fact this file is chosen for: one autograd thread
    on_autograd_thread = {e["args"]["External id"] for e in ops if e["tid"] in node_threads}
    gpu = [e for e in events if e.get("cat") in ("Kernel", "Memcpy", "Memset")]
    backward = sum(1 for e in gpu if e["args"].get("external id") in on_autograd_thread)
    assert backward > 3000
    assert _gpu_phase_counts(trace).get(BACKWARD, 0) == backward


def test_forward_is_told_by_the_sequence_numbers_backward_repeats(legacy: tuple[dict, object]) -> None:
    raw, trace = legacy
    events = raw["traceEvents"]
    ops = [e for e in events if e.get("cat") == "Operator"]
    forward_only = {e["args"]["External id"] for e in ops if e["name"] in FORWARD_ONLY}
    gpu = [e for e in events if e.get("cat") in ("Kernel", "Memcpy", "Memset")]
    at_least = sum(1 for e in gpu if e["args"].get("external id") in forward_only)
    counts = _gpu_phase_counts(trace)
    assert at_least > 500
    assert counts.get(FORWARD, 0) >= at_least
    # Nothing is lost: every GPU activity has one phase, and "other" is what is left (input copies, zero_grad).
    assert sum(counts.values()) == len(gpu)
    assert counts.get(OTHER, 0) < counts[FORWARD] / 10

"""An interval on every prediction: how far its number can be off, from
what the trace and the repository know.

Three parts, each a share of the predicted iteration time below it and above it:

- **spread**: the steady iterations' own predicted times
  (simulate/steady.py) around their median, the headline;
- **validated error**: for each optimization, the errors of its rows in the repository's validation
  pages against real runs, on traces of the same kind (GPU or CPU;
  `daydream/data/validated_errors.json`, from `scripts/validated_errors.py`), their 10th to 90th
  percentile by nearest rank (a row's own error, never one interpolated between rows: with ten
  rows or fewer the 10th is the lowest, with nine or fewer the 90th the highest, so a band read
  off a few rows claims no more than they show), turned into where the real run can be: a
  prediction `e` too high means the run is predicted / (1 + e); with no optimization, the replay's
  own errors (docs/accuracy.md); an optimization without validation rows adds nothing and is named;
- **unexplained**: the share of the predicted critical path the trace cannot explain
  (simulate/bound.py), either way.

They are independent, so they add in quadrature: below = √(spread² + Σ validated² + unexplained²),
likewise above; the interval is predicted × (1 − below) to predicted × (1 + above), and the
speed-up's is the simulated baseline over its ends. Its coverage on the rows it was built from is
measured by `scripts/interval_coverage.py` (docs/intervals.md).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from daydream.simulate.steady import steady

#: The share of an optimization's validation rows its band leaves out, at each end (nearest rank).
TAIL = 0.1
#: The most an interval reaches below its prediction (a share of it).
MOST_BELOW = 0.9


@dataclass(slots=True, frozen=True)
class Interval:
    """Where the iteration time may really be: `low_ns` to `high_ns` around `predicted_ns`;
    `sources` says from what."""

    predicted_ns: int
    low_ns: int
    high_ns: int
    sources: tuple[str, ...]

    def speedup(self, simulated_ns: int) -> tuple[float, float]:
        """(lowest, highest) speed-up over the simulated baseline."""
        return (simulated_ns / self.high_ns if self.high_ns else math.inf,
                simulated_ns / self.low_ns if self.low_ns else math.inf)

    def as_dict(self, simulated_ns: int) -> dict[str, Any]:
        low, high = self.speedup(simulated_ns)
        return {"iteration_ns": [self.low_ns, self.high_ns], "speedup": [low, high],
                "sources": list(self.sources)}


@functools.cache
def validated_errors() -> dict[str, Any]:
    """The validation pages' errors per kind of trace and optimization
    (daydream/data/validated_errors.json)."""
    text = resources.files("daydream.data").joinpath("validated_errors.json").read_text()
    return dict(json.loads(text))


def interval_of(predicted_ns: int, per_iteration: list[dict[str, Any]], names: list[str],
                on_gpu: bool, unexplained_share: float) -> Interval:
    """The interval of a prediction: its headline `predicted_ns`, its iterations (measured and
    predicted), the optimizations' names (none: a replay), the trace's kind and the unexplained
    share of its critical path."""
    spread_below, spread_above, spread_note = _spread(predicted_ns, per_iteration)
    below, above = [spread_below], [spread_above]
    sources = [spread_note]
    for name in names or ["replay"]:
        validated = _validated(name, "gpu" if on_gpu else "cpu")
        if validated is None:
            sources.append(f"{name}: no validation rows on {'GPU' if on_gpu else 'CPU'} traces, "
                           "its error is not in the interval")
            continue
        low, high, note = validated
        below.append(low)
        above.append(high)
        sources.append(note)
    if unexplained_share > 0:
        below.append(unexplained_share)
        above.append(unexplained_share)
        sources.append(f"{unexplained_share * 100:.1f}% of the critical path the trace cannot "
                       "explain, either way")
    share_below = min(MOST_BELOW, math.sqrt(sum(x * x for x in below)))
    share_above = math.sqrt(sum(x * x for x in above))
    return Interval(predicted_ns, int(round(predicted_ns * (1 - share_below))),
                    int(round(predicted_ns * (1 + share_above))), tuple(sources))


def _spread(predicted_ns: int, per_iteration: list[dict[str, Any]]) -> tuple[float, float, str]:
    chosen = steady([int(it["measured_ns"]) for it in per_iteration])
    values = [int(per_iteration[i]["predicted_ns"]) for i in chosen]
    if len(values) < 2 or predicted_ns <= 0:
        return 0.0, 0.0, "one steady iteration: no spread"
    below = max(0.0, (predicted_ns - min(values)) / predicted_ns)
    above = max(0.0, (max(values) - predicted_ns) / predicted_ns)
    return below, above, (f"the {len(values)} steady iterations' spread: -{below * 100:.1f}% / "
                          f"+{above * 100:.1f}%")


def nearest_rank(values: np.ndarray, share: float) -> float:
    """The `share` quantile of `values` by nearest rank: the k-th smallest, k = ceil(share × n)
    (at least 1), the smallest of them with at least that share of them at or below it."""
    ordered = np.sort(values)
    k = max(1, math.ceil(round(share * ordered.size, 9)))
    return float(ordered[min(k, ordered.size) - 1])


def _validated(name: str, kind: str) -> tuple[float, float, str] | None:
    """(share below, share above, note) of the run's time around a prediction of optimization
    `name`, from its validation rows on traces of `kind`; None without any."""
    data = validated_errors()
    errors = np.asarray(data["errors"].get(kind, {}).get(name, []), dtype=np.float64)
    if errors.size == 0:
        return None
    pages = ", ".join(data["sources"][kind][name])
    low_error, high_error = nearest_rank(errors, TAIL), nearest_rank(errors, 1 - TAIL)
    which = ("extremes" if (low_error, high_error) == (errors.min(), errors.max())
             else "10th-90th percentile, nearest rank")
    # Predicted = measured x (1 + e): the run is predicted / (1 + e).
    below = max(0.0, 1 - 1 / (1 + high_error)) if high_error > 0 else 0.0
    above = max(0.0, 1 / (1 + low_error) - 1) if low_error < 0 else 0.0
    what = "replay" if name == "replay" else name
    return below, above, (f"{what}: {errors.size} validation rows on {kind.upper()} traces "
                          f"({pages}), errors {low_error * 100:+.1f}% to {high_error * 100:+.1f}% "
                          f"({which})")

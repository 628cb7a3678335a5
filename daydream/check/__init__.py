"""`daydream check`: guard predicted speed-ups, memory and replay accuracy in CI.

An expectations file (YAML, `version: 1`) names checks: a trace (or a command that
writes one), what-ifs to run, bounds on the results and the values stored by the last
`--update`. This package loads it (`expectations`), measures each check through
`daydream.api` (`measure`), holds the values against the bounds (`evaluate`) and writes
new stored values back into the file (`update`). Rendering is in `daydream.report.check`.

    expectations = load_expectations("expectations.yaml")
    measurements = measure_checks(expectations)
    summary = summarize_check(expectations, measurements)   # summary["passed"]
"""

from daydream.check.evaluate import BoundResult, evaluate, missing_stored, summarize_check
from daydream.check.expectations import (
    BOUNDS,
    Bound,
    Check,
    Expectations,
    Values,
    load_expectations,
    parse_expectations,
)
from daydream.check.measure import Measurement, measure_checks
from daydream.check.update import rewrite_stored, update_stored

__all__ = [
    "BOUNDS",
    "Bound",
    "BoundResult",
    "Check",
    "Expectations",
    "Measurement",
    "Values",
    "evaluate",
    "load_expectations",
    "measure_checks",
    "missing_stored",
    "parse_expectations",
    "rewrite_stored",
    "summarize_check",
    "update_stored",
]

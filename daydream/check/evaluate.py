"""Bounds against measured values, and the results as JSON-ready data.

The JSON contract (`daydream check --json`): `{"passed", "checks": [{"name", "values",
"stored", "bounds": [{"bound", "limit", "value", "previous", "passed", "beyond"}]}]}` is
guaranteed; keys are added, never renamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daydream import __version__
from daydream.check.expectations import Bound, Check, Expectations, Values
from daydream.check.measure import Measurement
from daydream.errors import InputError

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class BoundResult:
    bound: Bound
    # in the quantity's unit (ratio, ns, bytes, %); for a relative bound, stored × (1 + p/100)
    limit: float
    value: float
    previous: float | None     # the stored value of the same quantity
    passed: bool
    # how far past the limit, as a fraction of it: > 0 broken, <= 0 the
    # margin left; None for a 0 limit
    beyond: float | None


def missing_stored(expectations: Expectations) -> list[str]:
    """One message per bound that is relative to a stored value the file does not have."""
    return [
        f"{expectations.path}: check '{check.name}': {bound.name} needs "
        f"stored.{bound.kind.quantity} — record it with daydream check {expectations.path} --update"
        for check in expectations.checks for bound in check.bounds
        if bound.kind.relative_to_stored and check.stored.get(bound.kind.quantity) is None
    ]


def evaluate(check: Check, values: Values) -> list[BoundResult]:
    """Every bound of `check` against `values`, in the order the file lists them."""
    return [_evaluate(check, bound, values) for bound in check.bounds]


def _evaluate(check: Check, bound: Bound, values: Values) -> BoundResult:
    kind = bound.kind
    value = values.get(kind.quantity)
    previous = check.stored.get(kind.quantity)
    if value is None:  # measure_checks measures what every bound needs; this is a bug, not an input
        raise RuntimeError(f"check '{check.name}': {kind.quantity} was not measured")
    if kind.relative_to_stored:
        if previous is None:
            raise InputError(f"check '{check.name}': {bound.name} needs stored.{kind.quantity} — "
                             "run daydream check --update")
        limit = previous * (1 + bound.limit / 100)
    else:
        limit = bound.limit
    excess = value - limit if kind.at_most else limit - value
    beyond = excess / abs(limit) if limit else None
    return BoundResult(bound, limit, value, previous, excess <= 0, beyond)


def summarize_check(expectations: Expectations, measurements: list[Measurement],
                    updated: bool = False) -> dict[str, Any]:
    """The results of a run as JSON-ready data; bounds are evaluated
    against `expectations`' stored values."""
    by_name = {check.name: check for check in expectations.checks}
    checks: list[dict[str, Any]] = []
    for measurement in measurements:
        check = by_name[measurement.check.name]
        results = evaluate(check, measurement.values)
        checks.append({
            "name": check.name,
            "trace": str(check.trace),
            "command": check.command,
            "whatif": list(check.whatif),
            "seconds": round(measurement.seconds, 3),
            "values": measurement.values.as_dict(),
            "stored": check.stored.as_dict(),
            "passed": all(r.passed for r in results),
            "bounds": [_bound_entry(r) for r in results],
        })
    bounds = [b for c in checks for b in c["bounds"]]
    return {
        "schema_version": SCHEMA_VERSION,
        "daydream_version": __version__,
        "expectations": str(expectations.path),
        "updated": updated,
        "passed": all(b["passed"] for b in bounds),
        "bounds": len(bounds),
        "broken": sum(not b["passed"] for b in bounds),
        "checks": checks,
    }


def _bound_entry(result: BoundResult) -> dict[str, Any]:
    kind = result.bound.kind
    return {
        "bound": result.bound.name,
        "quantity": kind.quantity,
        "unit": kind.unit,
        "at_most": kind.at_most,
        "written": result.bound.written,
        "relative_to_stored": kind.relative_to_stored,
        "limit": result.limit,
        "value": result.value,
        "previous": result.previous,
        "passed": result.passed,
        "beyond": result.beyond,
    }

"""Optimization specs as users write them (`name:key=value,...`):
parsed against the registry, swept, applied.

    spec = parse_spec("batch-size:factor=2")
    notes = apply_spec(graph, spec, Context(device=find_device("V100")))
"""

from __future__ import annotations

import difflib
import math
from typing import Any

from daydream.errors import InputError
from daydream.graph import Graph
from daydream.transforms.pipeline import is_pipeline_file
from daydream.transforms.registry import ALIASES, OPTIMIZATIONS, Context, Parameter, bandwidth


def parse_spec(text: str) -> tuple[str, dict[str, Any]]:
    """'name:key=value,key=value' -> (canonical name, typed parameters with defaults filled in)."""
    name, _, rest = text.partition(":")
    name = ALIASES.get(name.strip(), name.strip())
    if name not in OPTIMIZATIONS:
        close = difflib.get_close_matches(name, [*OPTIMIZATIONS, *ALIASES], n=1, cutoff=0.6)
        hint = (f"did you mean {close[0]!r}? (daydream whatif --list)" if close
                else "see daydream whatif --list")
        raise InputError(f"--opt {text}: unknown optimization {name!r} — {hint}")
    optimization = OPTIMIZATIONS[name]
    params = optimization.defaults()
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep and key in optimization.parameters:
            raise InputError(f"--opt {text}: {key} has no value — write {key}=VALUE")
        if key not in optimization.parameters:
            known = ", ".join(optimization.parameters) or "none"
            close = difflib.get_close_matches(key, list(optimization.parameters), n=1, cutoff=0.6)
            hint = f" — did you mean {close[0]!r}?" if close else ""
            raise InputError(f"--opt {text}: {name} has no parameter {key!r} (parameters: "
                             f"{known}){hint}")
        params[key] = _convert(text, key, value, optimization.parameters[key])
    return name, params


def parse_sweep(text: str) -> tuple[str, list[str]]:
    """'world=1,2,4' -> ('world', ['1', '2', '4'])."""
    key, sep, rest = text.partition("=")
    values = [v.strip() for v in rest.split(",") if v.strip()]
    if not sep or not key.strip() or not values:
        raise InputError(f"--sweep {text}: write KEY=V1,V2,... (e.g. world=1,2,4,8)")
    return key.strip(), values


def with_value(spec: str, key: str, value: str) -> str:
    """The spec with parameter `key` set to `value`, if its optimization has that parameter."""
    if is_pipeline_file(spec):
        return spec
    name, _, rest = spec.partition(":")
    if key not in OPTIMIZATIONS[ALIASES.get(name.strip(), name.strip())].parameters:
        return spec
    items = [item for item in rest.split(",") if item.strip()
             and item.partition("=")[0].strip() != key]
    return f"{name}:{','.join([*items, f'{key}={value}'])}"


def _convert(spec: str, key: str, value: str, parameter: Parameter) -> Any:
    kind = parameter.type
    try:
        converted = kind(value)
    except (ValueError, OverflowError):
        example = " (e.g. 25GB/s or 200Gbps)" if kind is bandwidth else ""
        raise InputError(f"--opt {spec}: {key}={value!r} is not a "
                         f"{getattr(kind, '__name__', 'value')}{example}") from None
    if isinstance(converted, (int, float)):
        if not math.isfinite(converted):
            raise InputError(f"--opt {spec}: {key}={value!r} is not a finite number — give a value "
                             f"such as {parameter.default!r}")
        low, high = parameter.low, parameter.high
        if (low is not None and converted < low) or (high is not None and converted > high):
            span = f"from {low:g} to {high:g}" if low is not None and high is not None else (
                f"at least {low:g}" if low is not None else f"at most {high:g}")
            raise InputError(f"--opt {spec}: {key}={value} is out of range — give a value {span}")
    return converted


def samples_factor(specs: list[str]) -> float:
    """How many times the samples per iteration the optimizations `specs` process
    (batch-size:factor=F multiplies)."""
    factor = 1.0
    for spec in specs:
        if is_pipeline_file(spec):
            continue
        name, params = parse_spec(spec)
        if name == "batch-size":
            factor *= float(params["factor"])
    return factor


def stated_batch(specs: list[str]) -> int | None:
    """The samples per iteration a batch-size spec states (batch-size:batch=N), where one does: it
    overrides the trace's own (the model's first input counts two views of each sample as two)."""
    for spec in specs:
        if is_pipeline_file(spec):
            continue
        name, params = parse_spec(spec)
        if name == "batch-size" and int(params.get("batch") or 0) > 0:
            return int(params["batch"])
    return None


def job_ranks(specs: list[str], traced: int) -> int:
    """How many data-parallel ranks run the step under the optimizations
    `specs`: the last `world` one of them sets (ddp:world=8, zero:world=64,
    ...), else `traced`, the ranks simulated from their traces."""
    ranks = traced
    for spec in specs:
        if is_pipeline_file(spec):
            continue
        world = parse_spec(spec)[1].get("world")
        if isinstance(world, int) and world > 0:
            ranks = world
    return ranks


def apply_spec(graph: Graph, spec: tuple[str, dict[str, Any]], context: Context) -> list[str]:
    name, params = spec
    return OPTIMIZATIONS[name].apply(graph, params, context)

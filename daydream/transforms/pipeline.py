"""Custom optimizations from YAML: a list of primitive steps a user can read, reorder and write.

    version: 1
    name: faster-gemm
    description: GEMM kernels 1.5x faster (a better BLAS)
    steps:
      - select: {kind: kernel, name: "gemm|cutlass"}
        scale: {factor: 0.667}

Each step selects tasks (`kind`, `name`, `layer`, `phase`, `iteration` as for
`select`) and applies one action: `scale: {factor, gaps}`, `remove: {keep_gaps}`,
`unpin: {}` or `reschedule: {resource, priority}`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from daydream._yaml import load_yaml, read_yaml_file
from daydream.errors import InputError
from daydream.graph import Graph, TaskKind
from daydream.transforms.primitives import remove, reschedule, scale, select, unpin

SUPPORTED_VERSIONS = (1,)
_ACTIONS = ("scale", "remove", "unpin", "reschedule")
_SELECT_KEYS = ("kind", "name", "layer", "phase", "iteration")
_ACTION_FUNCTIONS: dict[str, Callable[..., Any]] = {"scale": scale, "remove": remove,
                                                    "unpin": unpin, "reschedule": reschedule}
#: action -> {argument: (what it must be, the check)}
_ARGUMENTS: dict[str, dict[str, tuple[str, Callable[[Any], bool]]]] = {
    "scale": {"factor": ("a finite number of 0 or more, e.g. 0.667", lambda v: _number(v) and v >= 0
                         and not math.copysign(1, v) < 0),
              "gaps": ("true or false", lambda v: isinstance(v, bool))},
    "remove": {"keep_gaps": ("true or false", lambda v: isinstance(v, bool))},
    "unpin": {},
    "reschedule": {"resource": ("a whole number of 0 or more", lambda v: isinstance(v, int)
                                and not isinstance(v, bool) and v >= 0),
                   "priority": ("a whole number", lambda v: isinstance(v, int)
                                and not isinstance(v, bool))},
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_pipeline_file(spec: str) -> bool:
    """Whether an --opt spec names a YAML pipeline file rather than a registered optimization."""
    # "ddp:bandwidth=25GB/s" names ddp; a "/" in a parameter is not a path
    name = spec.partition(":")[0]
    return spec.endswith((".yaml", ".yml")) or "/" in name or os.path.sep in name


@dataclass(slots=True, frozen=True)
class Pipeline:
    version: int
    name: str
    description: str
    steps: tuple[dict[str, Any], ...]
    source: str


def load_pipeline(path: str | os.PathLike[str]) -> Pipeline:
    """Read and check a YAML optimization; errors name the file and the step."""
    source = str(path)
    document = load_yaml(read_yaml_file(path, "a YAML optimization (see docs/whatif.md)"), source)
    if not isinstance(document, dict):
        raise InputError(f"{source}: expected a mapping with version, name and steps")
    version = document.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise InputError(f"{source}: version {version!r} is not supported (use version: 1)")
    steps = document.get("steps")
    if not isinstance(steps, list) or not steps:
        raise InputError(f"{source}: 'steps' must be a non-empty list")
    for number, step in enumerate(steps, start=1):
        _check_step(source, number, step)
    return Pipeline(int(version), str(document.get("name") or os.path.basename(source)),
                    str(document.get("description") or ""), tuple(steps), source)


def _check_step(source: str, number: int, step: Any) -> None:
    where = f"{source}: step {number}"
    if not isinstance(step, dict):
        raise InputError(f"{where}: expected a mapping with 'select' and one action")
    actions = [key for key in step if key in _ACTIONS]
    unknown = [key for key in step if key not in (*_ACTIONS, "select")]
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (expected select and one of "
                         f"{', '.join(_ACTIONS)})")
    if len(actions) != 1:
        raise InputError(f"{where}: needs exactly one action of {', '.join(_ACTIONS)}")
    _check_action(where, actions[0], step[actions[0]] if step[actions[0]] is not None else {})
    _check_selector(where, step.get("select") or {})


def _check_action(where: str, action: str, arguments: Any) -> None:
    if not isinstance(arguments, dict):
        raise InputError(f"{where}: {action} takes a mapping of "
                         f"{', '.join(_ARGUMENTS[action]) or 'nothing'}, e.g. {action}: {{}}")
    for key, value in arguments.items():
        if key not in _ARGUMENTS[action]:
            raise InputError(f"{where}: {action} has no argument {key!r} (it takes "
                             f"{', '.join(_ARGUMENTS[action]) or 'none'})")
        what, valid = _ARGUMENTS[action][key]
        if not valid(value):
            raise InputError(f"{where}: {action} {key} must be {what}, not {str(value)[:40]!r}")
    if action == "scale" and "factor" not in arguments:
        raise InputError(f"{where}: scale needs a factor, e.g. scale: {{factor: 0.667}}")


def _check_selector(where: str, selector: Any) -> None:
    if not isinstance(selector, dict) or any(key not in _SELECT_KEYS for key in selector):
        raise InputError(f"{where}: 'select' takes {', '.join(_SELECT_KEYS)}")
    kind = selector.get("kind")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    for name in kinds:
        if str(name).upper() not in TaskKind.__members__:
            raise InputError(f"{where}: unknown kind {name!r} (kinds: "
                             f"{', '.join(k.lower() for k in TaskKind.__members__)})")


def apply_pipeline(graph: Graph, pipeline: Pipeline) -> list[str]:
    notes = []
    for number, step in enumerate(pipeline.steps, start=1):
        selector = dict(step.get("select") or {})
        if "kind" in selector:
            kinds = selector["kind"] if isinstance(selector["kind"], list) else [selector["kind"]]
            selector["kind"] = [TaskKind[str(k).upper()] for k in kinds]
        try:
            chosen = select(graph, **selector)
            action = next(key for key in step if key in _ACTIONS)
            arguments = step[action] or {}
            _ACTION_FUNCTIONS[action](graph, chosen, **arguments)
        except (TypeError, ValueError, InputError) as exc:
            raise InputError(f"{pipeline.source}: step {number}: {exc}") from None
        notes.append(f"{pipeline.name} step {number}: {action} on {np.asarray(chosen).size} tasks")
    return notes

"""What the optimizations ask about a graph's tasks: their names, which
match a pattern, the calls that launched them, their class and
precision (mapping/classes.py), a low percentile of their durations."""

from __future__ import annotations

import re

import numpy as np

from daydream.graph import DepKind, Graph
from daydream.mapping.classes import classes_of, precisions_of


def task_names(graph: Graph, ids: np.ndarray) -> list[str]:
    return [graph.strings[int(i)] for i in graph.tasks["name"][ids]]


def matching(graph: Graph, ids: np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    by_string = np.array([bool(pattern.search(s)) for s in graph.strings], dtype=bool)
    return ids[by_string[graph.tasks["name"][ids]]]


def launchers(graph: Graph, kernels: np.ndarray) -> np.ndarray:
    """The launch calls of the given GPU tasks."""
    launch = graph.edges_of_kind(DepKind.LAUNCH)
    mine = np.isin(graph.edges["dst"][launch], kernels)
    return np.unique(graph.edges["src"][launch][mine])


def low_percentile(values: np.ndarray, q: float = 10) -> int:
    return int(np.percentile(values, q)) if values.size else 0


def kernel_classes(graph: Graph, ids: np.ndarray) -> np.ndarray:
    """The class (index into mapping.classes.CLASSES) of each task in `ids`, from its name."""
    return classes_of(graph.tasks["name"][ids], graph.strings)


def kernel_precisions(graph: Graph, ids: np.ndarray) -> np.ndarray:
    """The precision (index into mapping.classes.PRECISIONS) of each
    task in `ids`, from its name."""
    return precisions_of(graph.tasks["name"][ids], graph.strings)


def of_labels(values: np.ndarray, labels: tuple[str, ...], chosen: tuple[str, ...]) -> np.ndarray:
    return np.isin(values, [labels.index(label) for label in chosen])

"""The graphs of a multi-rank job: one per rank, with matched collectives tied together.

    graphs, matching = build_job_graphs(job.traces)

A collective matched on every rank of its group (see daydream.mapping.collectives)
gets its job-wide id in the `collective` column of each rank's graph, and loses its
unexplained delay (the single-rank stand-in for the peers' arrival): the simulator
starts it on every rank when the last rank is ready for it
(daydream.simulate.job). Its duration becomes the transfer alone, which is the
shortest recorded instance: the rank that arrived last waited least, and the
others' longer kernels are that wait plus the same transfer.

Collectives that are not matched keep the single-rank rule: their transfer plus the
peers' arrival as a delay that scales with the iteration's progress (graph.build).
"""

from __future__ import annotations

import numpy as np

from daydream.graph.build import build_graph, pinned_collectives_note
from daydream.graph.model import Graph, TaskKind
from daydream.mapping.collectives import CollectiveMatching, match_collectives
from daydream.trace import Trace


def build_job_graphs(traces: list[Trace],
                     graphs: list[Graph] | None = None) -> tuple[list[Graph], CollectiveMatching]:
    """Build every rank's graph (unless `graphs` holds them, built and not yet tied) and tie the
    matched collectives across them."""
    graphs = graphs if graphs is not None else [build_graph(trace) for trace in traces]
    matching = match_collectives(traces)
    tie_collectives(graphs, matching)
    return graphs, matching


def tie_collectives(graphs: list[Graph], matching: CollectiveMatching) -> None:
    """Mark the matched collectives in each graph and reduce their duration to the transfer."""
    members: list[np.ndarray] = []
    for graph, ids in zip(graphs, matching.ids):
        tasks = graph.tasks
        collective_tasks = np.flatnonzero(tasks["kind"] == TaskKind.COLLECTIVE)
        events = tasks["event"][collective_tasks].tolist()
        chosen = [(task, ids[event]) for task, event in zip(collective_tasks.tolist(), events)
                  if event in ids]
        if not chosen:
            members.append(np.empty((0, 2), dtype=np.int64))
            continue
        table = np.array(chosen, dtype=np.int64)
        tasks["collective"][table[:, 0]] = table[:, 1]
        # The wait for the peers is now derived across ranks: no unexplained delay remains.
        tasks["unexplained"][table[:, 0]] = False
        tasks["delay_ns"][table[:, 0]] = 0
        members.append(table)
    for note in matching.notes:
        for graph in graphs:
            graph.notes.append(note)
    if not matching.matched:
        return
    shortest = np.full(matching.matched + 1, np.iinfo(np.int64).max, dtype=np.int64)
    for graph, table in zip(graphs, members):
        if table.size:
            np.minimum.at(shortest, table[:, 1], graph.tasks["duration_ns"][table[:, 0]])
    for graph, table in zip(graphs, members):
        if table.size:
            graph.tasks["duration_ns"][table[:, 0]] = shortest[table[:, 1]]
            _recount_pinned(graph, table.shape[0])
            graph.notes.append(f"{table.shape[0]} collectives matched across the job's ranks: each "
                               "starts when every rank is ready for it and lasts its shortest "
                               "recorded instance")


def _recount_pinned(graph: Graph, matched: int) -> None:
    """The builder's count of pinned collectives, less the `matched`
    ones, in the calibration and the notes."""
    before = graph.calibration.pinned_collectives
    remaining = max(before - matched, 0)
    graph.calibration.pinned_collectives = remaining
    graph.notes = [n for n in graph.notes if n != pinned_collectives_note(before)]
    if remaining:
        graph.notes.append(pinned_collectives_note(remaining))

"""Stage 5, simulate: discrete-event replay of a task graph.

    from daydream.simulate import simulate, replay_trace
    timeline = simulate(graph)          # start/end of every task, ns
    replay = replay_trace(trace)        # measured vs simulated, per iteration
"""

from daydream.graph.model import Timeline
from daydream.simulate.engine import (
    EARLIEST_READY,
    FIFO,
    POLICIES,
    PRIORITY,
    simulate,
    simulate_event_driven,
    simulate_reference,
)
from daydream.simulate.replay import IterationReplay, Replay, replay_trace

__all__ = [
    "EARLIEST_READY",
    "FIFO",
    "POLICIES",
    "PRIORITY",
    "IterationReplay",
    "Replay",
    "Timeline",
    "replay_trace",
    "simulate",
    "simulate_event_driven",
    "simulate_reference",
]

"""Stage 2, mapping: links GPU work to its launching call, calls to CPU ops, and
events to iterations, model layers and phases (forward, backward, optimizer, other).

    from daydream.mapping import link, find_iterations
    links = link(trace)          # links.launch, links.op, links.orphan
    iterations = find_iterations(trace)
"""

from daydream.mapping.attribution import (
    PHASES,
    Attribution,
    PhaseLayerTimes,
    attribute,
    phase_layer_times,
)
from daydream.mapping.iterations import Iteration, find_iterations
from daydream.mapping.linking import EXTERNAL_ID, TIME_NESTING, Links, link

__all__ = [
    "EXTERNAL_ID",
    "PHASES",
    "TIME_NESTING",
    "Attribution",
    "Iteration",
    "Links",
    "PhaseLayerTimes",
    "attribute",
    "find_iterations",
    "link",
    "phase_layer_times",
]

"""Stage 2, mapping: links GPU work to its launching call, calls to CPU ops, and
events to iterations (later: to model layers and phases).

    from daydream.mapping import link, find_iterations
    links = link(trace)          # links.launch, links.op, links.orphan
    iterations = find_iterations(trace)
"""

from daydream.mapping.iterations import Iteration, find_iterations
from daydream.mapping.linking import EXTERNAL_ID, TIME_NESTING, Links, link

__all__ = ["EXTERNAL_ID", "TIME_NESTING", "Iteration", "Links", "find_iterations", "link"]

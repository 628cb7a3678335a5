"""Stage 3, graph: tasks on host threads, GPU streams and channels, and their dependencies.

    from daydream.graph import build_graph
    graph = build_graph(trace)      # a linked Trace -> Graph
    graph.validate()                # [] when the graph can be simulated
"""

from daydream.graph.build import build_graph
from daydream.graph.model import DepKind, Graph, Resource, ResourceKind, TaskKind

__all__ = ["DepKind", "Graph", "Resource", "ResourceKind", "TaskKind", "build_graph"]

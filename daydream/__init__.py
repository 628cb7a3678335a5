"""daydream: a trace-driven what-if profiler for deep-learning training.

The pipeline is trace → mapping → graph → transforms → simulate → report; each
stage is one sub-package and imports only the stages before it. `daydream.api`
holds the calls the command line makes.
"""

__version__ = "0.1.0"

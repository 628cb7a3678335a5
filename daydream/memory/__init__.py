"""Stage 6, memory: the allocation timeline, the breakdown at the peak, and what-if memory.

    from daydream.memory import analyze_memory
    for device in analyze_memory(trace):
        device.peak_allocated_bytes, device.categories
"""

from daydream.memory.timeline import CATEGORIES, DeviceMemory, analyze_memory

__all__ = ["CATEGORIES", "DeviceMemory", "analyze_memory"]

"""The GPU API of the ``rnn`` crate: ``GpuManager().devices()``, contexts with memory
statistics, and ``GpuProfiler`` (``with profiler.region("name"): ...``).

On a machine without a GPU, ``GpuManager().devices()`` is empty and ``create_context``
raises RuntimeError; a profiler then times work on the CPU.
"""

from ._rnn import GpuContext, GpuDevice, GpuManager, GpuProfiler, ProfileRegion

__all__ = ["GpuManager", "GpuDevice", "GpuContext", "GpuProfiler", "ProfileRegion"]

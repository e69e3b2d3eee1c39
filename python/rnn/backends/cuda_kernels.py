"""neural_arch's CUDA kernel manager, on rnn's CUDA backend.

``get_cuda_kernel_manager()`` gives the manager of the first CUDA device: ``is_available()``,
``compiled_kernels`` (the kernels this manager has run; rnn compiles each with NVRTC at its
first use and caches it) and ``gelu_forward(x)``.
"""

from . import get_backend

__all__ = ["CudaKernelManager", "get_cuda_kernel_manager"]


class CudaKernelManager:
    def __init__(self):
        self._backend = get_backend("cuda")
        self.compiled_kernels = {}

    def is_available(self):
        """Whether a CUDA device is usable by this build on this machine."""
        return self._backend.is_available

    def _run(self, name, op, *args):
        out = op(*args)
        self.compiled_kernels.setdefault(name, op)
        return out

    def gelu_forward(self, x):
        """GELU (tanh approximation) of a numpy array on the CUDA device."""
        return self._run("gelu_forward", self._backend.gelu, x)


_manager = None


def get_cuda_kernel_manager():
    """The process's CUDA kernel manager (created at the first call)."""
    global _manager
    if _manager is None:
        _manager = CudaKernelManager()
    return _manager

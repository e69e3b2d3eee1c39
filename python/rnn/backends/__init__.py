"""neural_arch's backend API on rnn: ``get_backend("cuda" | "wgpu" | "cpu")``.

numpy arrays in, numpy arrays out::

    from rnn.backends import get_backend
    backend = get_backend("cuda")
    if backend.is_available:
        y = backend.gelu(x)                                   # tanh-approximation GELU
        h = backend.fused_linear_gelu(x, weight, bias)        # gelu(x @ weight.T + bias)
        z = backend.layernorm(x, gamma, beta, eps=1e-5)
        o = backend.flash_attention(q, k, v, scale, block_size=64)
        ms = backend.benchmark_kernel("gelu", x, num_runs=10)
        print(backend.memory_info())

A backend that this machine cannot run is still returned, with ``is_available`` False; its
ops raise RuntimeError. Every op is one of rnn's fused kernels (CUDA, WGSL or CPU).
"""

from .._rnn import Backend, MemoryPool, get_backend

__all__ = ["get_backend", "Backend", "MemoryPool"]

"""rnn: deep learning with real GPU acceleration (CPU, CUDA, wgpu).

Tensors with autograd (``rnn.Tensor``), devices (``rnn.Device``), layers and losses
(``rnn.nn``), optimizers (``rnn.optim``), the training loop (``rnn.Network``).
All computation is done by the Rust library; this package is a thin layer over it.
"""

from ._rnn import (
    Device,
    Tensor,
    arange,
    cat,
    full,
    full_like,
    is_grad_enabled,
    manual_seed,
    no_grad,
    ones,
    ones_like,
    rand,
    randn,
    stack,
    where,
    zeros,
    zeros_like,
)

# Element types, by the names the library uses (Tensor.dtype returns these strings).
float32 = "f32"
float64 = "f64"
float16 = "f16"
bfloat16 = "bf16"
uint8 = "u8"
uint32 = "u32"
int64 = "i64"

__all__ = [
    "Device",
    "Tensor",
    "no_grad",
    "is_grad_enabled",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "full_like",
    "where",
    "rand",
    "randn",
    "arange",
    "cat",
    "stack",
    "manual_seed",
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "uint8",
    "uint32",
    "int64",
]

# --- training API, the seeds' APIs and the GPU API (rnn.nn, rnn.optim, rnn.micrograd, rnn.backends, rnn.gpu)
from . import backends, gpu, micrograd, nn, optim, return_types  # noqa: E402
# rnn.exp(x), rnn.sum(x, 1), rnn.max(x, 1), ...: the Tensor methods at module level, as in torch;
# left out of __all__, so that `from rnn import *` does not shadow the builtins max, sum, abs, ...
from .functions import *  # noqa: E402,F401,F403
from .gpu import GpuContext, GpuDevice, GpuManager, GpuProfiler  # noqa: E402
from .training import *  # noqa: E402,F401,F403  (Network, LayerBuilder, TrainingConfig, ...)

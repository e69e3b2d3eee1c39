"""Optimizers and learning-rate schedulers with PyTorch's names and arguments.

``opt = rnn.optim.Adam(model.parameters(), lr=1e-3)``; then per batch ``opt.zero_grad()``,
``loss.backward()``, ``opt.step()``. The update runs in Rust (fused: one pass over each
parameter, its gradient and its state). Schedulers (``rnn.optim.lr_scheduler.StepLR`` etc.)
set the optimizer's ``lr`` and are stepped once per epoch.
"""

import sys
import types

from ._rnn import (
    SGD,
    Adagrad,
    Adam,
    AdamW,
    CosineAnnealingLR,
    ExponentialLR,
    LinearLR,
    LRScheduler,
    Optimizer,
    ReduceLROnPlateau,
    RMSprop,
    StepLR,
    clip_grad_norm_,
)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler", "clip_grad_norm_"]

# `rnn.optim.lr_scheduler` (also importable: `from rnn.optim.lr_scheduler import StepLR`).
lr_scheduler = types.ModuleType(__name__ + ".lr_scheduler", "Learning-rate schedulers, stepped once per epoch.")
lr_scheduler.__dict__.update(
    LRScheduler=LRScheduler,
    StepLR=StepLR,
    ExponentialLR=ExponentialLR,
    CosineAnnealingLR=CosineAnnealingLR,
    LinearLR=LinearLR,
    ReduceLROnPlateau=ReduceLROnPlateau,
)
sys.modules[lr_scheduler.__name__] = lr_scheduler

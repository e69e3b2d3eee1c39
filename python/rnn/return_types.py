"""Named results of the ops that return several tensors, as ``torch.return_types``:
``values, indices = t.max(1)`` unpacks one, ``t.max(1).indices`` reads a field."""

from collections import namedtuple

max = namedtuple("max", ["values", "indices"])  # noqa: A001 (PyTorch's name)
min = namedtuple("min", ["values", "indices"])  # noqa: A001

__all__ = ["max", "min"]

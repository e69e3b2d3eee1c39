from typing import NamedTuple

from . import Tensor

class max(NamedTuple):  # noqa: N801 (PyTorch's name)
    values: Tensor
    indices: Tensor

class min(NamedTuple):  # noqa: N801
    values: Tensor
    indices: Tensor

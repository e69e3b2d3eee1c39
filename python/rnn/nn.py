"""Layers, losses and model state, with PyTorch's names (``rnn.nn.Linear``, ``rnn.nn.Module``,
``rnn.nn.functional.cross_entropy``, ``state_dict`` / ``load_state_dict``).

Every layer's computation is an rnn-nn layer in Rust; this module only keeps the tree of
modules. Write your own model as in PyTorch::

    class Net(rnn.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = rnn.nn.Linear(784, 128)
            self.fc2 = rnn.nn.Linear(128, 10)

        def forward(self, x):
            return self.fc2(rnn.nn.functional.relu(self.fc1(x)))

Parameters are ``rnn.Tensor`` s that require grad; ``save`` / ``load_weights`` write and
read safetensors files (``safetensors.torch.load_file`` reads them too).
"""

import sys
import types
from collections import OrderedDict
from types import SimpleNamespace

from . import _rnn
from ._rnn import Tensor

__all__ = [
    "Module", "Parameter", "Sequential", "ModuleList", "Linear", "Conv2d", "MaxPool2d",
    "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "RMSNorm", "Dropout", "Embedding",
    "Flatten", "MultiheadAttention", "RNN", "LSTM", "GRU", "ReLU", "LeakyReLU", "Sigmoid",
    "Tanh", "GELU", "SiLU", "Softmax", "Identity", "MSELoss", "L1Loss", "HuberLoss",
    "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "functional",
    "save_file", "load_file",
]


def Parameter(data, requires_grad=True):
    """A tensor that a ``Module`` registers as a parameter when assigned to an attribute."""
    t = data if isinstance(data, Tensor) else Tensor(data)
    return Tensor(t, requires_grad=requires_grad) if requires_grad else t


class Module:
    """Base of every layer and model: sub-modules and parameters assigned as attributes are
    registered (in assignment order) and named ``"<attribute>.<name>"``."""

    def __init__(self):
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_modules" not in self.__dict__:
            raise AttributeError("call super().__init__() before assigning attributes of a Module")
        self._modules.pop(name, None)
        self._parameters.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad:
            self._parameters[name] = value
        object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def children(self):
        return iter(self._modules.values())

    def named_modules(self, prefix=""):
        """This module and every sub-module, with dotted names."""
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def _own_parameters(self):
        return list(self._parameters.items())

    def _own_buffers(self):
        return []

    def _named(self, own):
        for path, module in self.named_modules():
            for name, t in getattr(module, own)():
                yield (f"{path}.{name}" if path else name), t

    def named_parameters(self):
        """(name, tensor) for every trainable tensor, as in PyTorch."""
        return self._named("_own_parameters")

    def parameters(self):
        return (t for _, t in self.named_parameters())

    def named_buffers(self):
        """(name, tensor) for saved but not trained tensors (BatchNorm's statistics)."""
        return self._named("_own_buffers")

    def state_dict(self):
        """Parameters and buffers by name; the tensors share the module's storage."""
        return OrderedDict(list(self.named_parameters()) + list(self.named_buffers()))

    def load_state_dict(self, state_dict, strict=True):
        """Copies ``state_dict`` (Tensors or numpy arrays by name) into the module. With
        ``strict`` the names must match exactly; shapes must always match. Everything is
        checked before anything changes. Returns ``(missing_keys, unexpected_keys)``."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        targets = list(own.items()) if strict else [(k, t) for k, t in own.items() if k in state_dict]
        sources = list(state_dict.items()) if strict else [(k, state_dict[k]) for k, _ in targets]
        _rnn._assign_state(targets, sources)
        return SimpleNamespace(missing_keys=missing, unexpected_keys=unexpected)

    def save(self, path, metadata=None):
        """Writes the state dict to a safetensors file (atomically)."""
        save_file(self.state_dict(), path, metadata)

    def load_weights(self, path, strict=True):
        """Loads a safetensors file written by ``save`` (or PyTorch's ``save_file``)."""
        return self.load_state_dict(load_file(path), strict=strict)

    def train(self, mode=True):
        """Training mode (Dropout drops, BatchNorm uses batch statistics); returns self."""
        for _, module in self.named_modules():
            object.__setattr__(module, "training", mode)
            module._set_training(mode)
        return self

    def eval(self):
        return self.train(False)

    def _set_training(self, mode):
        pass

    def to(self, device=None, dtype=None):
        """Moves every layer's parameters (new tensors: build optimizers after moving)."""
        for _, module in self.named_modules():
            module._to(device, dtype)
        return self

    def _to(self, device, dtype):
        if self._parameters:
            raise NotImplementedError("Module.to moves rnn.nn layers; move your own parameters yourself")

    def zero_grad(self):
        """Clears the ``.grad`` of every parameter."""
        _rnn._zero_grad(self.parameters())

    def num_parameters(self):
        return sum(_numel(p) for p in self.parameters())

    def __repr__(self):
        lines = [f"  ({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        return f"{type(self).__name__}(" + ("\n" + "\n".join(lines) + "\n" if lines else "") + ")"


def _numel(t):
    n = 1
    for d in t.shape:
        n *= d
    return n


class _RustLayer(Module):
    """A layer computed by rnn-nn (``self._layer``, an ``rnn._rnn._Layer``)."""

    def __init__(self, layer):
        super().__init__()
        object.__setattr__(self, "_layer", layer)

    def forward(self, x):
        return self._layer.forward(x)

    def _own_parameters(self):
        return self._layer.named_parameters()

    def _own_buffers(self):
        return self._layer.named_buffers()

    def _set_training(self, mode):
        self._layer.set_training(mode)

    def _to(self, device, dtype):
        self._layer.to(device, dtype)

    def __getattr__(self, name):
        # `layer.weight`, `layer.bias`, ... as in PyTorch.
        if name.startswith("_"):
            raise AttributeError(name)
        for n, t in self._layer.named_parameters() + self._layer.named_buffers():
            if n == name:
                return t
        raise AttributeError(f"{type(self).__name__} has no attribute '{name}'")

    def __repr__(self):
        return repr(self._layer)


class Linear(_RustLayer):
    """``y = x @ weight.T + bias`` with ``weight`` ``[out_features, in_features]``, PyTorch's
    initialization U(±1/sqrt(in_features))."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(_rnn._linear(in_features, out_features, bias, device, dtype))


class Conv2d(_RustLayer):
    """2-D convolution over ``[N, C, H, W]`` inputs (cross-correlation, as PyTorch)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, device=None, dtype=None):
        super().__init__(_rnn._conv2d(in_channels, out_channels, kernel_size, stride, padding,
                                      dilation, groups, bias, device, dtype))


class MaxPool2d(_RustLayer):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1):
        super().__init__(_rnn._pool2d(True, kernel_size, stride, padding, dilation))


class AvgPool2d(_RustLayer):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__(_rnn._pool2d(False, kernel_size, stride, padding, None))


class BatchNorm1d(_RustLayer):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, device=None, dtype=None):
        super().__init__(_rnn._batch_norm(False, num_features, eps, momentum, affine, device, dtype))


class BatchNorm2d(_RustLayer):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, device=None, dtype=None):
        super().__init__(_rnn._batch_norm(True, num_features, eps, momentum, affine, device, dtype))


class LayerNorm(_RustLayer):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__(_rnn._layer_norm(normalized_shape, eps, elementwise_affine, bias, device, dtype))


class RMSNorm(_RustLayer):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__(_rnn._rms_norm(normalized_shape, eps, elementwise_affine, device, dtype))


class Dropout(_RustLayer):
    """Zeroes each element with probability ``p`` in training mode and scales the rest by
    ``1 / (1 - p)``; the identity in evaluation mode. Seeded by ``rnn.manual_seed``."""

    def __init__(self, p=0.5):
        super().__init__(_rnn._dropout(p))


class Flatten(_RustLayer):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__(_rnn._flatten(start_dim, end_dim))


class Embedding(_RustLayer):
    """Rows of ``weight`` ``[num_embeddings, embedding_dim]`` for integer ids of any shape."""

    def __init__(self, num_embeddings, embedding_dim, device=None, dtype=None):
        super().__init__(_rnn._embedding(num_embeddings, embedding_dim, device, dtype))


class MultiheadAttention(_RustLayer):
    """Multi-head attention on the fused flash-attention kernel; inputs ``[B, L, E]``
    (batch first). ``forward(query, key=None, value=None, attn_mask=None, is_causal=False)``
    returns the output only (no attention weights: they are never stored)."""

    def __init__(self, embed_dim, num_heads, bias=True, device=None, dtype=None):
        super().__init__(_rnn._multihead_attention(embed_dim, num_heads, bias, device, dtype))

    def forward(self, query, key=None, value=None, attn_mask=None, is_causal=False):
        key = query if key is None else key
        value = key if value is None else value
        return self._layer.attend(query, key, value, attn_mask, is_causal)


class _Recurrent(_RustLayer):
    """Inputs ``[batch, time, features]`` (``batch_first=True``, the default here); the output
    sequence of the last layer."""

    _kind = "rnn"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=True,
                 nonlinearity="tanh", device=None, dtype=None):
        super().__init__(_rnn._recurrent(self._kind, input_size, hidden_size, num_layers, bias,
                                         batch_first, nonlinearity, device, dtype))


class RNN(_Recurrent):
    _kind = "rnn"


class LSTM(_Recurrent):
    _kind = "lstm"


class GRU(_Recurrent):
    _kind = "gru"


def _activation(name, doc):
    class _Act(_RustLayer):
        __doc__ = doc

        def __init__(self):
            super().__init__(_rnn._activation(name))

    return _Act


ReLU = _activation("relu", "max(x, 0); NaN stays NaN.")
Sigmoid = _activation("sigmoid", "1 / (1 + exp(-x)).")
Tanh = _activation("tanh", "tanh(x).")
SiLU = _activation("silu", "x * sigmoid(x).")
Identity = _activation("identity", "x.")
for _cls, _name in [(ReLU, "ReLU"), (Sigmoid, "Sigmoid"), (Tanh, "Tanh"), (SiLU, "SiLU"), (Identity, "Identity")]:
    _cls.__name__ = _cls.__qualname__ = _name


class LeakyReLU(_RustLayer):
    def __init__(self, negative_slope=0.01):
        super().__init__(_rnn._activation("leaky_relu", negative_slope))


class GELU(_RustLayer):
    """GELU: exact (erf) by default, ``approximate="tanh"`` for GPT-2's tanh form."""

    def __init__(self, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        super().__init__(_rnn._activation("gelu" if approximate == "none" else "gelu_tanh"))


class Softmax(_RustLayer):
    """Softmax over the last dim (``dim=-1`` only)."""

    def __init__(self, dim=-1):
        if dim != -1:
            raise ValueError("Softmax supports dim=-1 only; use Tensor.softmax(dim) for others")
        super().__init__(_rnn._activation("softmax"))


class Sequential(Module):
    """Modules applied in order; parameters are named ``"<index>.<name>"``."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)

    def append(self, module):
        setattr(self, str(len(self._modules)), module)
        return self


class ModuleList(Sequential):
    """A list of modules (registered, not called in order)."""

    def forward(self, *args):
        raise NotImplementedError("ModuleList has no forward; iterate over it")

    def __iter__(self):
        return iter(self._modules.values())


def _loss_module(name, fn, doc):
    class _Loss(Module):
        __doc__ = doc

        def __init__(self, reduction="mean", **options):
            super().__init__()
            object.__setattr__(self, "_options", dict(options, reduction=reduction))

        def forward(self, input, target):
            return fn(input, target, **self._options)

    _Loss.__name__ = _Loss.__qualname__ = name
    return _Loss


def save_file(tensors, path, metadata=None):
    """Writes a dict of name -> Tensor (or numpy array) to a safetensors file, atomically."""
    _rnn._save_file(list(tensors.items()), str(path), metadata)


def load_file(path):
    """The tensors of a safetensors file, as an ordered dict of name -> Tensor (on the CPU)."""
    tensors, _ = _rnn._load_file(str(path))
    return OrderedDict(tensors)


def load_metadata(path):
    """The string metadata of a safetensors file."""
    return _rnn._load_file(str(path))[1]


def _relu(x):
    return x.relu()


# `rnn.nn.functional` (also importable: `import rnn.nn.functional as F`).
functional = types.ModuleType(__name__ + ".functional", "Losses and activations as functions.")
functional.__dict__.update(
    mse_loss=_rnn.mse_loss,
    l1_loss=_rnn.l1_loss,
    huber_loss=_rnn.huber_loss,
    cross_entropy=_rnn.cross_entropy,
    nll_loss=_rnn.nll_loss,
    binary_cross_entropy=_rnn.binary_cross_entropy,
    binary_cross_entropy_with_logits=_rnn.binary_cross_entropy_with_logits,
    relu=_relu,
)
sys.modules[functional.__name__] = functional

MSELoss = _loss_module("MSELoss", _rnn.mse_loss, "Mean squared error.")
L1Loss = _loss_module("L1Loss", _rnn.l1_loss, "Mean absolute error.")
HuberLoss = _loss_module("HuberLoss", _rnn.huber_loss, "Huber loss (``delta=1.0``).")
CrossEntropyLoss = _loss_module("CrossEntropyLoss", _rnn.cross_entropy,
                                "Cross entropy from logits (``ignore_index``, ``label_smoothing``).")
NLLLoss = _loss_module("NLLLoss", _rnn.nll_loss, "Negative log likelihood from log-probabilities.")
BCELoss = _loss_module("BCELoss", _rnn.binary_cross_entropy, "Binary cross entropy from probabilities.")
BCEWithLogitsLoss = _loss_module("BCEWithLogitsLoss", _rnn.binary_cross_entropy_with_logits,
                                 "Binary cross entropy from logits.")

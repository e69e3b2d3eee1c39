"""PyTorch's module-level forms of the Tensor methods: ``rnn.exp(x)`` is ``x.exp()``,
``rnn.sum(x, 1)`` is ``x.sum(1)``, ``rnn.max(x, 1)`` is ``x.max(1)`` (the pair
``(values, indices)``). ``input`` may be anything ``rnn.Tensor(...)`` accepts."""

from ._rnn import Tensor

# The names torch has at module level for these Tensor methods.
NAMES = (
    "abs", "add", "amax", "amin", "argmax", "argmin", "broadcast_to", "ceil", "clamp", "clip",
    "clone", "cos", "detach", "div", "eq", "erf", "exp", "flatten", "floor", "floor_divide",
    "gather", "ge", "gt", "index_select", "isfinite", "isinf", "isnan", "le", "log",
    "log_softmax", "logsumexp", "lt", "masked_fill", "matmul", "max", "maximum", "mean", "min",
    "minimum", "mul", "narrow", "ne", "neg", "numel", "permute", "pow", "reciprocal", "relu",
    "remainder", "reshape", "round", "sigmoid", "sign", "sin", "softmax", "sqrt", "square",
    "squeeze", "std", "sub", "sum", "t", "tanh", "transpose", "trunc", "unsqueeze", "var",
)  # fmt: skip


def _module_function(name):
    method = getattr(Tensor, name)

    def function(input, *args, **kwargs):
        if not isinstance(input, Tensor):
            input = Tensor(input)
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__module__ = "rnn"
    function.__doc__ = f"``rnn.{name}(input, ...)`` is ``input.{name}(...)``:\n\n{method.__doc__ or ''}"
    return function


for _name in NAMES:
    globals()[_name] = _module_function(_name)

__all__ = list(NAMES)

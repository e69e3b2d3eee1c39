"""The Python API against rnn-core's PyTorch golden values.

crates/rnn-core/tests/golden/golden.json holds PyTorch's results for the core ops (forward
output, and gradients of ``sum(out * w)``); crates/rnn-core/tests/golden.rs checks the Rust
API against it. This file rebuilds the same cases through the Python API, with the same
tolerances (f64: 1e-10, f32: 1e-5, error ``|ours - torch| / (1 + |torch|)``), so the
Python results equal the Rust API's on the same inputs up to those tolerances.
"""

import json
import math
import pathlib

import numpy as np
import pytest

import rnn

FIXTURE = pathlib.Path(__file__).resolve().parents[2] / "crates/rnn-core/tests/golden/golden.json"
TOLERANCE = {"f64": 1e-10, "f32": 1e-5}

# Core ops the Python Tensor has no method for (they are used by rnn.nn's layers).
NOT_IN_PYTHON_API = {"scatter_add", "one_hot"}

# Core unary op names that Python spells like PyTorch.
UNARY_NAMES = {"recip": "reciprocal", "sqr": "square"}

BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
    "floor_divide": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
}
# Reductions over a list of dims: PyTorch's max(dim) takes one dim and gives (values,
# indices); amax / amin are the reductions.
REDUCTION_NAMES = {"max": "amax", "min": "amin"}
CMP = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


def number(v):
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(v, v) if isinstance(v, str) else v


def stored(v):
    return np.array([number(x) for x in v["data"]], dtype=np.float64).reshape(v["shape"])


def along(dim, rank, key):
    """An index that applies ``key`` to dim ``dim`` (negative counts from the end)."""
    dim = dim % rank
    return (slice(None),) * dim + (key,)


def apply(op, xs):
    """The case's op through the Python API."""
    kind = op["op"]
    if kind == "unary":
        return getattr(xs[0], UNARY_NAMES.get(op["fn"], op["fn"]))()
    if kind == "binary":
        return BINARY[op["fn"]](*xs)
    if kind == "cmp":
        return CMP[op["fn"]](*xs)
    if kind == "clamp":
        return xs[0].clamp(op["min"], op["max"])
    if kind in ("sum", "mean", "max", "min", "var", "std", "logsumexp"):
        extra = {"correction": op["correction"]} if "correction" in op else {}
        return getattr(xs[0], REDUCTION_NAMES.get(kind, kind))(dim=op["dims"], keepdim=op["keepdim"], **extra)
    if kind in ("sum_all", "mean_all", "max_all", "min_all", "var_all", "std_all", "logsumexp_all"):
        return getattr(xs[0], kind[: -len("_all")])()
    if kind in ("argmax", "argmin"):
        return getattr(xs[0], kind)(dim=op["dim"], keepdim=op["keepdim"])
    if kind in ("softmax", "log_softmax"):
        return getattr(xs[0], kind)(op["dim"])
    if kind == "matmul":
        return xs[0] @ xs[1]
    if kind == "index_select":
        return xs[0][along(op["dim"], xs[0].ndim, xs[1])]
    if kind == "gather":
        return xs[0].gather(op["dim"], xs[1])
    if kind == "where_cond":
        return rnn.where(*xs)
    if kind == "masked_fill":
        return xs[0].masked_fill(xs[1], op["value"])
    if kind in ("cat", "stack"):
        return getattr(rnn, kind)(xs, dim=op["dim"])
    if kind == "narrow":
        return xs[0][along(op["dim"], xs[0].ndim, slice(op["start"], op["start"] + op["len"]))]
    if kind == "permute":
        return xs[0].permute(*op["perm"])
    if kind == "transpose":
        return xs[0].transpose(op["d0"], op["d1"])
    if kind == "reshape":
        return xs[0].reshape(op["shape"])
    raise AssertionError(f"the golden file has an op this test does not know: {op}")


def build_inputs(case, dtype):
    leaves, views = [], []
    for inp in case["inputs"]:
        values = stored(inp)
        if inp["dtype"] == "f":
            leaf = rnn.Tensor(values, dtype=dtype, requires_grad=True)
        else:
            leaf = rnn.Tensor(values.astype({"i64": np.int64, "u32": np.uint32, "u8": np.uint8}[inp["dtype"]]))
        leaves.append(leaf)
        views.append(leaf.transpose(*inp["transpose"]) if "transpose" in inp else leaf)
    return leaves, views


def rel_err(ours, torch):
    """Largest |ours - torch| / (1 + |torch|); NaN and infinities must match exactly."""
    assert ours.shape == torch.shape, f"shape {ours.shape} vs torch's {torch.shape}"
    special = ~np.isfinite(torch)
    np.testing.assert_array_equal(ours[special], torch[special])
    assert np.isfinite(ours[~special]).all(), "finite in torch, not in ours"
    diff = np.abs(ours[~special] - torch[~special]) / (1 + np.abs(torch[~special]))
    return float(diff.max(initial=0.0))


CASES = json.loads(FIXTURE.read_text())["cases"]
COVERED = [c for c in CASES if c["op"]["op"] not in NOT_IN_PYTHON_API]


def test_the_python_api_covers_most_golden_cases():
    assert len(COVERED) >= 180, f"only {len(COVERED)} of {len(CASES)} golden cases run from Python"


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("case", COVERED, ids=[c["name"] for c in COVERED])
def test_golden_case(case, dtype):
    leaves, views = build_inputs(case, dtype)
    out = apply(case["op"], views)
    expected = stored(case["out"])
    if case["out"]["dtype"] == "int":
        np.testing.assert_array_equal(out.numpy(), expected)
        return
    assert out.dtype == dtype
    tol = TOLERANCE[dtype]
    assert rel_err(out.numpy().astype(np.float64), expected) <= tol
    if "w" not in case:
        return  # forward only (PyTorch has no derivative for floor_divide)
    w = rnn.Tensor(stored(case["w"]), dtype=dtype)
    (out * w).sum().backward()
    for leaf, grad in zip(leaves, case["grads"]):
        if grad is None:
            continue
        assert leaf.grad is not None, "no gradient reached an input"
        assert rel_err(leaf.grad.numpy().astype(np.float64), stored(grad)) <= tol

"""PyTorch's other spellings on rnn.Tensor (named operators, casts, size / dim, selection,
isnan / isinf / isfinite) and rnn.where / zeros_like / ones_like / full_like, against numpy."""

import operator

import numpy as np
import pytest

import rnn

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


NAMED = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


@pytest.mark.parametrize("name", NAMED)
def test_named_operators_are_the_operators(name):
    a, b = rand(3, 4), rand(4)
    b[1] = a[0, 1]  # a tie for the comparisons
    ta, tb = rnn.Tensor(a), rnn.Tensor(b)
    np.testing.assert_array_equal(getattr(ta, name)(tb).numpy(), NAMED[name](ta, tb).numpy())
    np.testing.assert_array_equal(getattr(ta, name)(0.5).numpy(), NAMED[name](ta, 0.5).numpy())


def test_pow_is_the_power_operator():
    a = np.abs(rand(5)) + 0.1
    np.testing.assert_allclose(rnn.Tensor(a).pow(2.5).numpy(), a**2.5, rtol=1e-6)


def test_casts_and_sizes():
    t = rnn.Tensor(np.array([[1.5, -2.0, 3.25]], dtype=np.float32))
    assert t.float() is t
    assert [t.double().dtype, t.half().dtype, t.bfloat16().dtype, t.long().dtype] == ["f64", "f16", "bf16", "i64"]
    np.testing.assert_array_equal(t.long().numpy(), [[1, -2, 3]])
    assert t.size() == (1, 3) and t.size(1) == 3 and t.size(-2) == 1 and t.dim() == 2
    with pytest.raises(IndexError, match="out of range"):
        t.size(2)
    x = rnn.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    x.float().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])


def test_clip_is_clamp():
    a = rand(10)
    np.testing.assert_array_equal(rnn.Tensor(a).clip(-0.5, 0.5).numpy(), np.clip(a, -0.5, 0.5))


def test_masked_fill_and_where():
    a, b = rand(3, 4), rand(3, 4)
    mask = a > 0
    np.testing.assert_array_equal(rnn.Tensor(a).masked_fill(mask, -1.0).numpy(), np.where(mask, -1.0, a))
    np.testing.assert_array_equal(rnn.Tensor(a).masked_fill(mask[0], 2.0).numpy(), np.where(mask[0], 2.0, a))
    np.testing.assert_array_equal(rnn.Tensor(a).where(mask, rnn.Tensor(b)).numpy(), np.where(mask, a, b))
    np.testing.assert_array_equal(rnn.where(mask, a, b).numpy(), np.where(mask, a, b))
    np.testing.assert_array_equal(rnn.where(mask, rnn.Tensor(a), 0.0).numpy(), np.where(mask, a, 0.0))
    # Gradients go to the chosen side only.
    x = rnn.Tensor(a, requires_grad=True)
    rnn.where(mask, x, 0.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), mask.astype(np.float32))
    with pytest.raises(ValueError):
        rnn.where(rand(3, 4), a, b)  # a float condition


def test_gather_index_select_and_narrow():
    a = rand(3, 5)
    index = RNG.integers(0, 5, size=(3, 2))
    np.testing.assert_array_equal(rnn.Tensor(a).gather(1, index).numpy(), np.take_along_axis(a, index, axis=1))
    rows = np.array([2, 0, 2])
    np.testing.assert_array_equal(rnn.Tensor(a).index_select(0, rows).numpy(), a[rows])
    np.testing.assert_array_equal(rnn.Tensor(a).narrow(1, 1, 3).numpy(), a[:, 1:4])
    with pytest.raises(ValueError):
        rnn.Tensor(a).gather(1, np.array([[5], [0], [0]]))  # out of range


def test_expand():
    a = rand(3, 1)
    np.testing.assert_array_equal(rnn.Tensor(a).expand(3, 4).numpy(), np.broadcast_to(a, (3, 4)))
    np.testing.assert_array_equal(rnn.Tensor(a).expand((2, -1, 4)).numpy(), np.broadcast_to(a, (2, 3, 4)))
    for bad in [(4,), (3, -2), (2, 4)]:
        with pytest.raises(ValueError):
            rnn.Tensor(a).expand(*bad)


def test_nonfinite_masks():
    a = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], dtype=np.float32)
    t = rnn.Tensor(a)
    np.testing.assert_array_equal(t.isnan().numpy(), np.isnan(a))
    np.testing.assert_array_equal(t.isinf().numpy(), np.isinf(a))
    np.testing.assert_array_equal(t.isfinite().numpy(), np.isfinite(a))
    ints = rnn.Tensor(np.array([3, -9223372036854775807], dtype=np.int64))
    assert ints.isnan().numpy().tolist() == [0, 0] and ints.isinf().numpy().tolist() == [0, 0]
    assert ints.isfinite().numpy().tolist() == [1, 1]


def test_like_constructors():
    t = rnn.Tensor(np.ones((2, 3), dtype=np.float64))
    z, o, f = rnn.zeros_like(t), rnn.ones_like(t), rnn.full_like(t, 2.5)
    assert [z.dtype, o.dtype, f.dtype] == ["f64"] * 3 and z.shape == o.shape == f.shape == (2, 3)
    np.testing.assert_array_equal(f.numpy(), np.full((2, 3), 2.5))
    assert rnn.zeros_like(t, dtype="f16").dtype == "f16"
    assert rnn.ones_like(np.zeros((4,), dtype=np.float32)).numpy().tolist() == [1.0] * 4
    assert rnn.zeros_like(t, requires_grad=True).requires_grad


def test_floor_division_and_modulo_follow_python():
    # numpy's floor_divide and remainder are Python's // and % (as PyTorch's).
    a = np.array([5.0, -5.0, 5.0, -5.0, 7.5, -0.5, 5.3, 1.0, -1.0], dtype=np.float64)
    b = np.array([3.0, 3.0, -3.0, -3.0, 2.0, 2.0, 0.1, np.inf, np.inf], dtype=np.float64)
    ta, tb = rnn.Tensor(a), rnn.Tensor(b)
    np.testing.assert_array_equal((ta // tb).numpy(), np.floor_divide(a, b))
    np.testing.assert_array_equal((ta % tb).numpy(), np.remainder(a, b))
    np.testing.assert_array_equal(ta.floor_divide(tb).numpy(), (ta // tb).numpy())
    np.testing.assert_array_equal(ta.remainder(tb).numpy(), (ta % tb).numpy())
    np.testing.assert_array_equal((7.0 // rnn.Tensor(b[:4])).numpy(), np.floor_divide(7.0, b[:4]))
    np.testing.assert_array_equal((7.0 % rnn.Tensor(b[:4])).numpy(), np.remainder(7.0, b[:4]))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal((ta // 0.0).numpy(), a / 0.0)  # IEEE, as PyTorch
    i = rnn.Tensor(np.array([7, -7, 7, -7], dtype=np.int64))
    j = np.array([2, 2, -2, -2], dtype=np.int64)
    assert (i // rnn.Tensor(j)).dtype == "i64"
    np.testing.assert_array_equal((i // rnn.Tensor(j)).numpy(), [3, -4, -4, 3])
    np.testing.assert_array_equal((i % 3).numpy(), [1, 2, 1, 2])
    assert (i // 2.5).dtype == "f32"  # a fractional number promotes, as in PyTorch
    with pytest.raises(ZeroDivisionError):
        i // rnn.Tensor(np.array([1, 0, 1, 1], dtype=np.int64))
    with pytest.raises(ZeroDivisionError):
        i % 0
    # d(a % b)/da = 1, d(a % b)/db = -(a // b); a // b has a zero gradient.
    x, y = rnn.Tensor(a[:4], requires_grad=True), rnn.Tensor(b[:4], requires_grad=True)
    ((x % y).sum() + (x // y).sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(4))
    np.testing.assert_array_equal(y.grad.numpy(), -np.floor_divide(a[:4], b[:4]))


def test_max_and_min_along_a_dim_give_values_and_indices():
    a = np.array([[1.0, 3.0, 3.0], [np.nan, 0.0, 5.0], [-1.0, -2.0, -2.0]], dtype=np.float32)
    t = rnn.Tensor(a)
    values, indices = t.max(1)
    np.testing.assert_array_equal(values.numpy(), [3.0, np.nan, -1.0])
    np.testing.assert_array_equal(indices.numpy(), [1, 0, 0])  # the first of ties; NaN wins
    assert indices.dtype == "i64"
    low = t.min(dim=0, keepdim=True)
    assert isinstance(low, rnn.return_types.min) and low.values.shape == (1, 3)
    np.testing.assert_array_equal(low.values.numpy(), [[np.nan, -2.0, -2.0]])
    np.testing.assert_array_equal(low.indices.numpy(), [[1, 2, 2]])
    assert t.max().shape == () and np.isnan(t.max().item())
    np.testing.assert_array_equal(t.max(rnn.Tensor(np.zeros(3, np.float32))).numpy(), np.maximum(a, 0))
    with pytest.raises(TypeError, match="amax"):
        t.max((0, 1))
    # The gradient goes to the indexed element only (amax would share it between ties).
    x = rnn.Tensor(a[[0, 2]], requires_grad=True)
    x.max(1).values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [1, 0, 0]])


def test_where_promotes_as_the_operators():
    mask = np.array([True, False])
    ints = rnn.Tensor(np.array([1, 2], dtype=np.int64))
    assert rnn.where(mask, ints, 0).dtype == "i64"
    np.testing.assert_array_equal(rnn.where(mask, ints, 0.5).numpy(), [1.0, 0.5])
    assert rnn.where(mask, ints, 0.5).dtype == "f32"
    np.testing.assert_array_equal(rnn.where(mask, 0.5, ints).numpy(), [0.5, 2.0])
    half = rnn.Tensor(np.array([1.0, 2.0]), dtype="f16")
    assert rnn.where(mask, half, rnn.Tensor(np.array([3.0, 4.0], np.float32))).dtype == "f32"
    assert rnn.where(mask, half, 7.25).dtype == "f16"  # a number takes the tensor's dtype
    assert ints.where(mask, 0.5).dtype == "f32"


def test_round_to_decimals():
    a = np.array([1.2345, 12345.0, -0.125, 1234.5, np.nan, np.inf], dtype=np.float64)
    t = rnn.Tensor(a)
    np.testing.assert_array_equal(t.round(decimals=2).numpy(), np.round(a * 100) / 100)
    np.testing.assert_array_equal(t.round(decimals=-2).numpy(), np.round(a / 100) * 100)
    np.testing.assert_array_equal(t.round().numpy(), np.round(a))  # halves to even, as numpy


def test_logsumexp_of_nothing_is_minus_infinity():
    empty = rnn.zeros(2, 0)
    np.testing.assert_array_equal(empty.logsumexp(1).numpy(), [-np.inf, -np.inf])
    assert empty.logsumexp().item() == -np.inf


# One call per module-level function: (name, extra arguments), against the method.
MODULE_CALLS = [
    ("abs", ()), ("add", (2.0,)), ("amax", (1,)), ("amin", (0,)), ("argmax", (1,)), ("argmin", ()),
    ("broadcast_to", ((2, 3, 4),)), ("ceil", ()), ("clamp", (-0.5, 0.5)), ("clip", (-0.5, 0.5)), ("clone", ()),
    ("cos", ()), ("detach", ()), ("div", (2.0,)), ("eq", (0.0,)), ("erf", ()), ("exp", ()), ("flatten", ()),
    ("floor", ()), ("floor_divide", (0.3,)), ("ge", (0.0,)), ("gt", (0.0,)), ("isfinite", ()), ("isinf", ()),
    ("isnan", ()), ("le", (0.0,)), ("log", ()), ("log_softmax", (1,)), ("logsumexp", (1,)), ("lt", (0.0,)),
    ("matmul", (np.ones((4, 2), np.float32),)), ("maximum", (0.0,)), ("mean", ()), ("minimum", (0.0,)),
    ("mul", (3.0,)), ("narrow", (1, 1, 2)), ("ne", (0.0,)), ("neg", ()), ("permute", (1, 0)), ("pow", (2.0,)),
    ("reciprocal", ()), ("relu", ()), ("remainder", (0.3,)), ("reshape", (4, 3)), ("round", ()), ("sigmoid", ()),
    ("sign", ()), ("sin", ()), ("softmax", (0,)), ("sqrt", ()), ("square", ()), ("squeeze", ()), ("std", ()),
    ("sub", (1.0,)), ("sum", (1,)), ("t", ()), ("tanh", ()), ("transpose", (0, 1)), ("trunc", ()),
    ("unsqueeze", (0,)), ("var", (0,)),
]  # fmt: skip


@pytest.mark.parametrize("name, args", MODULE_CALLS, ids=[c[0] for c in MODULE_CALLS])
def test_module_functions_are_the_methods(name, args):
    a = np.abs(rand(3, 4)) + 0.1
    want = getattr(rnn.Tensor(a), name)(*args)
    got = getattr(rnn, name)(rnn.Tensor(a), *args)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(getattr(rnn, name)(a, *args).numpy(), want.numpy())  # a numpy input
    assert name in getattr(rnn, name).__doc__


def test_every_module_function_has_a_call_and_the_pairs_work():
    tested = {name for name, _ in MODULE_CALLS} | {"max", "min", "gather", "index_select", "masked_fill", "numel"}
    assert tested == set(rnn.functions.NAMES)
    t = rnn.Tensor(np.array([[1.0, 5.0], [7.0, 2.0]], np.float32))
    values, indices = rnn.max(t, 1)
    np.testing.assert_array_equal(indices.numpy(), [1, 0])
    assert rnn.min(t).item() == 1.0 and rnn.numel(t) == 4
    np.testing.assert_array_equal(rnn.gather(t, 1, np.array([[1], [0]])).numpy(), [[5.0], [7.0]])
    np.testing.assert_array_equal(rnn.index_select(t, 0, np.array([1])).numpy(), [[7.0, 2.0]])
    np.testing.assert_array_equal(rnn.masked_fill(t, t.numpy() > 4, 0.0).numpy(), [[1.0, 0.0], [0.0, 2.0]])
    # Not exported by `from rnn import *`: the builtins max, sum, abs stay the builtins.
    namespace = {}
    exec("from rnn import *", namespace)
    assert "max" not in namespace and "sum" not in namespace

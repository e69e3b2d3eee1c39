"""rnn.Tensor operators, reductions and shape ops against numpy on random inputs."""

import operator

import numpy as np
import pytest

import rnn

RNG = np.random.default_rng(1)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(tensor, expected, rtol=1e-5, atol=1e-6):
    out = tensor.numpy()
    assert out.shape == np.shape(expected)
    np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)


# Pairs of shapes that broadcast: same, row, column, batch, scalar.
SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 4)), ((3, 4), ())]
OPERATORS = [operator.add, operator.sub, operator.mul, operator.truediv]


@pytest.mark.parametrize("op", OPERATORS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_operators_broadcast_like_numpy(op, shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    close(op(rnn.Tensor(a), rnn.Tensor(b)), op(a, b))
    close(op(rnn.Tensor(b), rnn.Tensor(a)), op(b, a))


@pytest.mark.parametrize("op", OPERATORS + [operator.pow], ids=lambda f: f.__name__)
def test_python_numbers_on_either_side(op):
    a = np.abs(rand(3, 4)) + 0.5
    t = rnn.Tensor(a)
    close(op(t, 1.5), op(a, np.float32(1.5)))
    close(op(2.0, t), op(np.float32(2.0), a))


def test_numpy_operands_take_the_tensor_dtype():
    a, b = rand(2, 3), RNG.standard_normal(3)  # b is float64
    out = rnn.Tensor(a) + b
    assert out.dtype == "f32"
    close(out, a + b.astype(np.float32))
    close(rnn.Tensor(a) * [1.0, 2.0, 3.0], a * np.array([1, 2, 3], dtype=np.float32))


def test_dtypes_promote_as_in_pytorch():
    i = rnn.Tensor([1, 2, 3])
    assert (i + 1).dtype == "i64"
    assert (i + 0.5).dtype == "f32"
    close(i + 0.5, [1.5, 2.5, 3.5])
    assert (i / 2).dtype == "f32"
    close(i / 2, [0.5, 1.0, 1.5])
    assert (i + rnn.Tensor([1.0, 1.0, 1.0])).dtype == "f32"
    assert (rnn.Tensor([1.0], dtype="f16") + rnn.Tensor([1.0], dtype="bf16")).dtype == "f32"
    assert (rnn.Tensor([1.0]) + rnn.Tensor([1.0], dtype="f64")).dtype == "f64"
    assert (rnn.Tensor([1], dtype="u8") + rnn.Tensor([1])).dtype == "i64"


def test_unary_operators_and_math():
    a = rand(3, 4)
    t = rnn.Tensor(a)
    close(-t, -a)
    close(abs(t), np.abs(a))
    close(t.exp(), np.exp(a))
    close(t.relu(), np.maximum(a, 0))
    close(t.sigmoid(), 1 / (1 + np.exp(-a)))
    close(t.tanh(), np.tanh(a))
    close(t.clamp(-0.5, 0.5), np.clip(a, -0.5, 0.5))
    close(t.clamp(min=0.0), np.maximum(a, 0))
    close(t.maximum(0.25), np.maximum(a, 0.25))
    e = np.exp(a - a.max(axis=1, keepdims=True))
    close(t.softmax(1), e / e.sum(axis=1, keepdims=True))


def test_nan_and_infinity_follow_pytorch():
    t = rnn.Tensor([float("nan"), float("inf"), -1.0])
    out = t.relu().numpy()
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == 0.0
    assert np.isnan(t.max().item())
    assert (t / 0.0).numpy()[2] == -np.inf


@pytest.mark.parametrize(
    "op", [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge], ids=lambda f: f.__name__
)
def test_comparisons_give_u8_masks(op):
    a, b = RNG.integers(0, 3, (3, 4)).astype(np.float32), RNG.integers(0, 3, (4,)).astype(np.float32)
    out = op(rnn.Tensor(a), rnn.Tensor(b))
    assert out.dtype == "u8"
    np.testing.assert_array_equal(out.numpy(), op(a, b).astype(np.uint8))
    np.testing.assert_array_equal(op(rnn.Tensor(a), 1.0).numpy(), op(a, 1.0).astype(np.uint8))


MATMUL_SHAPES = [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_follows_numpy_rules(shapes):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    close(rnn.Tensor(a) @ rnn.Tensor(b), a @ b, rtol=1e-4, atol=1e-5)
    close(rnn.Tensor(a).matmul(b), a @ b, rtol=1e-4, atol=1e-5)
    close(a @ rnn.Tensor(b), a @ b, rtol=1e-4, atol=1e-5)


def test_matmul_docstring_explains_the_rules():
    doc = rnn.Tensor.matmul.__doc__
    assert "broadcast" in doc and "(n, k) @ (k, m)" in doc and "ValueError" in doc


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("dim", [None, 0, 1, -1, (0, 2)], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_match_numpy(name, dim, keepdim):
    a = rand(2, 3, 4)
    expected = getattr(np, {"amax": "max", "amin": "min"}.get(name, name))(a, axis=dim, keepdims=keepdim)
    close(getattr(rnn.Tensor(a), name)(dim=dim, keepdim=keepdim), expected)


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)], ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("correction", [1, 0])
def test_var_and_std_match_numpy(name, dim, keepdim, correction):
    a = rand(2, 3, 4)
    expected = getattr(np, name)(a.astype(np.float64), axis=dim, keepdims=keepdim, ddof=correction)
    out = getattr(rnn.Tensor(a), name)(dim, keepdim, correction=correction)
    close(out, expected.astype(np.float32))


def test_std_gradient_against_finite_differences():
    a = RNG.standard_normal((3, 5))
    x = rnn.Tensor(a, requires_grad=True)
    x.std(1).sum().backward()
    eps, numeric = 1e-6, np.zeros_like(a)
    for i in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[i] += eps
        down[i] -= eps
        numeric[i] = (np.std(up, axis=1, ddof=1).sum() - np.std(down, axis=1, ddof=1).sum()) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-6, atol=1e-8)


def test_std_of_a_constant_slice_has_a_nan_gradient_as_in_pytorch():
    x = rnn.Tensor(np.ones((2, 3)), requires_grad=True)
    y = x.std(1)
    np.testing.assert_array_equal(y.numpy(), [0.0, 0.0])
    y.sum().backward()
    assert np.isnan(x.grad.numpy()).all()


def test_amax_and_amin_are_max_and_min_and_split_ties():
    a = np.array([[1.0, 3.0, 3.0], [2.0, -1.0, 0.5]], dtype=np.float32)
    np.testing.assert_array_equal(rnn.Tensor(a).amax(1).numpy(), a.max(axis=1))
    np.testing.assert_array_equal(rnn.Tensor(a).amin(0, keepdim=True).numpy(), a.min(axis=0, keepdims=True))
    x = rnn.Tensor(a, requires_grad=True)
    x.amax(1).sum().backward()
    # torch.amax: tied maxima share the gradient evenly.
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])


def test_argmax_and_argmin():
    a = rand(3, 5)
    for dim in (0, 1, -1):
        np.testing.assert_array_equal(rnn.Tensor(a).argmax(dim).numpy(), a.argmax(axis=dim))
        np.testing.assert_array_equal(rnn.Tensor(a).argmin(dim=dim).numpy(), a.argmin(axis=dim))
    assert rnn.Tensor(a).argmax().item() == a.argmax()
    assert rnn.Tensor(a).argmax(1, keepdim=True).shape == (3, 1)


def test_shape_ops_match_numpy():
    a = rand(2, 3, 4)
    t = rnn.Tensor(a)
    close(t.reshape(6, 4), a.reshape(6, 4))
    close(t.reshape((4, -1)), a.reshape(4, -1))
    close(t.view(-1), a.reshape(-1))
    close(t.transpose(0, 2), a.transpose(2, 1, 0))
    close(t.permute(2, 0, 1), a.transpose(2, 0, 1))
    close(t.permute((1, 0, 2)), a.transpose(1, 0, 2))
    close(t.flatten(1), a.reshape(2, 12))
    close(t[0].T, a[0].T)
    close(t.unsqueeze(1), a[:, None])
    close(t.unsqueeze(1).squeeze(1), a)
    close(rnn.Tensor(a[:1]).squeeze(), a[0])
    close(rnn.Tensor(a[0, 0]).broadcast_to(3, 4), np.broadcast_to(a[0, 0], (3, 4)))
    close(t.transpose(0, 1).contiguous(), a.transpose(1, 0, 2))
    with pytest.raises(ValueError):
        t.reshape(5, -1)


def test_clone_copies_storage():
    t = rnn.Tensor([1.0, 2.0])
    c = t.clone()
    close(c, [1.0, 2.0])
    assert not c.requires_grad

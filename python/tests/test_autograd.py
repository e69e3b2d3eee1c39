"""Autograd from Python: requires_grad, backward, .grad, no_grad, detach."""

import numpy as np
import pytest

import rnn

RNG = np.random.default_rng(2)


def test_gradients_of_an_mlp_layer_match_the_formulas():
    x_np, w_np = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 2))
    x = rnn.Tensor(x_np, dtype="f64")
    w = rnn.Tensor(w_np, dtype="f64", requires_grad=True)
    loss = (x @ w).tanh().sum()
    loss.backward()
    # d sum(tanh(xw)) / dw = x^T (1 - tanh(xw)^2)
    expected = x_np.T @ (1 - np.tanh(x_np @ w_np) ** 2)
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-12)
    assert x.grad is None  # x does not require grad


def test_gradients_accumulate_until_cleared():
    x = rnn.Tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0 + 3.0, 4.0 + 3.0])
    x.grad = None
    assert x.grad is None
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_backward_with_a_seed_gradient():
    x = rnn.Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).backward(rnn.Tensor([1.0, 0.0, 2.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.0, 12.0])


def test_non_scalar_backward_seeds_ones():
    x = rnn.Tensor([1.0, 2.0], requires_grad=True)
    (x * x).backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_gradients_flow_through_indexing_and_shape_ops():
    x = rnn.Tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    (x[1:, ::2].reshape(-1) * rnn.Tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    expected = np.zeros((3, 4))
    expected[1:, ::2] = [[1.0, 2.0], [3.0, 4.0]]
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_every_wrapper_of_a_leaf_sees_its_gradient():
    x = rnn.Tensor([1.0], requires_grad=True)
    same = x.to("cpu")  # no copy: the same tensor
    (x * 5.0).sum().backward()
    assert same.grad.item() == 5.0


def test_requires_grad_flags():
    t = rnn.Tensor([1.0, 2.0])
    assert not t.requires_grad and t.is_leaf
    t.requires_grad = True
    assert t.requires_grad and t.is_leaf
    y = t * 2
    assert y.requires_grad and not y.is_leaf
    with pytest.raises(RuntimeError, match="detach"):
        y.requires_grad = False
    assert t.requires_grad_(False) is t and not t.requires_grad
    with pytest.raises(ValueError, match="float"):
        rnn.Tensor([1, 2]).requires_grad_()


def test_no_grad_records_nothing_and_restores_the_flag():
    x = rnn.Tensor([1.0], requires_grad=True)
    assert rnn.is_grad_enabled()
    with rnn.no_grad():
        assert not rnn.is_grad_enabled()
        y = x * 2
    assert rnn.is_grad_enabled()
    assert not y.requires_grad
    with pytest.raises(ValueError, match="does not depend on any variable"):
        y.backward()


def test_no_grad_restores_the_flag_after_an_exception():
    with pytest.raises(KeyError):
        with rnn.no_grad():
            raise KeyError("x")
    assert rnn.is_grad_enabled()


def test_detach_cuts_the_graph():
    x = rnn.Tensor([3.0], requires_grad=True)
    y = x * x.detach()  # d/dx = x.detach() only
    y.backward()
    assert x.grad.item() == 3.0
    assert not x.detach().requires_grad


def test_grad_setter_checks_the_shape():
    x = rnn.Tensor([1.0, 2.0], requires_grad=True)
    x.grad = np.array([0.5, 0.5], dtype=np.float32)
    np.testing.assert_array_equal(x.grad.numpy(), [0.5, 0.5])
    with pytest.raises(ValueError, match="shape"):
        x.grad = rnn.Tensor([1.0])

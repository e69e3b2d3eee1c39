"""rnn.optim: optimizers step as the Rust API's (fixtures/rust_reference.json), zero_grad,
learning-rate schedulers as PyTorch's formulas, a training loop that learns."""

import math

import numpy as np
import pytest

import rnn
from rnn import nn, optim
from rnn.nn import functional as F
from reference import array


def three_steps(make_optimizer):
    """The parameter after 3 steps whose gradient is ``grad * step`` (as the Rust reference)."""
    p = rnn.Tensor(array("optim_start"), requires_grad=True)
    opt = make_optimizer([p])
    for step in (1, 2, 3):
        opt.zero_grad()
        p.backward(rnn.Tensor(array("optim_grad") * step))
        opt.step()
    return p.numpy()


def test_sgd_momentum_equals_the_rust_api():
    got = three_steps(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9))
    np.testing.assert_allclose(got, array("optim_sgd"), rtol=1e-6, atol=1e-7)


def test_adam_equals_the_rust_api():
    got = three_steps(lambda ps: optim.Adam(ps, lr=0.05))
    np.testing.assert_allclose(got, array("optim_adam"), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: optim.Adam(ps, lr=0.05, amsgrad=True),
    lambda ps: optim.AdamW(ps, lr=0.05),
    lambda ps: optim.RMSprop(ps, lr=0.01, centered=True),
    lambda ps: optim.Adagrad(ps, lr=0.1),
])
def test_every_optimizer_fits_a_linear_model(make):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
    model = nn.Linear(3, 1)
    opt = make(model.parameters())
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_zero_grad_and_parameters_without_grad():
    p = rnn.Tensor(np.ones(3, np.float32), requires_grad=True)
    q = rnn.Tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.SGD([p, q], lr=1.0)
    p.backward(rnn.Tensor(np.full(3, 2.0, np.float32)))
    opt.step()  # q has no gradient: left as it is
    np.testing.assert_array_equal(p.numpy(), [-1, -1, -1])
    np.testing.assert_array_equal(q.numpy(), [1, 1, 1])
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(p.grad.numpy(), [0, 0, 0])
    opt.zero_grad()
    assert p.grad is None
    assert len(opt.parameters()) == 2 and "SGD" in repr(opt)


def test_bad_arguments():
    with pytest.raises(ValueError, match="empty"):
        optim.Adam([])
    with pytest.raises(ValueError, match="requires_grad"):
        optim.SGD([rnn.Tensor(np.ones(2, np.float32))])
    p = rnn.Tensor(np.ones(2, np.float32), requires_grad=True)
    with pytest.raises(ValueError):
        optim.Adam([p], betas=(1.5, 0.999))
    with pytest.raises(ValueError):
        optim.SGD([p], lr=0.1).lr = float("nan")


def test_schedulers_follow_pytorch():
    p = rnn.Tensor(np.ones(2, np.float32), requires_grad=True)
    lr = lambda s: s.get_last_lr()[0]  # noqa: E731
    opt = optim.SGD([p], lr=1.0)
    step = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    seen = []
    for _ in range(5):
        seen.append(opt.lr)
        step.step()
    assert seen == [1.0, 1.0, 0.5, 0.5, 0.25] and lr(step) == 0.25
    opt = optim.SGD([p], lr=1.0)
    cosine = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.1)
    cosine.step()
    assert opt.lr == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2)
    opt = optim.SGD([p], lr=1.0)
    warm = optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=3)
    assert opt.lr == pytest.approx(0.25)
    warm.step()
    assert opt.lr == pytest.approx(0.5)
    opt = optim.Adam([p], lr=1.0)
    plateau = optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
    for metric in [1.0, 1.0, 1.0]:
        plateau.step(metric)
    assert opt.lr == 0.5
    with pytest.raises(ValueError, match="metric"):
        plateau.step()
    from rnn.optim.lr_scheduler import ExponentialLR
    opt = optim.SGD([p], lr=1.0)
    ExponentialLR(opt, gamma=0.5).step()
    assert opt.lr == 0.5


def test_clip_grad_norm():
    p = rnn.Tensor(np.zeros(2, np.float32), requires_grad=True)
    p.backward(rnn.Tensor(np.array([3.0, 4.0], np.float32)))
    norm = optim.clip_grad_norm_([p], 1.0)
    assert norm == pytest.approx(5.0)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)

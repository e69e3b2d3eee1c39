"""Every Python block of micrograd_rs's GPU guide runs (seed_guides/micrograd_gpu.md), with
only the names it leaves undefined supplied; values and gradients equal the Rust API's."""

import math

import numpy as np
import pytest

import rnn
from rnn.micrograd import MLP, Device, Value
from reference import values
from seed_snippets import run, snippets

SNIPPETS = snippets("micrograd_gpu")
HAS_GPU = Device.is_gpu_available()


def test_every_block_is_covered():
    assert sorted(SNIPPETS) == [1, 2, 3, 4, 5]


def test_value_on_gpu_and_operation_dispatch():
    if not HAS_GPU:
        # Device.gpu() "Raises RuntimeError if GPU is not available".
        with pytest.raises(RuntimeError, match="GPU is not available"):
            run(SNIPPETS[1])
        # The second block continues the first: run it on a CPU value.
        v = Value(3.14, device=Device.cpu())
    else:
        v = run(SNIPPETS[1])[0]["v"]
    ns, _ = run(SNIPPETS[2], v=v)
    assert ns["result"].data == pytest.approx(3.14 * 2.0 + 3.14**2, rel=1e-6)
    assert v.grad == pytest.approx(2.0 + 2 * 3.14, rel=1e-6)
    assert ns["result"].device == v.device


def test_device_class_reference_matches_ours():
    ns, _ = run(SNIPPETS[3], Device=Device)
    documented = [name for name in vars(ns["Device"]) if not name.startswith("_")]
    assert sorted(documented) == ["cpu", "gpu", "is_gpu_available"]
    assert Device.cpu() == Device.cpu() and not Device.cpu().is_gpu
    assert isinstance(Device.is_gpu_available(), bool)
    assert Device.is_gpu_available() == bool(rnn.GpuManager().devices())


def test_value_with_device():
    device = Device.cpu()
    if HAS_GPU:
        ns, _ = run(SNIPPETS[4], Value=Value, Device=Device, data=1.5, device=device)
        assert ns["v_gpu"].device == Device.gpu() and ns["v_gpu"].data == pytest.approx(1.5)
    else:
        with pytest.raises(RuntimeError, match="GPU is not available"):
            run(SNIPPETS[4], Value=Value, Device=Device, data=1.5, device=device)


def test_mlp_with_device():
    ns, _ = run(SNIPPETS[5], input_size=3, layer_sizes=[4, 4, 1])
    model, device = ns["model"], ns["device"]
    assert len(model.parameters()) == (3 * 4 + 4) + (4 * 4 + 4) + (4 + 1)
    assert device == (Device.gpu() if HAS_GPU else Device.cpu())
    out = model([1.0, -2.0, 0.5])
    assert isinstance(out, Value) and out.device == device


def test_values_and_gradients_equal_the_rust_api():
    a, b = Value(2.0), Value(-3.0)
    c = a * b + a**2 - 1 / a + (b / a).tanh() + a.exp() - (a * b).relu() + (-b).relu()
    c.backward()
    np.testing.assert_allclose([c.data, a.grad, b.grad], values("micrograd_value_grads"), rtol=1e-12)
    assert c.grad == 1.0
    # Closed forms: d/da and d/db of the same expression (relu(a*b) = 0, relu(-b) = -b).
    t = math.tanh(-1.5)
    assert a.grad == pytest.approx(-3 + 4 + 1 / 4 + (1 - t * t) * (3 / 4) + math.exp(2))
    assert b.grad == pytest.approx(2 + (1 - t * t) / 2 - 1)


def test_arithmetic_and_gradient_accumulation():
    x = Value(0.5)
    y = (3 - x) * (x - 1) / (2 * x) + x.exp() ** 0.5
    y.backward()
    g = x.grad
    y.backward()
    assert x.grad == pytest.approx(2 * g)
    x.grad = 0.0
    x.data -= 0.25
    assert x.data == pytest.approx(0.25) and x.grad == 0.0
    with pytest.raises(TypeError):
        x ** Value(2.0)
    with pytest.raises(TypeError):
        x + "a"


def test_mlp_trains_with_the_micrograd_loop():
    rnn.manual_seed(0) if hasattr(rnn, "manual_seed") else None
    model = MLP(2, [8, 1])
    xs = [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    ys = [1.0, 1.0, -1.0, -1.0]

    def loss():
        return sum(((model(x) - y) ** 2 for x, y in zip(xs, ys)), Value(0.0))

    first = loss().data
    for _ in range(30):
        model.zero_grad()
        total = loss()
        total.backward()
        for p in model.parameters():
            p.data -= 0.05 * p.grad
    assert loss().data < first


def test_value_takes_any_device_form():
    assert Value(1.0, device="cpu").device == Device.cpu()
    assert Value(1.0, device=rnn.Device("cpu")).to("cpu").device == Device.cpu()
    with pytest.raises(ValueError):
        Value(1.0, device="tpu:0")

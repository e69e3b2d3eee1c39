"""rnn.Device and moving tensors between devices. GPU tests run where a device is available
(CI: wgpu on lavapipe) and fail instead of skipping when RNN_REQUIRE_GPU names it."""

import os

import numpy as np
import pytest

import rnn


def required(kind):
    flags = [v.strip() for v in os.environ.get("RNN_REQUIRE_GPU", "").split(",")]
    return kind in flags or "1" in flags or "all" in flags


def gpu_devices():
    found = []
    for name in ("wgpu:0", "cuda:0"):
        kind = name.split(":")[0]
        if rnn.Device(name).is_available():
            found.append(name)
        elif required(kind):
            found.append(pytest.param(name, marks=pytest.mark.xfail(strict=True, reason="required but missing")))
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="no GPU device available"))]


def test_device_names():
    assert str(rnn.Device("cpu")) == "cpu"
    assert rnn.Device("CUDA:1").kind == "cuda" and rnn.Device("cuda:1").index == 1
    assert repr(rnn.Device("wgpu:0")) == "Device('wgpu:0')"
    assert rnn.Device("cpu") == rnn.Device.cpu()
    assert {rnn.Device("cpu"), rnn.Device("cpu:0")} == {rnn.Device.cpu()}
    with pytest.raises(ValueError, match="unknown device"):
        rnn.Device("tpu")
    with pytest.raises(ValueError, match="one CPU device"):
        rnn.Device("cpu:1")


def test_best_is_available_and_honours_the_environment(monkeypatch):
    assert rnn.Device.best().is_available()
    monkeypatch.setenv("RNN_GPU_DEVICE", "cpu")
    assert rnn.Device.best() == rnn.Device.cpu()
    monkeypatch.setenv("RNN_GPU_DEVICE", "cuda:9")
    with pytest.raises(RuntimeError):
        rnn.Device.best()


def test_cpu_tensors_report_their_device():
    t = rnn.Tensor([1.0])
    assert t.device == rnn.Device("cpu")
    assert t.to("cpu") is t and t.cpu() is t
    assert t.to(dtype="f64").dtype == "f64"
    # A dtype in the device's place is the dtype, as in PyTorch's t.to(torch.float16).
    assert t.to(rnn.float16).dtype == "f16" and t.to(np.float64).dtype == "f64"
    assert t.to(rnn.float32) is t
    with pytest.raises(ValueError, match="unknown device"):
        t.to("tpu:0")


@pytest.mark.parametrize("device", gpu_devices())
def test_gpu_results_equal_cpu_results(device):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    on_gpu = rnn.Tensor(a, device=device)
    assert on_gpu.device == rnn.Device(device)
    w = rnn.Tensor(b).to(device)
    w.requires_grad = True
    out = ((on_gpu @ w).relu() + 1.0).sum(1)
    assert out.device == rnn.Device(device)
    cpu_w = rnn.Tensor(b, requires_grad=True)
    cpu_out = ((rnn.Tensor(a) @ cpu_w).relu() + 1.0).sum(1)
    np.testing.assert_allclose(out.numpy(), cpu_out.numpy(), rtol=1e-4, atol=1e-4)
    out.sum().backward()
    cpu_out.sum().backward()
    assert w.grad.device == rnn.Device(device)
    np.testing.assert_allclose(w.grad.numpy(), cpu_w.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(on_gpu.cpu().numpy(), a)
    np.testing.assert_allclose(on_gpu[1:3, ::4].numpy(), a[1:3, ::4])


@pytest.mark.parametrize("device", gpu_devices())
def test_mixing_devices_is_a_runtime_error(device):
    with pytest.raises(RuntimeError, match="device mismatch"):
        rnn.Tensor([1.0], device=device) + rnn.Tensor([1.0]).to("cpu").requires_grad_()

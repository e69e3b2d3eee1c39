"""Every Python block of neural_arch's CUDA guide runs (seed_guides/neural_arch_cuda.md) with
only the names it leaves undefined supplied: ``cp`` is numpy (the backends take and return
numpy arrays) and ``cuda_backend`` a backend this machine has. Without a GPU, the guide's
``get_backend("cuda")`` takes its documented unavailable path. The ops equal the Rust API's."""

import numpy as np
import pytest

import rnn
from rnn.backends import get_backend
from reference import array
from seed_snippets import run, snippets

SNIPPETS = snippets("neural_arch_cuda")
CUDA = get_backend("cuda")
# The backend the snippets that take `cuda_backend` from their context run on.
BACKEND = CUDA if CUDA.is_available else get_backend("cpu")


def given(**names):
    return dict(cp=np, cuda_backend=BACKEND, get_backend=get_backend, **names)


def test_every_block_is_covered():
    assert sorted(SNIPPETS) == list(range(1, 15))


@pytest.mark.parametrize("number", [1, 10])
def test_cupy_checks_take_their_documented_paths(number):
    _, out = run(SNIPPETS[number])
    assert "CuPy installed" in out or "CuPy available" in out or "CuPy not installed" in out


def test_basic_usage_reports_availability():
    ns, out = run(SNIPPETS[2])
    assert f"CUDA backend available: {CUDA.is_available}" in out
    assert f"Custom kernels available: {CUDA.has_custom_kernels}" in out
    if not CUDA.is_available:
        with pytest.raises(RuntimeError, match="cuda backend is not available"):
            ns["cuda_backend"].gelu(np.zeros(3, np.float32))


def test_gelu_block():
    ns, out = run(SNIPPETS[3], **given())
    assert "Output shape: (1024, 512)" in out
    x = ns["x_gpu"]
    np.testing.assert_allclose(ns["result"], rnn_gelu(x), rtol=1e-6, atol=1e-6)


def test_fused_linear_gelu_block():
    ns, out = run(SNIPPETS[4], **given())
    assert "Fused linear+GELU output: (128, 768)" in out
    x, w, b = ns["input_gpu"], ns["weight_gpu"], ns["bias_gpu"]
    expected = rnn_gelu((x.astype(np.float64) @ w.T.astype(np.float64) + b).astype(np.float32))
    np.testing.assert_allclose(ns["output"], expected, rtol=1e-4, atol=1e-4)


def test_flash_attention_block():
    ns, out = run(SNIPPETS[5], **given())
    assert "Flash Attention output: (4, 8, 512, 64)" in out
    q, k, v, scale = ns["q"][:1, :2], ns["k"][:1, :2], ns["v"][:1, :2], ns["scale"]
    np.testing.assert_allclose(ns["attention_output"][:1, :2], naive_attention(q, k, v, scale), rtol=1e-4, atol=1e-5)


def test_layernorm_block():
    ns, out = run(SNIPPETS[6], **given())
    assert "LayerNorm output: (128, 768)" in out
    x = ns["input_gpu"].astype(np.float64)
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ns["output"], expected, rtol=1e-4, atol=1e-4)


def test_kernel_manager_block():
    _, out = run(SNIPPETS[7], **given())
    assert f"CUDA available: {CUDA.is_available}" in out
    assert ("Direct kernel result: (1000, 1000)" in out) == CUDA.is_available


def test_benchmark_block():
    _, out = run(SNIPPETS[8], **given())
    assert "Average GELU kernel time:" in out and out.strip().endswith("ms")


def test_memory_monitoring_block():
    _, out = run(SNIPPETS[9], **given())
    lines = [line for line in out.splitlines() if line.startswith("GPU Memory - Used:")]
    assert len(lines) == 3


def test_unavailable_backend_blocks():
    _, out = run(SNIPPETS[11])
    expected = "✅ CUDA backend available" if CUDA.is_available else "❌ CUDA backend not available"
    assert expected in out
    _, out = run(SNIPPETS[12], get_backend=get_backend)
    expected = "✅ Custom kernels available" if CUDA.has_custom_kernels else "⚠️  Custom kernels not available"
    assert expected in out


def test_out_of_memory_block():
    ns, out = run(SNIPPETS[13], **given())
    # Either the op ran (a result of the input's shape) or the documented message was printed.
    assert "❌ GPU out of memory" in out or ns["result"].shape == (10000, 10000)


def test_kernel_correctness_block():
    _, out = run(SNIPPETS[14], **given())
    assert "✅ Kernel correctness validated" in out


def test_ops_equal_the_rust_api():
    cpu = get_backend("cpu")
    x, w, b = array("backend_x"), array("backend_w"), array("backend_b")
    np.testing.assert_array_equal(cpu.gelu(x), array("backend_gelu"))
    np.testing.assert_array_equal(cpu.fused_linear_gelu(x, w, b), array("backend_linear_gelu"))
    gamma, beta = array("backend_gamma"), array("backend_beta")
    np.testing.assert_array_equal(cpu.layernorm(x, gamma, beta, eps=1e-5), array("backend_layernorm"))
    q, k, v = array("backend_q"), array("backend_k"), array("backend_v")
    np.testing.assert_array_equal(cpu.flash_attention(q, k, v, 0.5), array("backend_attention"))


def test_gpu_backends_agree_with_the_cpu():
    """Each available GPU backend (wgpu:0 is Mesa's lavapipe in CI) against the CPU's result."""
    backends = [b for b in (get_backend("cuda"), get_backend("wgpu:0")) if b.is_available]
    if not backends:
        pytest.skip("no GPU backend available")
    cpu, rng = get_backend("cpu"), np.random.default_rng(3)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    w, b = rng.standard_normal((8, 32)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    q = rng.standard_normal((1, 2, 20, 16)).astype(np.float32)
    for gpu in backends:
        np.testing.assert_allclose(gpu.gelu(x), cpu.gelu(x), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gpu.fused_linear_gelu(x, w, b), cpu.fused_linear_gelu(x, w, b), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(gpu.layernorm(x, w[0], b[:1].repeat(32)), cpu.layernorm(x, w[0], b[:1].repeat(32)),
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(gpu.flash_attention(q, q, q, 0.25), cpu.flash_attention(q, q, q, 0.25),
                                   rtol=1e-4, atol=1e-5)
        assert gpu.benchmark_kernel("softmax", x, num_runs=2) > 0
        assert set(gpu.memory_info()) == {"allocated", "reserved", "peak", "allocations", "cache_hits", "total"}


def test_backend_errors():
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("opencl")
    cpu = get_backend("cpu")
    with pytest.raises(ValueError, match="unknown kernel"):
        cpu.benchmark_kernel("conv", np.zeros(4, np.float32))
    with pytest.raises(ValueError):
        cpu.fused_linear_gelu(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="block_size"):
        cpu.flash_attention(*(np.zeros((1, 1, 2, 2), np.float32),) * 3, block_size=0)


def rnn_gelu(x):
    """GELU (tanh form) by numpy in f64, the formula the guide's reference uses."""
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def naive_attention(q, k, v, scale):
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v

"""The GPU API of the seed guides from Python: GpuManager, contexts with memory statistics,
GpuProfiler as a context manager. Without a GPU the list is empty and opening one is a
RuntimeError; Mesa's software Vulkan adapter (lavapipe, in CI) is used when named."""

import json

import numpy as np
import pytest

import rnn


def test_manager_lists_what_the_core_can_use():
    manager = rnn.GpuManager()
    devices = manager.devices()
    assert rnn.GpuManager.is_gpu_available() == bool(devices)
    assert [d.id for d in devices] == list(range(len(devices)))
    if not devices:
        assert manager.default_device() is None
        with pytest.raises(RuntimeError, match="no GPU with id 0"):
            manager.create_context(0)


def test_a_named_software_adapter_opens_with_memory_stats(monkeypatch):
    monkeypatch.setenv("RNN_GPU_DEVICE", "wgpu:0")
    if not rnn.Device("wgpu:0").is_available():
        pytest.skip("no wgpu adapter on this machine")
    manager = rnn.GpuManager()
    gpu = manager.default_device()
    assert gpu is not None and str(gpu.device) == "wgpu:0" and gpu.device_type in ("Vulkan", "Metal", "Dx12", "Generic")
    context = manager.create_context(gpu.id)
    x = rnn.Tensor(np.ones((256, 256), np.float32), device=context.device)
    context.synchronize()
    stats = context.memory_stats()
    assert stats["allocated"] >= 256 * 256 * 4 and stats["reserved"] >= stats["allocated"]
    del x
    context.empty_cache()


def test_profiler_regions(tmp_path, capsys):
    profiler = rnn.GpuProfiler("cpu")
    a = np.ones((64, 64), np.float32)
    for _ in range(2):
        with profiler.region("matmul", memory_used=64 * 64 * 4):
            rnn.backends.get_backend("cpu").gelu(a)
    with pytest.raises(ZeroDivisionError):
        with profiler.region("failing"):
            1 / 0
    profiler.start("manual")
    assert profiler.end("manual") >= 0.0
    summary = {row["name"]: row for row in profiler.summary()}
    assert summary["matmul"]["count"] == 2 and summary["matmul"]["max_memory_used"] == 64 * 64 * 4
    assert summary["failing"]["count"] == 1
    profiler.print_summary()
    assert "matmul" in capsys.readouterr().out
    path = tmp_path / "trace.json"
    profiler.export_chrome_trace(path)
    assert len(json.loads(path.read_text())["traceEvents"]) == 4
    with pytest.raises(ValueError, match="not started"):
        profiler.end("never")
    with pytest.raises(ValueError, match="already started"):
        profiler.start("twice")
        profiler.start("twice")

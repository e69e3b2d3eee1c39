"""Rust errors become Python exceptions with the same message; panics do not abort;
heavy ops release the GIL."""

import threading
import time

import numpy as np
import pytest

import rnn


def test_shape_errors_are_value_errors_with_the_library_message():
    with pytest.raises(ValueError, match=r"add: shapes \[2\] and \[3\] cannot be broadcast together"):
        rnn.Tensor([1.0, 2.0]) + rnn.Tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="matmul"):
        rnn.ones(2, 3) @ rnn.ones(2, 3)
    with pytest.raises(ValueError, match="dim 5 is out of range"):
        rnn.ones(2, 3).sum(5)


def test_device_errors_are_runtime_errors():
    unavailable = next((d for d in ("cuda:0", "cuda:7") if not rnn.Device(d).is_available()), None)
    if unavailable is None:
        pytest.skip("every CUDA ordinal tried is available")
    with pytest.raises(RuntimeError):
        rnn.Tensor([1.0], device=unavailable)


def test_out_of_memory_is_a_memory_error_and_the_process_carries_on():
    with pytest.raises(MemoryError, match="out of memory"):
        rnn.zeros(1 << 40, 1 << 10)  # 4 PiB
    assert rnn.ones(3).sum().item() == 3.0


@pytest.mark.parametrize("release_gil", [True, False])
def test_a_panic_is_a_runtime_error_not_an_abort(release_gil):
    with pytest.raises(RuntimeError, match="forced panic for testing"):
        rnn._rnn._force_panic(release_gil)
    assert (rnn.Tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]


def _matrix_whose_product_takes(seconds):
    """A square matrix whose product with itself takes at least `seconds` here (n up to 4096),
    so the test below holds on a fast machine as on a slow one."""
    rng = np.random.default_rng(0)
    for n in (512, 1024, 2048, 4096):
        a = rnn.Tensor(rng.standard_normal((n, n)).astype(np.float32))
        a @ a  # warm up (thread pool, allocations)
        start = time.perf_counter()
        a @ a
        if time.perf_counter() - start >= seconds:
            break
    return a


def test_other_threads_run_while_a_large_matmul_runs():
    a = _matrix_whose_product_takes(0.03)
    span = {}

    def heavy():
        span["start"] = time.perf_counter()
        for _ in range(4):
            a @ a
        span["end"] = time.perf_counter()

    worker = threading.Thread(target=heavy)
    ticks = []
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())  # needs the GIL
        time.sleep(0.001)
    worker.join()
    inside = [t for t in ticks if span["start"] < t < span["end"]]
    duration = span["end"] - span["start"]
    # With the GIL held during each product, this thread could tick only in the 3 gaps
    # between them (a few ticks); released, it ticks about every millisecond throughout.
    assert duration > 0.05, "the matmuls were too quick to tell"
    assert len(inside) >= 20, f"{len(inside)} ticks during {duration:.3f} s of matmuls"

"""The timing rule every PyTorch twin shares with `rnn bench`: warm-up calls, then repeat until
>= min_time seconds and >= min_calls calls; the median, in seconds. `sync` waits for queued
device work (a GPU's) after the warm-up and after each timed call."""
import statistics
import time


def time_call(fn, warmup=3, min_time=0.5, min_calls=5, sync=lambda: None):
    for _ in range(warmup):
        fn()
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)

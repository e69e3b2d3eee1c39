//! Timing one call the way `bench/cpu_bench.py` does: warm-up calls, then repeat until a
//! minimum time and a minimum number of calls have passed, and take the median.

use std::time::Instant;

/// How long to measure one workload.
#[derive(Clone, Copy, Debug)]
pub struct TimingConfig {
    pub warmup_calls: usize,
    pub min_seconds: f64,
    pub min_calls: usize,
}

impl TimingConfig {
    /// The settings of the PyTorch twin: 3 warm-up calls, at least 0.5 s and 5 calls.
    pub const FULL: TimingConfig = TimingConfig { warmup_calls: 3, min_seconds: 0.5, min_calls: 5 };
    /// A smoke-test setting: the same shape of measurement, over 0.1 s.
    pub const QUICK: TimingConfig = TimingConfig { warmup_calls: 3, min_seconds: 0.1, min_calls: 5 };
}

/// The result of timing one workload.
#[derive(Clone, Copy, Debug)]
pub struct Measurement {
    /// Median seconds per call.
    pub median_seconds: f64,
    /// Timed calls (warm-up calls not counted).
    pub calls: usize,
}

/// Calls `f` repeatedly and returns the median time per call; stops at the first error.
pub fn time_call<E>(config: TimingConfig, mut f: impl FnMut() -> Result<(), E>) -> Result<Measurement, E> {
    for _ in 0..config.warmup_calls {
        f()?;
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < config.min_calls || start.elapsed().as_secs_f64() < config.min_seconds {
        let t0 = Instant::now();
        f()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    Ok(Measurement { median_seconds: median(&mut times), calls: times.len() })
}

/// The median as Python's `statistics.median` computes it (mean of the middle two when even).
pub fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "median of no values");
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn time_call_respects_minimums() {
        let mut calls = 0;
        let config = TimingConfig { warmup_calls: 2, min_seconds: 0.0, min_calls: 5 };
        let m = time_call(config, || -> Result<(), ()> {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(m.calls, 5);
        assert_eq!(calls, 7);
        assert!(m.median_seconds >= 0.0);
    }

    #[test]
    fn time_call_stops_on_error() {
        let config = TimingConfig::QUICK;
        assert_eq!(time_call(config, || Err::<(), _>("boom")).unwrap_err(), "boom");
    }
}

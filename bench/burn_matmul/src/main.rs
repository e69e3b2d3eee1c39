//! burn's wgpu backend (CubeCL's matmul, autotuned) on an f32 n x n matmul: the twin of the
//! matmul rows of `rnn bench gpu --device wgpu:N --matmul-only`. Same timing: 3 warm-up calls
//! (burn autotunes during the first ones), then repeat until at least 0.5 s and 5 calls have
//! passed, and print the median per call as GFLOP/s. Every timed call waits for the device.
//!
//! Usage: burn_matmul [SIZE ...]   (default 256 512 1024)
//! The adapter is wgpu's choice (`CUBECL_WGPU_DEFAULT_DEVICE=Cpu` picks a software one).

use std::time::Instant;

use burn::tensor::{Device, DeviceKind, Distribution, Tensor};

const WARMUP_CALLS: usize = 3;
const MIN_SECONDS: f64 = 0.5;
const MIN_CALLS: usize = 5;

/// Median seconds of `f` after the warm-up calls.
fn median_seconds(mut f: impl FnMut()) -> f64 {
    for _ in 0..WARMUP_CALLS {
        f();
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < MIN_CALLS || start.elapsed().as_secs_f64() < MIN_SECONDS {
        let t0 = Instant::now();
        f();
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let mid = times.len() / 2;
    if times.len() % 2 == 1 {
        times[mid]
    } else {
        (times[mid - 1] + times[mid]) / 2.0
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap_or_else(|_| panic!("not a size: {s}")))
        .collect();
    let sizes = if sizes.is_empty() { vec![256, 512, 1024] } else { sizes };
    let device = Device::wgpu(DeviceKind::DefaultDevice);
    println!("burn {} wgpu matmul (f32)", env!("BURN_VERSION"));
    for n in sizes {
        let a = Tensor::<2>::random([n, n], Distribution::Normal(0.0, 1.0), &device);
        let b = Tensor::<2>::random([n, n], Distribution::Normal(0.0, 1.0), &device);
        device.sync().expect("device sync");
        let seconds = median_seconds(|| {
            let c = a.clone().matmul(b.clone());
            device.sync().expect("device sync");
            drop(c);
        });
        let gflops = 2.0 * (n as f64).powi(3) / seconds / 1e9;
        println!("matmul_f32_{n:<8} {gflops:>10.2} GFLOP/s");
    }
}

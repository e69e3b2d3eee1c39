//! The Rust side of `bench/python_overhead.py`: the workloads that script times from Python,
//! called from Rust, timed with the same rule (`bench/timing.py`: 3 warm-up calls, then
//! repeat until >= 0.5 s and >= 5 calls, the median). Prints one JSON object of seconds per
//! call:
//!
//! ```sh
//! cargo run --release -p rnn-python --example rust_timing
//! ```

use std::time::Instant;

use rnn_core::{DType, Device, Result, Tensor};
use rnn_nn::optim::{Adam, AdamConfig, Optimizer};
use rnn_nn::{cross_entropy, Linear, Module, VarBuilder};

/// Shapes shared with `bench/python_overhead.py`.
const ADDS: usize = 1000;
const MLP: (usize, usize, usize, usize) = (32, 64, 128, 10); // batch, in, hidden, classes
const MATMUL: usize = 1024;

/// The median seconds of `f`, by `bench/timing.py`'s rule.
fn time_call(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 5 || start.elapsed().as_secs_f64() < 0.5 {
        let t0 = Instant::now();
        f()?;
        times.push(t0.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let mid = times.len() / 2;
    Ok(if times.len() % 2 == 1 { times[mid] } else { (times[mid - 1] + times[mid]) / 2.0 })
}

/// `ADDS` adds of two 16-element tensors.
fn add16() -> Result<f64> {
    let a = Tensor::randn(0.0, 1.0, 16, DType::F32, Device::Cpu)?;
    let b = Tensor::randn(0.0, 1.0, 16, DType::F32, Device::Cpu)?;
    time_call(|| {
        for _ in 0..ADDS {
            std::hint::black_box(a.add(&b)?);
        }
        Ok(())
    })
}

/// One Adam training step of the MLP in -> hidden -> ReLU -> classes with cross entropy.
fn mlp_step() -> Result<f64> {
    let (batch, inputs, hidden, classes) = MLP;
    let mut vb = VarBuilder::cpu(0);
    let (l1, l2) = (Linear::new(inputs, hidden, &mut vb)?, Linear::new(hidden, classes, &mut vb)?);
    let mut params = l1.parameters();
    params.extend(l2.parameters());
    let mut opt = Adam::new(params, AdamConfig::with_lr(1e-3))?;
    let x = Tensor::randn(0.0, 1.0, (batch, inputs), DType::F32, Device::Cpu)?;
    let y = Tensor::from_vec((0..batch as i64).map(|i| i % classes as i64).collect(), batch, Device::Cpu)?;
    time_call(|| {
        let loss = cross_entropy(&l2.forward(&l1.forward(&x)?.relu()?)?, &y)?;
        opt.step(&loss.backward()?)
    })
}

fn matmul() -> Result<f64> {
    let a = Tensor::randn(0.0, 1.0, (MATMUL, MATMUL), DType::F32, Device::Cpu)?;
    let b = Tensor::randn(0.0, 1.0, (MATMUL, MATMUL), DType::F32, Device::Cpu)?;
    time_call(|| a.matmul(&b).map(|_| ()))
}

fn main() -> Result<()> {
    println!("{{\"add16_x1000\": {:?}, \"mlp_step\": {:?}, \"matmul_1024\": {:?}}}", add16()?, mlp_step()?, matmul()?);
    Ok(())
}

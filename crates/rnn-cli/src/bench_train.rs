//! `rnn bench train`: epoch time of the `rnn train` models through the `Network` API (the
//! whole loop: batching, forward, loss, backward, Adam), on random MNIST-shaped data.
//! `bench/train_bench.py` runs the same models, batches and optimizer in PyTorch; so does it
//! for a ResNet-8 on random CIFAR-shaped data (`bench_resnet.rs`, a plain training loop).
//! Then one AdamW step over many parameters on the same device, in GB/s of the 28 bytes per
//! parameter it moves, against a copy of those bytes (`memcpy` on the CPU, a device-to-device
//! copy on a GPU); `bench/gpu_bench.py --device cpu|cuda` has the PyTorch twin.

use std::io::Write;
use std::time::Instant;

use rnn::{DType, Device, Tensor, TrainingConfig};

use crate::bench_cpu::Record;
use crate::bench_engine::{self, ADAM_BYTES_PER_PARAM};
use crate::bench_resnet;
use crate::timing::TimingConfig;
use crate::train::{build_model, shape_inputs, ModelKind};
use crate::CliResult;

pub const BATCH_SIZE: usize = 128;

/// Samples per epoch and epochs per model (the best epoch counts; the first is warm-up
/// for both sides).
#[derive(Clone, Copy, Debug)]
pub struct TrainSizes {
    pub mlp_samples: usize,
    pub cnn_samples: usize,
    pub resnet_samples: usize,
    pub epochs: usize,
    /// Parameters of the AdamW step.
    pub adam_params: usize,
    pub timing: TimingConfig,
}

impl TrainSizes {
    pub const FULL: TrainSizes = TrainSizes {
        mlp_samples: 60_000,
        cnn_samples: 10_000,
        resnet_samples: 2_560,
        epochs: 3,
        adam_params: 10_000_000,
        timing: TimingConfig::FULL,
    };
    pub const QUICK: TrainSizes = TrainSizes {
        mlp_samples: 2_048,
        cnn_samples: 512,
        resnet_samples: 256,
        epochs: 2,
        // The engine figure compared across builds keeps its size.
        adam_params: 10_000_000,
        timing: TimingConfig::QUICK,
    };
}

/// Writes the table's header; gives the thread count.
fn header(sizes: TrainSizes, device: Device, out: &mut dyn Write) -> CliResult<usize> {
    let threads = rayon::current_num_threads();
    writeln!(out, "device {device}, {threads} threads, batch {BATCH_SIZE}, Adam, best of {} epochs", sizes.epochs)?;
    writeln!(out, "{:<28} {:>10} {:>12} {:>12}", "workload", "samples", "epoch ms", "samples/s")?;
    Ok(threads)
}

/// Prints one workload's line and gives its record.
fn epoch_record(out: &mut dyn Write, threads: usize, name: String, n: usize, seconds: f64) -> CliResult<Record> {
    writeln!(out, "{name:<28} {n:>10} {:>12.1} {:>12.0}", seconds * 1e3, n as f64 / seconds)?;
    Ok(Record { suite: "train", name, metric: "ms", value: seconds * 1e3, higher_is_better: false, threads })
}

pub fn run(sizes: TrainSizes, device: Device, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let threads = header(sizes, device, out)?;
    let mut records = Vec::new();
    let (mlp_n, cnn_n) = (sizes.mlp_samples, sizes.cnn_samples);
    let workloads = [
        (ModelKind::Mlp, mlp_n, format!("train_mlp_784_512_256_10_n{mlp_n}")),
        (ModelKind::Cnn, cnn_n, format!("train_cnn_16_32_n{cnn_n}")),
    ];
    for (kind, n, name) in workloads {
        records.push(epoch_record(out, threads, name, n, best_epoch_seconds(kind, n, sizes.epochs, device)?)?);
    }
    records.push(resnet_record(sizes, device, threads, out)?);
    records.extend(adamw_records(sizes, device, out)?);
    Ok(records)
}

/// The ResNet-8 workload alone (`rnn bench train --resnet-only`).
pub fn run_resnet(sizes: TrainSizes, device: Device, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let threads = header(sizes, device, out)?;
    Ok(vec![resnet_record(sizes, device, threads, out)?])
}

fn resnet_record(sizes: TrainSizes, device: Device, threads: usize, out: &mut dyn Write) -> CliResult<Record> {
    let n = sizes.resnet_samples;
    let seconds = bench_resnet::best_epoch_seconds(n, BATCH_SIZE, sizes.epochs, device)?;
    epoch_record(out, threads, format!("train_resnet8_cifar_n{n}"), n, seconds)
}

/// The AdamW step's GB/s and its copy reference's, printed as one line.
fn adamw_records(sizes: TrainSizes, device: Device, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let n = sizes.adam_params;
    let bytes = (ADAM_BYTES_PER_PARAM * n) as f64;
    let step = bench_engine::adamw_step_seconds(sizes.timing, device, n)?;
    let copy = bench_engine::copy_seconds(sizes.timing, device, ADAM_BYTES_PER_PARAM * n / 2)?;
    let (name, reference) =
        (format!("adamw_{}M", n / 1_000_000), if device.is_cpu() { "memcpy" } else { "device copy" });
    writeln!(
        out,
        "{name:<28} {:>8.1} ms {:>7.2} GB/s; {reference} of the same {} MB: {:.1} ms, {:.2} GB/s",
        step * 1e3,
        bytes / step / 1e9,
        ADAM_BYTES_PER_PARAM * n / 1_000_000,
        copy * 1e3,
        bytes / copy / 1e9
    )?;
    let threads = rayon::current_num_threads();
    let record = |name: String, value: f64| Record {
        suite: "train",
        name,
        metric: "GB/s",
        value,
        higher_is_better: true,
        threads,
    };
    Ok(vec![record(name.clone(), bytes / step / 1e9), record(format!("{reference}:{name}"), bytes / copy / 1e9)])
}

/// Trains `kind` on `n` random samples for `epochs` epochs and returns the fastest epoch.
fn best_epoch_seconds(kind: ModelKind, n: usize, epochs: usize, device: Device) -> CliResult<f64> {
    rnn::manual_seed(7);
    let x = Tensor::rand(0.0, 1.0, (n, 784), DType::F32, Device::Cpu)?;
    let labels = Tensor::rand(0.0, 10.0, n, DType::F32, Device::Cpu)?.to_dtype(DType::U32)?;
    let x = shape_inputs(&x, kind)?;
    let mut net = build_model(kind, 1)?;
    let config = TrainingConfig {
        batch_size: BATCH_SIZE,
        max_epochs: epochs,
        learning_rate: 1e-3,
        verbose: false,
        device: Some(device),
        ..TrainingConfig::default()
    };
    let started = Instant::now();
    let history = net.train(&x, &labels, &config)?;
    let best = history.epoch_times.iter().copied().fold(f64::INFINITY, f64::min);
    if !best.is_finite() {
        return Err(format!("no epoch completed in {:.1}s", started.elapsed().as_secs_f64()).into());
    }
    Ok(best)
}

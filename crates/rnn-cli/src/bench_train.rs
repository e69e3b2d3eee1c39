//! `rnn bench train`: epoch time of the `rnn train` models through the `Network` API (the
//! whole loop: batching, forward, loss, backward, Adam), on random MNIST-shaped data.
//! `bench/train_bench.py` runs the same models, batches and optimizer in PyTorch.

use std::io::Write;
use std::time::Instant;

use rnn::{DType, Device, Tensor, TrainingConfig};

use crate::bench_cpu::Record;
use crate::train::{build_model, shape_inputs, ModelKind};
use crate::CliResult;

pub const BATCH_SIZE: usize = 128;

/// Samples per epoch and epochs per model (the best epoch counts; the first is warm-up
/// for both sides).
#[derive(Clone, Copy, Debug)]
pub struct TrainSizes {
    pub mlp_samples: usize,
    pub cnn_samples: usize,
    pub epochs: usize,
}

impl TrainSizes {
    pub const FULL: TrainSizes = TrainSizes { mlp_samples: 60_000, cnn_samples: 10_000, epochs: 3 };
    pub const QUICK: TrainSizes = TrainSizes { mlp_samples: 2_048, cnn_samples: 512, epochs: 2 };
}

pub fn run(sizes: TrainSizes, device: Device, out: &mut dyn Write) -> CliResult<Vec<Record>> {
    let threads = rayon::current_num_threads();
    writeln!(out, "device {device}, {threads} threads, batch {BATCH_SIZE}, Adam, best of {} epochs", sizes.epochs)?;
    writeln!(out, "{:<28} {:>10} {:>12} {:>12}", "workload", "samples", "epoch ms", "samples/s")?;
    let mut records = Vec::new();
    for (kind, n) in [(ModelKind::Mlp, sizes.mlp_samples), (ModelKind::Cnn, sizes.cnn_samples)] {
        let seconds = best_epoch_seconds(kind, n, sizes.epochs, device)?;
        let name = match kind {
            ModelKind::Mlp => format!("train_mlp_784_512_256_10_n{n}"),
            ModelKind::Cnn => format!("train_cnn_16_32_n{n}"),
        };
        writeln!(out, "{name:<28} {n:>10} {:>12.1} {:>12.0}", seconds * 1e3, n as f64 / seconds)?;
        let record =
            Record { suite: "train", name, metric: "ms", value: seconds * 1e3, higher_is_better: false, threads };
        records.push(record);
    }
    Ok(records)
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

//! Trains the same MLP on the best device and on the CPU and compares them: on a machine
//! with a GPU (and a build with `--features cuda` or `--features wgpu`) the first run uses
//! it; elsewhere both runs are on the CPU and the example says so.
//!
//!     cargo run --release --example real_gpu_neural_network [--features cuda]

use rnn::train::data::synthetic_digits;
use rnn::{ActivationFunction, Device, GpuManager, LayerBuilder, LossFunction, Network, Result, TrainingConfig};

fn build() -> Result<Network> {
    Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(512).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(256).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()
}

// Written the way the GPU guide writes it: a default config, then field by field.
#[allow(clippy::field_reassign_with_default)]
fn main() -> Result<()> {
    let manager = GpuManager::new();
    match manager.default_device() {
        Some(gpu) => println!("GPU: {} ({:?})", gpu.name, gpu.device_type),
        None => println!("no GPU available to this build: both runs use the CPU"),
    }
    let data = synthetic_digits(8_000, 3)?;
    let (train, test) = data.split_at(6_000)?;

    // GPU training (falls back to the CPU when there is none)
    let mut gpu_config = TrainingConfig::default();
    gpu_config.use_gpu = true;
    gpu_config.prefer_gpu = true;
    gpu_config.max_epochs = 3;
    gpu_config.batch_size = 128;
    let mut network = build()?;
    let gpu_history = network.train(&train.inputs, &train.labels, &gpu_config)?;
    let gpu_eval = network.evaluate(&test.inputs, &test.labels)?;
    report(network.device(), &gpu_history, gpu_eval);

    // CPU training
    let mut cpu_config = gpu_config.clone();
    cpu_config.use_gpu = false;
    let mut network = build()?;
    let cpu_history = network.train(&train.inputs, &train.labels, &cpu_config)?;
    let cpu_eval = network.evaluate(&test.inputs, &test.labels)?;
    report(Device::Cpu, &cpu_history, cpu_eval);
    Ok(())
}

fn report(device: Device, history: &rnn::History, eval: rnn::Evaluation) {
    let rate = history.samples_per_sec.iter().copied().fold(0.0, f64::max);
    let acc = eval.accuracy.unwrap_or(f64::NAN) * 100.0;
    println!("{device}: test accuracy {acc:.2}%, best epoch {rate:.0} samples/s");
}

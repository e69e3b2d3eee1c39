//! The "Complete Training Example" of the GPU guide: an MLP trained on MNIST on the best
//! device. `load_mnist_data` reads the IDX files from `$MNIST_DIR` (default `data/mnist`,
//! `train-*` files, or `t10k-*` files alone); without them it falls back to the built-in
//! drawn digits and says so.
//!
//!     MNIST_DIR=/path/to/mnist cargo run --release --example complete_training

use rnn::train::data::{load_mnist, synthetic_digits, MnistSplit};
use rnn::{gpu::*, *};

// Written the way the GPU guide writes it: a default config, then field by field.
#[allow(clippy::field_reassign_with_default)]
fn main() -> Result<()> {
    // Initialize GPU
    let gpu_manager = GpuManager::new();
    println!("Available devices: {}", gpu_manager.devices().len());

    // Create training data
    let (train_data, train_labels) = load_mnist_data()?;

    // Build network
    let mut network = Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(512).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(256).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()?;

    // Configure GPU training
    let mut config = TrainingConfig::default();
    config.max_epochs = epochs_from_env(50);
    config.batch_size = 128;
    config.validation_split = 0.2;
    config.verbose = true;

    // Train with GPU acceleration
    let start = std::time::Instant::now();
    let history = network.train(&train_data, &train_labels, &config)?;
    let training_time = start.elapsed();

    println!("Training completed in {:?}", training_time);
    println!(
        "Final accuracy: {:.2}%",
        history.val_metrics.get("accuracy").and_then(|acc| acc.last()).unwrap_or(&0.0) * 100.0
    );
    Ok(())
}

/// MNIST images as `[n, 784]` f32 in [0, 1] and labels as `[n]` class ids.
fn load_mnist_data() -> Result<(Tensor, Tensor)> {
    let dir = std::env::var("MNIST_DIR").unwrap_or_else(|_| "data/mnist".to_string());
    let data = match load_mnist(&dir, MnistSplit::Train).or_else(|_| load_mnist(&dir, MnistSplit::Test)) {
        Ok(data) => data,
        Err(e) => {
            println!("MNIST not found in {dir} ({e}); using 10,000 built-in drawn digits instead");
            synthetic_digits(10_000, 0)?
        }
    };
    println!("{}: {} samples", data.name, data.len());
    Ok((data.inputs, data.labels))
}

/// `EPOCHS` overrides the example's epoch count (for a quick run).
fn epochs_from_env(default: usize) -> usize {
    std::env::var("EPOCHS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

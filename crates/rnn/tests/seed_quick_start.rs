//! The two Quick Start snippets of the GPU guide our users came from ("Basic GPU Usage" and
//! "Creating GPU-Accelerated Networks"), as close to verbatim as our API allows, run as
//! tests. On a machine without a GPU they report none and train on the CPU; with a GPU they
//! use it.
//!
//! Training runs 2 epochs on 512 random samples instead of 100 epochs on data the guide never
//! defines (`seed_snippets.rs` runs every snippet of the guides with their own numbers).

use ndarray::Array2;
use rnn::{ActivationFunction, Device, GpuManager, GpuTensor, LayerBuilder, LossFunction, Network, TrainingConfig};

#[test]
fn basic_gpu_usage() -> rnn::Result<()> {
    // Create GPU manager and check available devices
    let gpu_manager = GpuManager::new();
    println!("Available GPUs: {}", gpu_manager.devices().len());

    // Get default GPU device
    if let Some(device) = gpu_manager.default_device() {
        println!("Using GPU: {}", device.name);

        // Create GPU context
        let context = gpu_manager.create_context(device.id)?;

        // Transfer data to GPU
        let cpu_data = Array2::zeros((1000, 784));
        let gpu_tensor = GpuTensor::from_cpu(&cpu_data, device.id, context)?;
        assert_eq!(gpu_tensor.device(), device.device, "the tensor lives on the chosen GPU");

        // Transfer results back to CPU
        let result = gpu_tensor.to_cpu(context)?;
        assert_eq!(result, cpu_data.into_dyn());
    } else {
        // No GPU: the manager agrees with the automatic device choice.
        assert!(!GpuManager::is_gpu_available());
        assert_eq!(Device::best()?, Device::Cpu);
        assert!(gpu_manager.create_context(0).is_err(), "no context without a GPU");
    }
    Ok(())
}

#[test]
#[allow(clippy::field_reassign_with_default)] // as the guide writes it
fn gpu_accelerated_network() -> rnn::Result<()> {
    // Create network (will automatically use GPU if available)
    let mut network = Network::with_input_size(784)?
        .add_layer(LayerBuilder::dense(512).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(256).activation(ActivationFunction::ReLU))
        .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
        .loss(LossFunction::CategoricalCrossEntropy)
        .build()?;

    // Configure GPU-accelerated training
    let mut config = TrainingConfig::default();
    config.batch_size = 64; // Larger batches for GPU efficiency
    config.max_epochs = 2;
    config.verbose = false;

    let train_data = rnn::Tensor::rand(0.0, 1.0, (512, 784), rnn::DType::F32, Device::Cpu)?;
    let train_labels = rnn::Tensor::from_vec((0..512u32).map(|i| i % 10).collect(), 512, Device::Cpu)?;

    // Train with automatic GPU acceleration
    let history = network.train(&train_data, &train_labels, &config)?;
    assert_eq!(history.train_loss.len(), 2);
    assert!(history.train_loss.iter().all(|l| l.is_finite()));
    assert_eq!(network.device(), Device::best()?, "trained on the best device");
    assert_eq!(network.device().is_cpu(), !GpuManager::is_gpu_available());
    Ok(())
}

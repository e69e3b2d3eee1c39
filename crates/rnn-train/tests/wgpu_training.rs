//! Training on the wgpu device follows the CPU run: the same seed, data and model give the
//! same per-epoch losses and final weights within f32 tolerance. On a machine without a wgpu
//! adapter the tests say they are skipped (and fail when `RNN_REQUIRE_GPU` requires wgpu).

use rnn_core::{Device, Result};
use rnn_testutil::{max_rel_err, usable, values, wgpu_test_device};
use rnn_train::data::{synthetic_digits, synthetic_digits_with_shape, Dataset, ImageShape};
use rnn_train::{
    ActivationFunction::ReLU, ActivationFunction::Softmax, LayerBuilder, LossFunction, Network, TrainingConfig,
};

/// The wgpu device under test (`RNN_GPU_DEVICE=wgpu:N` picks one), if it can be used.
fn wgpu_device() -> Option<Device> {
    usable(wgpu_test_device())
}

fn config(device: Device, epochs: usize) -> TrainingConfig {
    TrainingConfig { max_epochs: epochs, batch_size: 32, verbose: false, device: Some(device), ..Default::default() }
}

/// Largest |a - b| / (1 + |b|) over all parameters of two networks.
fn max_weight_diff(a: &Network, b: &Network) -> f64 {
    let mut worst = 0.0f64;
    for ((name, x), (_, y)) in a.named_parameters().iter().zip(b.named_parameters()) {
        assert_eq!(x.dims(), y.dims(), "{name}");
        worst = worst.max(max_rel_err(&values(x), &values(&y)));
    }
    worst
}

/// Trains `build()` on the CPU and on `device` and compares losses and weights.
fn compare(build: impl Fn() -> Result<Network>, data: &Dataset, device: Device, epochs: usize) -> Result<()> {
    let (mut cpu, mut gpu) = (build()?, build()?);
    let on_cpu = cpu.train(&data.inputs, &data.labels, &config(Device::Cpu, epochs))?;
    let on_gpu = gpu.train(&data.inputs, &data.labels, &config(device, epochs))?;
    assert_eq!(gpu.device(), device);
    for (g, c) in on_gpu.train_loss.iter().zip(&on_cpu.train_loss) {
        assert!(
            (g - c).abs() <= 1e-4 * (1.0 + c.abs()),
            "losses: {device} {:?} vs cpu {:?}",
            on_gpu.train_loss,
            on_cpu.train_loss
        );
    }
    let diff = max_weight_diff(&gpu, &cpu);
    assert!(diff < 1e-3, "weights differ by {diff} after {epochs} epochs");
    assert!(on_gpu.train_loss.last() < on_gpu.train_loss.first(), "loss did not fall: {:?}", on_gpu.train_loss);
    Ok(())
}

#[test]
fn mlp_steps_on_wgpu_match_the_cpu() -> Result<()> {
    let Some(device) = wgpu_device() else { return Ok(()) };
    let build = || {
        Network::with_input_size(784)?
            .add_layer(LayerBuilder::dense(32).activation(ReLU))
            .add_layer(LayerBuilder::dense(10).activation(Softmax))
            .loss(LossFunction::CategoricalCrossEntropy)
            .seed(7)
            .build()
    };
    compare(build, &synthetic_digits(256, 3)?, device, 3)
}

#[test]
fn cnn_steps_on_wgpu_match_the_cpu() -> Result<()> {
    let Some(device) = wgpu_device() else { return Ok(()) };
    let build = || {
        Network::with_input_shape(&[1, 28, 28])?
            .add_layer(LayerBuilder::conv2d(4, 3).activation(ReLU))
            .add_layer(LayerBuilder::max_pool2d(2))
            .add_layer(LayerBuilder::flatten())
            .add_layer(LayerBuilder::dense(10).activation(Softmax))
            .loss(LossFunction::CategoricalCrossEntropy)
            .seed(11)
            .build()
    };
    compare(build, &synthetic_digits_with_shape(96, 5, ImageShape::Image)?, device, 2)
}

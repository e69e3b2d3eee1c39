//! The optirs-gpu usage, on whatever this machine has: picks the best device (a CUDA GPU, a
//! hardware wgpu adapter, else the CPU) and says which, runs Adam on a 1024 x 512 parameter
//! tensor for a few steps, checks the result against `rnn::nn::optim::Adam` on the CPU, and
//! handles errors the way the seed's example does.
//!
//!     cargo run --release -p rnn --example gpu_optimizer [--features cuda]
//!     RNN_GPU_DEVICE=wgpu:0 cargo run -p rnn --example gpu_optimizer   # a software adapter

use rnn::gpu::error::{GpuError, GpuResult};
use rnn::gpu::{optimizers, DeviceManager, GpuOptimizer, GpuTensor};
use rnn::nn::optim::{Adam, AdamConfig, Optimizer};
use rnn::{Device, GradStore, Tensor};

const SHAPE: [usize; 2] = [1024, 512];
const STEPS: usize = 5;

fn main() -> GpuResult<()> {
    // Initialize the device manager (blocking: nothing here needs `.await`).
    let device_manager = DeviceManager::new()?;
    let device = device_manager.select_best_device()?;
    let others: Vec<String> = device_manager.available_devices().iter().map(|d| d.to_string()).collect();
    println!("Using {device}: {} (available: {})", device_manager.device_name(device), others.join(", "));

    // A GPU-accelerated optimizer (`optimizers::Adam::new(lr)` is `rnn::nn::optim`'s Adam config).
    let mut optimizer = GpuOptimizer::new(device).with_optimizer(optimizers::Adam::new(0.001)).build()?;

    // Parameters (zeros) and a gradient made from host data, both on the device.
    let mut params = optimizer.create_tensor(&SHAPE)?;
    let gradient_data: Vec<f32> = (0..SHAPE[0] * SHAPE[1]).map(|i| ((i % 97) as f32 - 48.0) / 48.0).collect();
    let grads = optimizer.create_tensor_with_data(&SHAPE, &gradient_data)?;

    for _ in 0..STEPS {
        step_with_recovery(&mut optimizer, &mut params, &grads)?;
    }
    let max_diff = max_difference_from_cpu_adam(&params, &gradient_data)?;
    println!("{STEPS} Adam steps on {device}; largest difference from the CPU's Adam: {max_diff:.2e}");
    if max_diff > 1e-5 {
        return Err(GpuError::Msg(format!("the {device} result differs from the CPU's by {max_diff}")));
    }
    Ok(())
}

/// The seed's error handling: on out-of-memory free the allocator's cache and retry once;
/// when the device is gone, say so (a program would rebuild its tensors on the CPU).
fn step_with_recovery(optimizer: &mut GpuOptimizer, params: &mut GpuTensor, grads: &GpuTensor) -> GpuResult<()> {
    match optimizer.step(params, grads) {
        Ok(()) => Ok(()),
        Err(GpuError::OutOfMemory { requested, free, total }) => {
            eprintln!("GPU memory exhausted ({requested} bytes asked, {free} of {total} free): clearing the cache");
            optimizer.clear_cache()?;
            optimizer.step(params, grads)
        }
        Err(GpuError::DeviceNotAvailable(why)) => {
            eprintln!("the device is not available ({why}); rerun with RNN_GPU_DEVICE=cpu to use the CPU");
            Err(GpuError::DeviceNotAvailable(why))
        }
        Err(e) => Err(e),
    }
}

/// The same steps with `rnn::nn::optim::Adam` on the CPU, and the largest difference.
fn max_difference_from_cpu_adam(params: &GpuTensor, gradient_data: &[f32]) -> GpuResult<f32> {
    let reference = Tensor::zeros(SHAPE.to_vec(), rnn::DType::F32, Device::Cpu)?;
    let mut adam = Adam::new(vec![reference.clone()], AdamConfig::with_lr(0.001))?;
    let mut grads = GradStore::new();
    grads.insert(&reference, Tensor::from_slice(gradient_data, SHAPE.to_vec(), Device::Cpu)?);
    for _ in 0..STEPS {
        adam.step(&grads)?;
    }
    let (ours, want) = (params.to_array()?, reference.to_ndarray::<f32>()?);
    Ok(ours.iter().zip(want.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max))
}

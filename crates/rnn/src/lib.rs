//! `rnn`: tensors with autograd on the CPU, CUDA GPUs and wgpu GPUs, plus layers and a
//! Keras-like training API. This facade re-exports the crates users need.
//!
//! ```no_run
//! use rnn::{ActivationFunction, LayerBuilder, LossFunction, Network, TrainingConfig};
//! # fn main() -> rnn::Result<()> {
//! let mut network = Network::with_input_size(784)?
//!     .add_layer(LayerBuilder::dense(128).activation(ActivationFunction::ReLU))
//!     .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
//!     .loss(LossFunction::CategoricalCrossEntropy)
//!     .build()?;
//! let data = rnn::train::data::synthetic_digits(2_000, 1)?;
//! let history = network.train(&data.inputs, &data.labels, &TrainingConfig::default())?;
//! println!("final loss {:?}", history.train_loss.last());
//! # Ok(()) }
//! ```

#[cfg(feature = "opencl")]
compile_error!(
    "rnn has no OpenCL backend: remove the `opencl` feature. AMD, Intel and NVIDIA GPUs run \
     through the `wgpu` feature (Vulkan, Metal, DX12; on by default, also named `gpu`), \
     NVIDIA GPUs also through `cuda`."
);
#[cfg(feature = "rocm")]
compile_error!(
    "rnn has no ROCm backend: remove the `rocm` feature. AMD GPUs run through the `wgpu` \
     feature (Vulkan; on by default, also named `gpu`)."
);

pub mod gpu;

pub use ndarray;
pub use rnn_core::*;
/// Process groups and collectives (all_reduce, broadcast, ...) over threads, MPI and NCCL.
pub use rnn_dist as distributed;
pub use rnn_nn as nn;
pub use rnn_nn::optim::OptimizerConfig;
pub use rnn_train as train;
pub use rnn_train::{
    ActivationFunction, EarlyStopping, Evaluation, History, LayerBuilder, LossFunction, MixedPrecision, Monitor,
    Network, NetworkBuilder, TrainingConfig,
};

pub use gpu::{
    CudaKernels, DataParallelStrategy, DeviceManager, DistributedTraining, GpuContext, GpuDevice, GpuDeviceType,
    GpuKernel, GpuManager, GpuOptimizer, GpuProfiler, GpuTensor, KernelManager, MemoryLayout, MemoryStats,
    MultiGpuOptimizer,
};

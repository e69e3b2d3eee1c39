//! `GpuOptimizer`: an optimizer from `rnn::nn::optim` driven tensor by tensor, as in the
//! optirs-gpu API: `step(&mut params, &grads)` updates one parameter tensor on its device.
//!
//! `step` returns as soon as the update is queued: GPU ops run in order on the device's one
//! stream (CUDA) or queue (wgpu), so the next op that uses `params` sees the new values, and
//! reading them (`to_array`) waits for the kernels. That is why no `.await` is needed, unlike
//! the async API this one follows; errors from bad input (shapes, dtypes, devices) are
//! returned by `step` itself.

use std::collections::HashMap;

use rnn_core::{DType, Device, Error, GradStore, Result, Tensor, TensorId};
use rnn_nn::optim::{Optimizer, OptimizerConfig};

use super::tensor::{GpuTensor, HostElement};

/// Builds a [`GpuOptimizer`]: `GpuOptimizer::new(device).with_optimizer(..).build()`.
#[derive(Clone, Debug)]
pub struct GpuOptimizerBuilder {
    device: Device,
    config: OptimizerConfig,
}

impl GpuOptimizerBuilder {
    /// The optimizer to run (Adam with PyTorch's defaults when not called): an
    /// [`OptimizerConfig`], or one optimizer's own config, as [`super::optimizers`]'
    /// `Adam::new(lr)` returns (`AdamConfig` means Adam; AdamW is `optimizers::AdamW::new(lr)`
    /// or `OptimizerConfig::adamw(lr)`).
    pub fn with_optimizer(mut self, config: impl Into<OptimizerConfig>) -> Self {
        self.config = config.into();
        self
    }

    /// Checks the settings and the device.
    pub fn build(self) -> Result<GpuOptimizer> {
        self.config.validate()?;
        self.device.check_available()?;
        Ok(GpuOptimizer { device: self.device, config: self.config, states: HashMap::new() })
    }
}

/// Updates parameter tensors on one device with an optimizer of `rnn::nn::optim`, keeping
/// its state (moments, step count) per parameter tensor, keyed by the tensor's id. Values
/// are those of the same optimizer in `rnn::nn::optim` (and so PyTorch's) on the same data.
///
/// ```
/// use rnn::gpu::optimizers::Adam;
/// use rnn::gpu::{DeviceManager, GpuOptimizer};
/// # fn main() -> rnn::Result<()> {
/// let device = DeviceManager::new()?.select_best_device()?;
/// let mut optimizer = GpuOptimizer::new(device).with_optimizer(Adam::new(1e-3)).build()?;
/// let mut params = optimizer.create_tensor(&[64, 32])?;
/// let grads = optimizer.create_tensor_with_data(&[64, 32], &vec![0.5f32; 64 * 32])?;
/// optimizer.step(&mut params, &grads)?; // queued; reading waits for it
/// let values = params.to_array()?;
/// assert!((values[[0, 0]] + 1e-3).abs() < 1e-6); // Adam's first step moves by lr
/// # Ok(()) }
/// ```
pub struct GpuOptimizer {
    device: Device,
    config: OptimizerConfig,
    /// One optimizer per parameter tensor, built at its first `step`.
    states: HashMap<TensorId, Box<dyn Optimizer>>,
}

impl GpuOptimizer {
    /// Starts building an optimizer whose tensors live on `device` (any device: a GPU, or
    /// the CPU where there is none).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(device: Device) -> GpuOptimizerBuilder {
        GpuOptimizerBuilder { device, config: OptimizerConfig::default() }
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn config(&self) -> &OptimizerConfig {
        &self.config
    }

    /// An f32 tensor of zeros of `shape` on the optimizer's device (e.g. parameters).
    pub fn create_tensor(&self, shape: &[usize]) -> Result<GpuTensor> {
        Ok(GpuTensor::on_device(Tensor::zeros(shape.to_vec(), DType::F32, self.device)?))
    }

    /// A 1-D f32 tensor holding `data`, copied to the optimizer's device.
    pub fn create_tensor_from_slice<T: HostElement>(&self, data: &[T]) -> Result<GpuTensor> {
        self.create_tensor_with_data(&[data.len()], data)
    }

    /// An f32 tensor of `shape` holding `data` (row-major), copied to the optimizer's device.
    pub fn create_tensor_with_data<T: HostElement>(&self, shape: &[usize], data: &[T]) -> Result<GpuTensor> {
        let values: Vec<f32> = data.iter().map(|x| x.to_f32()).collect();
        Ok(GpuTensor::on_device(Tensor::from_vec(values, shape.to_vec(), self.device)?))
    }

    /// One update of `params` from `grads`, queued on the device. Errors: `params` not on
    /// the optimizer's device or not a float tensor; `grads` of another shape, dtype or
    /// device than `params`; `params` a view rather than a whole tensor.
    pub fn step(&mut self, params: &mut GpuTensor, grads: &GpuTensor) -> Result<()> {
        let (p, g) = (params.tensor(), grads.tensor());
        self.check(p, g)?;
        let optimizer = match self.states.entry(p.id()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(self.config.build(vec![p.clone()])?),
        };
        let mut store = GradStore::new();
        store.insert(p, g.clone());
        optimizer.step(&store)
    }

    fn check(&self, p: &Tensor, g: &Tensor) -> Result<()> {
        const OP: &str = "GpuOptimizer::step";
        if p.device() != self.device {
            return Err(Error::DeviceMismatch { op: OP, lhs: self.device, rhs: p.device() });
        }
        if !p.dtype().is_float() {
            return Err(Error::UnsupportedDType { op: OP, dtype: p.dtype(), hint: ": parameters must be floats" });
        }
        rnn_nn::optim::check_grad(OP, p, g)
    }

    /// The learning rate the next `step` uses.
    pub fn learning_rate(&self) -> f64 {
        self.config.learning_rate()
    }

    /// Sets the learning rate of every parameter's next update.
    pub fn set_learning_rate(&mut self, lr: f64) {
        self.config = self.config.clone().with_learning_rate(lr);
        self.states.values_mut().for_each(|opt| opt.set_learning_rate(lr));
    }

    /// How many parameter tensors have optimizer state.
    pub fn tracked_parameters(&self) -> usize {
        self.states.len()
    }

    /// Drops the state kept for `params` (its next `step` starts afresh, as a new
    /// parameter's first does). Returns whether there was any.
    pub fn forget(&mut self, params: &GpuTensor) -> bool {
        self.states.remove(&params.tensor().id()).is_some()
    }

    /// Frees the device memory the allocator caches for reuse (what to try after
    /// `Error::OutOfMemory`); the optimizer state is kept. A no-op on the CPU.
    pub fn clear_cache(&self) -> Result<()> {
        rnn_core::gpu_memory::empty_cache(self.device)
    }

    /// Waits until every queued update has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.device.synchronize()
    }
}

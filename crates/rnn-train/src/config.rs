//! `TrainingConfig`: everything `Network::train` needs to know besides the data.

use rnn_core::{DType, Device, Error, Result};
use rnn_nn::optim::{LrSchedule, OptimizerConfig};

use crate::distributed::DataParallel;

/// What early stopping watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Monitor {
    /// Validation loss (training loss when there is no validation set); lower is better.
    ValLoss,
    /// Validation accuracy (training accuracy without a validation set); higher is better.
    ValAccuracy,
}

/// Stop when the monitored value has not improved by `min_delta` for `patience` epochs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EarlyStopping {
    pub monitor: Monitor,
    pub patience: usize,
    pub min_delta: f64,
    /// Put back the weights of the best epoch when training ends.
    pub restore_best_weights: bool,
}

impl Default for EarlyStopping {
    fn default() -> Self {
        EarlyStopping { monitor: Monitor::ValLoss, patience: 5, min_delta: 0.0, restore_best_weights: true }
    }
}

/// What `Network::train` does when a training step's loss is NaN or infinite.
///
/// On the CPU every step's loss is checked before its update. On a GPU, `Stop` checks the
/// loss where it is read back anyway (each progress update, or once per epoch with
/// `verbose: false`), so a training step still makes no host sync; the error then names the
/// steps since the previous read. `SkipStep` must know before each update, so on a GPU it
/// reads every step's loss (one host sync per step, as PyTorch's `GradScaler` does).
/// Either way the weights are checked at the end of every epoch, and `train` never returns
/// `Ok` with a NaN or infinite weight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NonFinitePolicy {
    /// Stop with an error naming the epoch and step, and put back the weights of the end of
    /// the last finite epoch (or those `train` was called with); the optimizer state is
    /// reset, as its moments may hold the non-finite values. Keras' `TerminateOnNaN`.
    #[default]
    Stop,
    /// Skip the update of that step (its loss is left out of the epoch's mean), as
    /// PyTorch's `GradScaler` skips steps with non-finite gradients. An epoch whose every
    /// step is skipped, or whose weights still end non-finite, is an error as with `Stop`.
    SkipStep,
}

/// Mixed-precision training: the forward pass runs under `rnn_core::autocast` in a 16-bit
/// dtype (matmuls, linear layers, convolutions and attention in it; softmax, norms, losses
/// and reductions in f32) while the weights, their gradients and the optimizer stay f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixedPrecision {
    /// bfloat16: f32's range, so no loss scaling.
    Bf16,
    /// float16: small gradients would underflow, so the loss is scaled dynamically
    /// (`rnn_nn::optim::GradScaler` with PyTorch's defaults).
    F16,
}

impl MixedPrecision {
    /// The dtype the autocast regions use.
    pub fn dtype(self) -> DType {
        match self {
            MixedPrecision::Bf16 => DType::BF16,
            MixedPrecision::F16 => DType::F16,
        }
    }

    /// Whether training needs a `GradScaler` (f16 only).
    pub fn needs_loss_scaling(self) -> bool {
        self == MixedPrecision::F16
    }

    /// The precision named `f32` (None), `bf16` or `f16`, as the command line takes it.
    pub fn parse(name: &str) -> Result<Option<Self>> {
        match name.to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(None),
            "bf16" | "bfloat16" => Ok(Some(MixedPrecision::Bf16)),
            "f16" | "fp16" | "float16" | "half" => Ok(Some(MixedPrecision::F16)),
            _ => Err(Error::invalid("precision", format!("unknown precision {name:?}: expected f32, bf16 or f16"))),
        }
    }

    /// `bf16` or `f16`.
    pub fn name(self) -> &'static str {
        self.dtype().as_str()
    }
}

/// How to train. `Default` gives Adam at 1e-3, batches of 32, 10 epochs, shuffling, no
/// validation split, progress output, and the best available device.
///
/// Device choice: `device` wins when set. Otherwise `use_gpu = false` means the CPU;
/// `use_gpu && prefer_gpu` means `Device::best()` (CUDA, then a real wgpu GPU, then the CPU,
/// or what `RNN_GPU_DEVICE` names); `use_gpu && !prefer_gpu` uses a GPU only when
/// `RNN_GPU_DEVICE` names one.
#[derive(Clone, Debug)]
pub struct TrainingConfig {
    pub batch_size: usize,
    pub max_epochs: usize,
    /// The optimizer's learning rate (overrides the one inside `optimizer`).
    pub learning_rate: f64,
    pub optimizer: OptimizerConfig,
    /// Fraction of the samples (the last ones, as in Keras) held out for validation.
    pub validation_split: f64,
    pub shuffle: bool,
    /// Seeds shuffling and dropout, so two runs with the same seed are identical.
    pub seed: u64,
    /// Progress bar on a terminal, one line per epoch otherwise; nothing when false.
    pub verbose: bool,
    pub use_gpu: bool,
    pub prefer_gpu: bool,
    pub device: Option<Device>,
    pub early_stopping: Option<EarlyStopping>,
    /// Learning-rate schedule, stepped once per epoch.
    pub lr_schedule: Option<LrSchedule>,
    /// Clip the global gradient norm to this value before each step.
    pub clip_grad_norm: Option<f64>,
    /// What to do when a step's loss is NaN or infinite (default: stop with an error).
    pub on_non_finite: NonFinitePolicy,
    /// Train as one rank of a data-parallel group (see [`crate::distributed`]): each rank
    /// calls `train` with the same network, data and settings; `batch_size` is per rank.
    pub distributed: Option<DataParallel>,
    /// Train in bf16 or f16 with f32 master weights (see [`MixedPrecision`]); `None`: f32.
    pub mixed_precision: Option<MixedPrecision>,
}

impl Default for TrainingConfig {
    fn default() -> Self {
        TrainingConfig {
            batch_size: 32,
            max_epochs: 10,
            learning_rate: 1e-3,
            optimizer: OptimizerConfig::default(),
            validation_split: 0.0,
            shuffle: true,
            seed: 42,
            verbose: true,
            use_gpu: true,
            prefer_gpu: true,
            device: None,
            early_stopping: None,
            lr_schedule: None,
            clip_grad_norm: None,
            on_non_finite: NonFinitePolicy::Stop,
            distributed: None,
            mixed_precision: None,
        }
    }
}

impl TrainingConfig {
    /// Checks every field; the message names the field and the allowed range.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::invalid("TrainingConfig", msg));
        if self.batch_size == 0 {
            return bad("batch_size must be at least 1".into());
        }
        if self.max_epochs == 0 {
            return bad("max_epochs must be at least 1".into());
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return bad(format!("learning_rate must be a positive number, got {}", self.learning_rate));
        }
        if !(0.0..1.0).contains(&self.validation_split) {
            return bad(format!("validation_split must be in [0, 1), got {}", self.validation_split));
        }
        if let Some(c) = self.clip_grad_norm {
            if c.is_nan() || c <= 0.0 {
                return bad(format!("clip_grad_norm must be positive, got {c}"));
            }
        }
        if self.distributed.as_ref().is_some_and(|d| d.bucket_bytes == 0) {
            return bad("distributed.bucket_bytes must be at least 1".into());
        }
        Ok(())
    }

    /// The device training runs on (see the type's documentation).
    pub fn pick_device(&self) -> Result<Device> {
        if let Some(device) = self.device {
            device.check_available()?;
            return Ok(device);
        }
        match (self.use_gpu, self.prefer_gpu) {
            (false, _) => Ok(Device::Cpu),
            (true, true) => Device::best(),
            (true, false) => match Device::env_request() {
                Some(_) => Device::best(),
                None => Ok(Device::Cpu),
            },
        }
    }
}

//! Fused optimizer updates: one pass over parameter, gradient and optimizer state, in place,
//! for many parameters at once, instead of about ten elementwise tensor ops per parameter that
//! each allocate their result.
//!
//! `step` updates every parameter of a group (one device, one dtype, one `UpdateRule`):
//! - CPU (f32, f64): a loop over each parameter that writes the parameter and its states in
//!   their own buffers (no allocation), on the thread pool for large tensors (`cpu.rs`);
//! - CUDA (f32, f64): ONE launch for the whole group, the kernel reading the buffers'
//!   addresses from a table (multi-tensor apply, `gpu/optim.rs` and `rnn-kernels/cuda/optim.cu`);
//! - wgpu (f32): one dispatch per parameter (`rnn-kernels/wgsl/optim.wgsl`).
//!
//! The formulas follow PyTorch's single-tensor `torch.optim` code operation for operation, so
//! that the fused updates and the tensor-op path of `rnn-nn` give the same results up to
//! rounding. `can_fuse` says whether one parameter's update can run here (contiguous
//! operands of one shape, dtype and device, no two sharing storage, a dtype the device has a
//! kernel for); callers run their tensor-op path for the others, which also reports bad input.

pub mod bench;
mod cpu;

use std::collections::HashSet;

use crate::backend_stubs::{CudaStorage, WgpuStorage};
use crate::{DType, Device, Error, Result, Tensor};

/// Hyper-parameters of one SGD update (`torch.optim.SGD`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdHyper {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    /// The momentum buffer's first update: it is set to the gradient rather than decayed.
    pub first_step: bool,
}

/// Hyper-parameters of one Adam / AdamW update (`torch.optim.Adam`, `AdamW`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamHyper {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// AdamW: decay the parameter (`p *= 1 - lr * wd`) instead of adding `wd * p` to the gradient.
    pub decoupled: bool,
    /// Keep the running maximum of the second moment (a third state).
    pub amsgrad: bool,
    /// The parameter's update count, starting at 1 (for the bias corrections).
    pub step: u64,
}

impl AdamHyper {
    /// `lr / (1 - beta1^step)`: the learning rate with the first moment's bias correction.
    pub fn step_size(&self) -> f64 {
        self.lr / (1.0 - self.beta1.powi(self.step_exponent()))
    }

    /// `sqrt(1 - beta2^step)`: the second moment's bias correction, on its square root.
    pub fn bias_correction2_sqrt(&self) -> f64 {
        (1.0 - self.beta2.powi(self.step_exponent())).sqrt()
    }

    /// The step as an exponent (saturating: beta^step is 0 long before it matters).
    fn step_exponent(&self) -> i32 {
        i32::try_from(self.step).unwrap_or(i32::MAX)
    }
}

/// Hyper-parameters of one RMSprop update (`torch.optim.RMSprop`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsPropHyper {
    pub lr: f64,
    pub alpha: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub centered: bool,
}

/// Hyper-parameters of one Adagrad update (`torch.optim.Adagrad`); `lr` is the decayed rate
/// `lr / (1 + (step - 1) * lr_decay)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdagradHyper {
    pub lr: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// One optimizer update with its hyper-parameters. Each rule keeps up to three states per
/// parameter, in fixed slots (`ParamUpdate::states`):
/// - SGD: the momentum buffer (when `momentum > 0`), -, -;
/// - Adam / AdamW: `m`, `v`, the running maximum of `v` (AMSGrad);
/// - RMSprop: the squared-gradient average, the gradient average (centered), the momentum
///   buffer (when `momentum > 0`);
/// - Adagrad: the sum of squared gradients, -, -.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UpdateRule {
    Sgd(SgdHyper),
    Adam(AdamHyper),
    RmsProp(RmsPropHyper),
    Adagrad(AdagradHyper),
}

impl UpdateRule {
    /// Which state slots the rule uses.
    pub fn states(&self) -> [bool; 3] {
        match self {
            UpdateRule::Sgd(h) => [h.momentum != 0.0, false, false],
            UpdateRule::Adam(h) => [true, true, h.amsgrad],
            UpdateRule::RmsProp(h) => [true, h.centered, h.momentum > 0.0],
            UpdateRule::Adagrad(_) => [true, false, false],
        }
    }

    /// The rule's name in kernels and variant labels.
    pub(crate) fn kernel_name(&self) -> &'static str {
        match self {
            UpdateRule::Sgd(_) => "sgd",
            UpdateRule::Adam(_) => "adam",
            UpdateRule::RmsProp(_) => "rmsprop",
            UpdateRule::Adagrad(_) => "adagrad",
        }
    }
}

/// One parameter's update: the parameter, its gradient and its states (owned by the
/// optimizer, updated in place), in the slots `UpdateRule` lists.
#[derive(Clone, Copy, Debug)]
pub struct ParamUpdate<'a> {
    pub param: &'a Tensor,
    pub grad: &'a Tensor,
    pub states: [Option<&'a Tensor>; 3],
}

impl<'a> ParamUpdate<'a> {
    /// The parameter, the gradient and the present states.
    fn operands(&self) -> impl Iterator<Item = &'a Tensor> + '_ {
        [Some(self.param), Some(self.grad)].into_iter().chain(self.states).flatten()
    }

    /// The parameter and the present states: the buffers the update writes.
    fn written(&self) -> impl Iterator<Item = &'a Tensor> + '_ {
        [Some(self.param)].into_iter().chain(self.states).flatten()
    }
}

/// Whether the fused update runs `update` here: `rule`'s states present (and no others),
/// every operand contiguous with the parameter's shape, dtype and device, no two sharing
/// storage, and a fused kernel for the dtype on the device (CPU and CUDA: f32, f64; wgpu: f32).
pub fn can_fuse(rule: &UpdateRule, update: &ParamUpdate) -> bool {
    let p = update.param;
    let slots_match = update.states.iter().zip(rule.states()).all(|(s, used)| s.is_some() == used);
    let same =
        |t: &Tensor| t.device() == p.device() && t.dtype() == p.dtype() && t.is_contiguous() && t.shape() == p.shape();
    let operands: Vec<&Tensor> = update.operands().collect();
    let distinct = operands.iter().enumerate().all(|(i, a)| operands[i + 1..].iter().all(|b| !a.same_storage(b)));
    slots_match && operands.iter().all(|t| same(t)) && distinct && has_kernel(p.device(), p.dtype())
}

fn has_kernel(device: Device, dtype: DType) -> bool {
    match device {
        Device::Cpu | Device::Cuda(_) => matches!(dtype, DType::F32 | DType::F64),
        Device::Wgpu(_) => dtype == DType::F32,
    }
}

/// Updates every parameter of `updates` in place with `rule`, all in one pass (one launch on
/// CUDA). Returns `Ok(false)`, touching nothing, when the group cannot be fused: an update
/// that `can_fuse` rejects, parameters on several devices or of several dtypes, or a buffer
/// shared between two updates (a gradient that is another parameter: one launch would read
/// it while writing it). An empty group is done at once.
pub fn step(rule: &UpdateRule, updates: &[ParamUpdate]) -> Result<bool> {
    let Some(first) = updates.first() else { return Ok(true) };
    let (device, dtype) = (first.param.device(), first.param.dtype());
    let uniform = updates.iter().all(|u| u.param.device() == device && u.param.dtype() == dtype);
    if !uniform || !updates.iter().all(|u| can_fuse(rule, u)) || shares_storage(updates, device == Device::Cpu) {
        return Ok(false);
    }
    match device {
        Device::Cpu => cpu::step(rule, updates, dtype)?,
        Device::Cuda(_) => crate::gpu::optim::step::<CudaStorage>(rule, updates)?,
        Device::Wgpu(_) => crate::gpu::optim::step::<WgpuStorage>(rule, updates)?,
    }
    Ok(true)
}

/// Whether two updates of the group share a buffer that one of them writes (within one
/// update `can_fuse` checked). Gradients, which an update only reads, may share one buffer
/// on the CPU, whose loop locks each update's buffers in turn: data-parallel gradients are
/// views of one bucket. A GPU launch holds every buffer of the group at once, so there all
/// must be distinct.
fn shares_storage(updates: &[ParamUpdate], grads_may_share: bool) -> bool {
    let (mut written, mut read) = (HashSet::new(), HashSet::new());
    updates.iter().any(|u| {
        let mine: Vec<usize> = u.written().map(Tensor::storage_key).collect();
        let grad = u.grad.storage_key();
        let clash = mine.iter().any(|k| written.contains(k) || read.contains(k))
            || written.contains(&grad)
            || (!grads_may_share && read.contains(&grad));
        written.extend(mine);
        read.insert(grad);
        clash
    })
}

/// An error for a group `step` was given against its own checks (internal).
fn internal(msg: &str) -> Error {
    Error::Msg(format!("internal: fused optimizer update: {msg}"))
}

//! Optimizers, learning-rate schedules and gradient clipping, following `torch.optim`.
//!
//! An optimizer is built from the parameters it updates (tracked tensors, e.g. from
//! `Module::parameters`) and a config whose `Default` holds PyTorch's defaults:
//!
//! ```
//! use rnn_nn::optim::{Adam, AdamConfig, Optimizer};
//! use rnn_nn::{Linear, Module, VarBuilder};
//! # fn main() -> rnn_core::Result<()> {
//! let mut vb = VarBuilder::cpu(0);
//! let layer = Linear::new(3, 2, &mut vb)?;
//! let mut opt = Adam::new(layer.parameters(), AdamConfig { lr: 1e-2, ..Default::default() })?;
//! let x = rnn_core::Tensor::ones((4, 3), rnn_core::DType::F32, vb.device())?;
//! let loss = layer.forward(&x)?.sqr()?.mean_all()?;
//! opt.step(&loss.backward()?)?;
//! # Ok(()) }
//! ```
//!
//! Updates run outside the graph and overwrite each parameter in place, so layers holding
//! the parameter see the new values. State (momentum, moments) lives on the parameter's
//! device and is updated in place too.
//!
//! A step is fused (`rnn_core::fused_update`): the parameters with a gradient are grouped
//! by device, dtype and hyper-parameters, and each group takes one pass over parameters,
//! gradients and states, allocating nothing per step:
//! - CPU, f32 and f64: one loop per parameter (multi-threaded for large tensors);
//! - CUDA, f32 and f64: ONE kernel launch for the whole group (multi-tensor apply: the
//!   kernel reads a table of the buffers' addresses); checked on an H200 and by a host
//!   emulator of the CUDA kernels;
//! - wgpu, f32: one dispatch per parameter.
//!
//! Everything else (f16 / bf16, non-contiguous gradients, a gradient sharing storage with
//! another parameter) runs the same formulas as tensor ops, about ten ops per parameter;
//! `set_fused(false)` on an optimizer forces that path, which is the reference the fused
//! updates are tested against.

mod adagrad;
mod adam;
mod clip;
mod config;
mod grad_scaler;
mod rmsprop;
mod scheduler;
mod sgd;

pub use adagrad::{Adagrad, AdagradConfig};
pub use adam::{Adam, AdamConfig, AdamW};
pub use clip::{clip_grad_norm, clip_grad_norm_on_device, clip_grad_value};
pub use config::OptimizerConfig;
pub use grad_scaler::{GradScaler, GradScalerConfig, GradScalerState};
pub use rmsprop::{RmsProp, RmsPropConfig};
pub use scheduler::{
    ConstantLr, CosineAnnealingLr, ExponentialLr, LinearWarmup, LrSchedule, LrScheduler, PlateauConfig, PlateauMode,
    ReduceLrOnPlateau, StepLr,
};
pub use sgd::{Sgd, SgdConfig};

use std::collections::HashSet;

use rnn_core::fused_update::{self, ParamUpdate, UpdateRule};
use rnn_core::{DType, Device, Error, GradStore, Result, Tensor};

/// Updates parameters from their gradients.
pub trait Optimizer: Send {
    /// One update of every parameter that has a gradient in `grads` (others are skipped).
    fn step(&mut self, grads: &GradStore) -> Result<()>;
    /// The learning rate the next `step` uses.
    fn learning_rate(&self) -> f64;
    /// Sets the learning rate (what schedulers call between epochs).
    fn set_learning_rate(&mut self, lr: f64);
}

/// The per-parameter state of an optimizer, in the state slots of its `UpdateRule`.
pub(crate) trait StateSlots {
    fn slots(&self) -> [Option<&Tensor>; 3];
}

/// The parameters an optimizer updates, with one state per parameter (created at the
/// parameter's first update, as PyTorch does), and the choice of the fused path.
pub(crate) struct ParamSet<S> {
    params: Vec<Tensor>,
    states: Vec<Option<S>>,
    /// Use `rnn_core::fused_update` where it applies (the default); the tensor-op path
    /// otherwise. Both compute the same formulas.
    pub(crate) fused: bool,
}

impl<S: StateSlots> ParamSet<S> {
    /// Keeps the first occurrence of each parameter (tied weights may be listed twice);
    /// rejects non-float tensors, which cannot be optimized.
    pub(crate) fn new(optimizer: &'static str, params: Vec<Tensor>) -> Result<Self> {
        let mut seen = HashSet::new();
        let mut unique = Vec::with_capacity(params.len());
        for p in params {
            if !p.dtype().is_float() {
                let msg = format!("parameter {p:?} has dtype {}; only float tensors can be optimized", p.dtype());
                return Err(Error::invalid(optimizer, msg));
            }
            if seen.insert(p.id()) {
                unique.push(p);
            }
        }
        let states = unique.iter().map(|_| None).collect();
        Ok(ParamSet { params: unique, states, fused: true })
    }

    pub(crate) fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// One update of every parameter with a gradient, outside the graph. All gradients are
    /// checked against their parameters first (a mismatch is an error, and nothing moves);
    /// then `prepare` creates or advances each parameter's state and gives its
    /// hyper-parameters `H`. With `fused` on, the parameters are grouped by device, dtype and
    /// rule (`rule(H)`), and each group takes one fused step (`fused_update::step`: one
    /// launch on CUDA); the others run `tensor_ops`, the reference formulas.
    pub(crate) fn update<H: Copy>(
        &mut self,
        optimizer: &'static str,
        grads: &GradStore,
        rule: fn(H) -> UpdateRule,
        mut prepare: impl FnMut(&Tensor, &mut Option<S>) -> Result<H>,
        mut tensor_ops: impl FnMut(&Tensor, &Tensor, &mut S, &H) -> Result<()>,
    ) -> Result<()> {
        rnn_core::no_grad(|| {
            let mut with_grad = Vec::new();
            for (i, param) in self.params.iter().enumerate() {
                if let Some(grad) = grads.get(param) {
                    check_grad(optimizer, param, grad)?;
                    with_grad.push((i, grad.clone()));
                }
            }
            let mut pending = Vec::with_capacity(with_grad.len());
            for (i, grad) in with_grad {
                let h = prepare(&self.params[i], &mut self.states[i])?;
                pending.push((i, grad, h));
            }
            let done = match self.fused {
                true => self.fused_groups(&pending, rule)?,
                false => vec![false; pending.len()],
            };
            for ((i, grad, h), done) in pending.iter().zip(done) {
                if done {
                    continue;
                }
                let missing = || Error::Msg(format!("internal: {optimizer}: no state after its preparation"));
                let state = self.states[*i].as_mut().ok_or_else(missing)?;
                tensor_ops(&self.params[*i], grad, state, h)?;
            }
            Ok(())
        })
    }

    /// Runs the fused step of each (device, dtype, rule) group of `pending`; returns which
    /// updates it did.
    fn fused_groups<H: Copy>(&self, pending: &[(usize, Tensor, H)], rule: fn(H) -> UpdateRule) -> Result<Vec<bool>> {
        let update = |k: usize| {
            let (i, grad, _) = &pending[k];
            ParamUpdate {
                param: &self.params[*i],
                grad,
                states: self.states[*i].as_ref().map_or([None; 3], StateSlots::slots),
            }
        };
        let mut groups: Vec<((Device, DType, UpdateRule), Vec<usize>)> = Vec::new();
        for (k, item) in pending.iter().enumerate() {
            let (r, u) = (rule(item.2), update(k));
            if !fused_update::can_fuse(&r, &u) {
                continue;
            }
            let key = (u.param.device(), u.param.dtype(), r);
            match groups.iter_mut().find(|(other, _)| *other == key) {
                Some((_, members)) => members.push(k),
                None => groups.push((key, vec![k])),
            }
        }
        let mut done = vec![false; pending.len()];
        for ((_, _, r), members) in &groups {
            let updates: Vec<ParamUpdate> = members.iter().map(|&k| update(k)).collect();
            if fused_update::step(r, &updates)? {
                members.iter().for_each(|&k| done[k] = true);
            }
        }
        Ok(done)
    }
}

/// The gradient with the L2 penalty of `weight_decay` added: `g + weight_decay * p`.
pub(crate) fn l2_decayed(p: &Tensor, g: &Tensor, weight_decay: f64) -> Result<Tensor> {
    if weight_decay == 0.0 {
        return Ok(g.clone());
    }
    g.add(&p.mul_scalar(weight_decay)?)
}

/// `Err` naming `optimizer` unless `grad` has the shape, dtype and device of `param`.
pub fn check_grad(optimizer: &'static str, param: &Tensor, grad: &Tensor) -> Result<()> {
    if grad.shape() != param.shape() {
        return Err(Error::ShapeMismatch { op: optimizer, lhs: param.shape().clone(), rhs: grad.shape().clone() });
    }
    if grad.dtype() != param.dtype() {
        return Err(Error::DTypeMismatch { op: optimizer, lhs: param.dtype(), rhs: grad.dtype() });
    }
    if grad.device() != param.device() {
        return Err(Error::DeviceMismatch { op: optimizer, lhs: param.device(), rhs: grad.device() });
    }
    Ok(())
}

/// Checks of config values, each naming the optimizer and the field.
pub(crate) mod check {
    use rnn_core::{Error, Result};

    /// `value >= 0` and finite.
    pub fn non_negative(op: &'static str, name: &str, value: f64) -> Result<()> {
        match value.is_finite() && value >= 0.0 {
            true => Ok(()),
            false => Err(Error::invalid(op, format!("{name} must be a finite number >= 0, got {value}"))),
        }
    }

    /// `value > 0` and finite.
    pub fn positive(op: &'static str, name: &str, value: f64) -> Result<()> {
        match value.is_finite() && value > 0.0 {
            true => Ok(()),
            false => Err(Error::invalid(op, format!("{name} must be a finite number > 0, got {value}"))),
        }
    }

    /// `0 <= value < 1`.
    pub fn unit_interval(op: &'static str, name: &str, value: f64) -> Result<()> {
        match (0.0..1.0).contains(&value) {
            true => Ok(()),
            false => Err(Error::invalid(op, format!("{name} must be in [0, 1), got {value}"))),
        }
    }
}

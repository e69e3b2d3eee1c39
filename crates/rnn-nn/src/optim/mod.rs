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
//! device. On the CPU, f32 and f64 parameters take a fused one-pass update
//! (`rnn_core::fused_update`); elsewhere the same formulas run as tensor ops.

mod adagrad;
mod adam;
mod clip;
mod config;
mod rmsprop;
mod scheduler;
mod sgd;

pub use adagrad::{Adagrad, AdagradConfig};
pub use adam::{Adam, AdamConfig, AdamW};
pub use clip::{clip_grad_norm, clip_grad_value};
pub use config::OptimizerConfig;
pub use rmsprop::{RmsProp, RmsPropConfig};
pub use scheduler::{
    ConstantLr, CosineAnnealingLr, ExponentialLr, LinearWarmup, LrSchedule, LrScheduler, PlateauConfig, PlateauMode,
    ReduceLrOnPlateau, StepLr,
};
pub use sgd::{Sgd, SgdConfig};

use std::collections::HashSet;

use rnn_core::{Error, GradStore, Result, Tensor};

/// Updates parameters from their gradients.
pub trait Optimizer: Send {
    /// One update of every parameter that has a gradient in `grads` (others are skipped).
    fn step(&mut self, grads: &GradStore) -> Result<()>;
    /// The learning rate the next `step` uses.
    fn learning_rate(&self) -> f64;
    /// Sets the learning rate (what schedulers call between epochs).
    fn set_learning_rate(&mut self, lr: f64);
}

/// The parameters an optimizer updates, with one optional state per parameter (created at
/// the parameter's first update, as PyTorch does), and the choice of the fused CPU path.
pub(crate) struct ParamSet<S> {
    params: Vec<Tensor>,
    states: Vec<Option<S>>,
    /// Use `rnn_core::fused_update` where it applies (the default); the tensor-op path
    /// otherwise. Both compute the same formulas.
    pub(crate) fused: bool,
}

impl<S> ParamSet<S> {
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

    /// Calls `update(param, grad, state)` for each parameter with a gradient, outside the
    /// graph, after checking that the gradient matches the parameter.
    pub(crate) fn for_each_with_grad(
        &mut self,
        optimizer: &'static str,
        grads: &GradStore,
        mut update: impl FnMut(&Tensor, &Tensor, &mut Option<S>) -> Result<()>,
    ) -> Result<()> {
        rnn_core::no_grad(|| {
            for (param, state) in self.params.iter().zip(self.states.iter_mut()) {
                let Some(grad) = grads.get(param) else { continue };
                check_grad(optimizer, param, grad)?;
                update(param, grad, state)?;
            }
            Ok(())
        })
    }
}

/// The gradient with the L2 penalty of `weight_decay` added: `g + weight_decay * p`.
pub(crate) fn l2_decayed(p: &Tensor, g: &Tensor, weight_decay: f64) -> Result<Tensor> {
    if weight_decay == 0.0 {
        return Ok(g.clone());
    }
    g.add(&p.mul_scalar(weight_decay)?)
}

fn check_grad(optimizer: &'static str, param: &Tensor, grad: &Tensor) -> Result<()> {
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

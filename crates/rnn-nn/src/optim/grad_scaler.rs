//! Dynamic loss scaling for f16 training, as `torch.amp.GradScaler`.
//!
//! f16 has a narrow range: small gradients underflow to zero. The scaler multiplies the
//! loss by a large factor before the backward pass, so the gradients are scaled by it too,
//! then divides them by it again (`unscale`) before the optimizer sees them. When a
//! gradient is inf or NaN the scale was too large: the step is skipped and the scale
//! halved; after `growth_interval` steps in a row without one it is doubled.
//!
//! ```
//! use rnn_nn::optim::{GradScaler, GradScalerConfig, Optimizer, Sgd, SgdConfig};
//! use rnn_nn::{Linear, Module, VarBuilder};
//! # fn main() -> rnn_core::Result<()> {
//! let mut vb = VarBuilder::cpu(0);
//! let layer = Linear::new(3, 2, &mut vb)?;
//! let mut opt = Sgd::new(layer.parameters(), SgdConfig { lr: 0.1, ..Default::default() })?;
//! let mut scaler = GradScaler::new(GradScalerConfig::default())?;
//! let x = rnn_core::Tensor::ones((4, 3), rnn_core::DType::F32, vb.device())?;
//! let loss = layer.forward(&x)?.sqr()?.mean_all()?;
//! let mut grads = scaler.scale(&loss)?.backward()?;
//! scaler.unscale(&mut grads, &layer.parameters())?; // before clipping, if any
//! let stepped = scaler.step(&mut opt, &mut grads, &layer.parameters())?;
//! scaler.update()?;
//! assert!(stepped);
//! # Ok(()) }
//! ```

use rnn_core::{DType, Error, GradStore, Result, Tensor};

use super::check;
use super::Optimizer;

const OP: &str = "GradScaler";

/// The scaler's settings; `Default` holds PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerConfig {
    /// The first scale (2^16).
    pub init_scale: f64,
    /// The scale is multiplied by this after `growth_interval` finite steps in a row (2).
    pub growth_factor: f64,
    /// The scale is multiplied by this after a step with an inf or NaN gradient (0.5).
    pub backoff_factor: f64,
    /// Finite steps in a row before the scale grows (2000).
    pub growth_interval: u64,
    /// When false, every method passes values through: `scale` returns the loss, `step`
    /// always steps (so one training loop serves f32 and f16).
    pub enabled: bool,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

/// What a checkpoint keeps of a scaler (`GradScaler::state` and `load_state`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerState {
    pub scale: f32,
    /// Finite steps in a row since the scale last changed.
    pub growth_tracker: u64,
}

/// Where the scaler is within one training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// No `unscale` or `step` since the last `update`.
    Ready,
    /// The gradients are unscaled; whether one of them was inf or NaN.
    Unscaled { found_inf: bool },
    /// `step` ran (or skipped); `update` is next.
    Stepped { found_inf: bool },
}

/// Dynamic loss scaling (see the module docs). The scale is an f32, as PyTorch's.
#[derive(Clone, Debug)]
pub struct GradScaler {
    config: GradScalerConfig,
    scale: f32,
    growth_tracker: u64,
    stage: Stage,
}

impl GradScaler {
    pub fn new(config: GradScalerConfig) -> Result<Self> {
        check::positive(OP, "init_scale", config.init_scale)?;
        if !(config.growth_factor.is_finite() && config.growth_factor > 1.0) {
            return Err(Error::invalid(OP, format!("growth_factor must be > 1, got {}", config.growth_factor)));
        }
        if !(config.backoff_factor > 0.0 && config.backoff_factor < 1.0) {
            return Err(Error::invalid(OP, format!("backoff_factor must be in (0, 1), got {}", config.backoff_factor)));
        }
        if config.growth_interval == 0 {
            return Err(Error::invalid(OP, "growth_interval must be at least 1"));
        }
        let scale = config.init_scale as f32;
        Ok(GradScaler { config, scale, growth_tracker: 0, stage: Stage::Ready })
    }

    /// The current scale (1 when disabled).
    pub fn get_scale(&self) -> f64 {
        if self.config.enabled {
            f64::from(self.scale)
        } else {
            1.0
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.config.enabled
    }

    /// `loss * scale`, to call `backward` on (the loss itself when disabled). The factor is
    /// rounded to the loss's dtype, as PyTorch multiplies by its f32 scale tensor.
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor> {
        if !self.config.enabled {
            return Ok(loss.clone());
        }
        loss.mul_scalar(f64::from(self.scale))
    }

    /// Divides the gradients of `params` by the scale, in place in `grads`, and notes
    /// whether any of them holds an inf or NaN. Call it at most once per step, before
    /// clipping or reading the gradients; `step` calls it when it was not called.
    pub fn unscale(&mut self, grads: &mut GradStore, params: &[Tensor]) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        match self.stage {
            Stage::Ready => {}
            Stage::Unscaled { .. } => {
                return Err(Error::invalid(OP, "unscale was already called since the last update"))
            }
            Stage::Stepped { .. } => return Err(Error::invalid(OP, "unscale called after step: call update first")),
        }
        // PyTorch's inverse: the reciprocal in f64, rounded to f32.
        let inv_scale = f64::from((1.0 / f64::from(self.scale)) as f32);
        let found_inf = rnn_core::no_grad(|| unscale_grads(grads, params, inv_scale))?;
        self.stage = Stage::Unscaled { found_inf };
        Ok(())
    }

    /// Unscales the gradients unless `unscale` did already, then runs `optimizer.step`
    /// unless a gradient is inf or NaN. Returns whether the optimizer stepped.
    pub fn step(&mut self, optimizer: &mut dyn Optimizer, grads: &mut GradStore, params: &[Tensor]) -> Result<bool> {
        if !self.config.enabled {
            optimizer.step(grads)?;
            return Ok(true);
        }
        if let Stage::Stepped { .. } = self.stage {
            return Err(Error::invalid(OP, "step was already called since the last update"));
        }
        if self.stage == Stage::Ready {
            self.unscale(grads, params)?;
        }
        let found_inf = matches!(self.stage, Stage::Unscaled { found_inf: true });
        if !found_inf {
            optimizer.step(grads)?;
        }
        self.stage = Stage::Stepped { found_inf };
        Ok(!found_inf)
    }

    /// Adjusts the scale for the next step (PyTorch's `_amp_update_scale_`): halved
    /// (`backoff_factor`) after a step with an inf or NaN gradient, grown (`growth_factor`)
    /// after `growth_interval` finite steps in a row, unless growing would overflow f32.
    pub fn update(&mut self) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        let found_inf = match self.stage {
            Stage::Ready => return Err(Error::invalid(OP, "update called with no unscale or step in this step")),
            Stage::Unscaled { found_inf } | Stage::Stepped { found_inf } => found_inf,
        };
        if found_inf {
            self.scale = (f64::from(self.scale) * self.config.backoff_factor) as f32;
            self.growth_tracker = 0;
        } else if self.growth_tracker + 1 == self.config.growth_interval {
            let grown = (f64::from(self.scale) * self.config.growth_factor) as f32;
            if grown.is_finite() {
                self.scale = grown;
            }
            self.growth_tracker = 0;
        } else {
            self.growth_tracker += 1;
        }
        self.stage = Stage::Ready;
        Ok(())
    }

    /// The scale and growth tracker, for a checkpoint.
    pub fn state(&self) -> GradScalerState {
        GradScalerState { scale: self.scale, growth_tracker: self.growth_tracker }
    }

    /// Restores what `state` returned; the next call must start a step.
    pub fn load_state(&mut self, state: GradScalerState) -> Result<()> {
        if !(state.scale.is_finite() && state.scale > 0.0) {
            return Err(Error::invalid(OP, format!("scale must be finite and > 0, got {}", state.scale)));
        }
        self.scale = state.scale;
        self.growth_tracker = state.growth_tracker;
        self.stage = Stage::Ready;
        Ok(())
    }
}

/// `g * inv_scale` for each gradient of `params` in `grads`; whether any is inf or NaN.
/// The check reads one value back for all gradients (`0 * g` is 0 where `g` is finite, NaN
/// elsewhere, so the sum of them all is NaN exactly when one gradient is not finite).
fn unscale_grads(grads: &mut GradStore, params: &[Tensor], inv_scale: f64) -> Result<bool> {
    let mut seen = std::collections::HashSet::new();
    let mut flags: Option<Tensor> = None;
    for p in params.iter().filter(|p| seen.insert(p.id())) {
        let Some(g) = grads.get(p) else { continue };
        if g.dtype() == DType::F16 {
            // As PyTorch: f16 gradients mean f16 weights, which lose small updates anyway.
            return Err(Error::invalid(OP, "cannot unscale f16 gradients: keep f32 master weights"));
        }
        let unscaled = g.mul_scalar(inv_scale)?;
        let bad = g.mul_scalar(0.0)?.to_dtype(DType::F32)?.sum_all()?;
        flags = Some(match flags {
            Some(f) => f.add(&bad)?,
            None => bad,
        });
        grads.insert(p, unscaled);
    }
    match flags {
        Some(f) => Ok(!f.to_f64_scalar()?.is_finite()),
        None => Ok(false),
    }
}

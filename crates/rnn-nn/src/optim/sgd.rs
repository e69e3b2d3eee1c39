//! Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight
//! decay (`torch.optim.SGD`).

use rnn_core::fused_update::{sgd_step, SgdHyper};
use rnn_core::{Error, GradStore, Result, Tensor};

use super::{check, l2_decayed, Optimizer, ParamSet};

/// SGD settings; `Default` is PyTorch's (`lr` 1e-3, everything else off).
#[derive(Clone, Debug, PartialEq)]
pub struct SgdConfig {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    /// L2 penalty: `weight_decay * p` is added to the gradient.
    pub weight_decay: f64,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig { lr: 1e-3, momentum: 0.0, dampening: 0.0, nesterov: false, weight_decay: 0.0 }
    }
}

impl SgdConfig {
    /// The defaults with learning rate `lr`.
    pub fn with_lr(lr: f64) -> Self {
        SgdConfig { lr, ..Default::default() }
    }

    pub fn validate(&self) -> Result<()> {
        check::non_negative("SGD", "lr", self.lr)?;
        check::non_negative("SGD", "momentum", self.momentum)?;
        check::non_negative("SGD", "weight_decay", self.weight_decay)?;
        if !self.dampening.is_finite() {
            return Err(Error::invalid("SGD", format!("dampening must be finite, got {}", self.dampening)));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::invalid("SGD", "Nesterov momentum requires momentum > 0 and dampening 0"));
        }
        Ok(())
    }
}

/// Stochastic gradient descent:
/// `d = g + wd * p`; with momentum `buf = momentum * buf + (1 - dampening) * d` (the first
/// step sets `buf = d`), then `d = buf` or, with Nesterov, `d = d + momentum * buf`;
/// finally `p -= lr * d`.
pub struct Sgd {
    params: ParamSet<Tensor>,
    config: SgdConfig,
}

impl Sgd {
    pub fn new(params: Vec<Tensor>, config: SgdConfig) -> Result<Self> {
        config.validate()?;
        Ok(Sgd { params: ParamSet::new("SGD", params)?, config })
    }

    pub fn config(&self) -> &SgdConfig {
        &self.config
    }

    /// The parameters being optimized.
    pub fn params(&self) -> &[Tensor] {
        self.params.params()
    }

    /// Turns the fused CPU update on (the default) or off (tensor ops everywhere).
    pub fn set_fused(&mut self, fused: bool) {
        self.params.fused = fused;
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        let c = self.config.clone();
        let fused = self.params.fused;
        self.params.for_each_with_grad("SGD", grads, |p, g, buf| match c.momentum == 0.0 {
            true => update_plain(p, g, &c, fused),
            false => update_momentum(p, g, buf, &c, fused),
        })
    }

    fn learning_rate(&self) -> f64 {
        self.config.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.config.lr = lr;
    }
}

fn hyper(c: &SgdConfig, first_step: bool) -> SgdHyper {
    SgdHyper {
        lr: c.lr,
        momentum: c.momentum,
        dampening: c.dampening,
        nesterov: c.nesterov,
        weight_decay: c.weight_decay,
        first_step,
    }
}

fn update_plain(p: &Tensor, g: &Tensor, c: &SgdConfig, fused: bool) -> Result<()> {
    if fused && sgd_step(p, g, None, &hyper(c, false))? {
        return Ok(());
    }
    let d = l2_decayed(p, g, c.weight_decay)?;
    p.assign(&p.sub(&d.mul_scalar(c.lr)?)?)
}

fn update_momentum(p: &Tensor, g: &Tensor, buf: &mut Option<Tensor>, c: &SgdConfig, fused: bool) -> Result<()> {
    let first_step = buf.is_none();
    let buffer = match buf {
        Some(b) => b,
        None => buf.insert(p.zeros_like()?),
    };
    if fused && sgd_step(p, g, Some(buffer), &hyper(c, first_step))? {
        return Ok(());
    }
    let d = l2_decayed(p, g, c.weight_decay)?;
    *buffer = match first_step {
        true => d.clone(),
        false => buffer.mul_scalar(c.momentum)?.add(&d.mul_scalar(1.0 - c.dampening)?)?,
    };
    let d = match c.nesterov {
        true => d.add(&buffer.mul_scalar(c.momentum)?)?,
        false => buffer.clone(),
    };
    p.assign(&p.sub(&d.mul_scalar(c.lr)?)?)
}

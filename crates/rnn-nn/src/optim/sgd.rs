//! Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight
//! decay (`torch.optim.SGD`).

use rnn_core::fused_update::{SgdHyper, UpdateRule};
use rnn_core::{Error, GradStore, Result, Tensor};

use super::{check, l2_decayed, Optimizer, ParamSet, StateSlots};

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
    params: ParamSet<SgdState>,
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

    /// Turns the fused update on (the default) or off (tensor ops everywhere).
    pub fn set_fused(&mut self, fused: bool) {
        self.params.fused = fused;
    }
}

/// Per-parameter state: the momentum buffer, once momentum has run.
struct SgdState {
    momentum_buffer: Option<Tensor>,
}

impl StateSlots for SgdState {
    fn slots(&self) -> [Option<&Tensor>; 3] {
        [self.momentum_buffer.as_ref(), None, None]
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        let c = self.config.clone();
        let prepare = |p: &Tensor, state: &mut Option<SgdState>| {
            let s = state.get_or_insert(SgdState { momentum_buffer: None });
            let first_step = c.momentum != 0.0 && s.momentum_buffer.is_none();
            if first_step {
                s.momentum_buffer = Some(p.zeros_like()?);
            }
            Ok(SgdHyper {
                lr: c.lr,
                momentum: c.momentum,
                dampening: c.dampening,
                nesterov: c.nesterov,
                weight_decay: c.weight_decay,
                first_step,
            })
        };
        self.params.update("SGD", grads, UpdateRule::Sgd, prepare, update_with_tensor_ops)
    }

    fn learning_rate(&self) -> f64 {
        self.config.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.config.lr = lr;
    }
}

/// The update as tensor ops, in the order of PyTorch's single-tensor SGD.
fn update_with_tensor_ops(p: &Tensor, g: &Tensor, s: &mut SgdState, hp: &SgdHyper) -> Result<()> {
    let d = l2_decayed(p, g, hp.weight_decay)?;
    let d = match &mut s.momentum_buffer {
        None => d,
        Some(buffer) => {
            *buffer = match hp.first_step {
                true => d.clone(),
                false => buffer.mul_scalar(hp.momentum)?.add(&d.mul_scalar(1.0 - hp.dampening)?)?,
            };
            match hp.nesterov {
                true => d.add(&buffer.mul_scalar(hp.momentum)?)?,
                false => buffer.clone(),
            }
        }
    };
    p.assign(&p.sub(&d.mul_scalar(hp.lr)?)?)
}

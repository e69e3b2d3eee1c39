//! RMSprop (`torch.optim.RMSprop`), optionally centered and with momentum.

use rnn_core::fused_update::{RmsPropHyper, UpdateRule};
use rnn_core::{GradStore, Result, Tensor};

use super::{check, l2_decayed, Optimizer, ParamSet, StateSlots};

/// RMSprop settings; `Default` is PyTorch's (`lr` 0.01, `alpha` 0.99, `eps` 1e-8).
#[derive(Clone, Debug, PartialEq)]
pub struct RmsPropConfig {
    pub lr: f64,
    /// Smoothing constant of the squared-gradient average.
    pub alpha: f64,
    /// Added to the denominator, outside the square root.
    pub eps: f64,
    pub momentum: f64,
    /// Normalize by the estimated variance (subtracting the squared mean gradient).
    pub centered: bool,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
}

impl Default for RmsPropConfig {
    fn default() -> Self {
        RmsPropConfig { lr: 1e-2, alpha: 0.99, eps: 1e-8, momentum: 0.0, centered: false, weight_decay: 0.0 }
    }
}

impl RmsPropConfig {
    /// The defaults with learning rate `lr`.
    pub fn with_lr(lr: f64) -> Self {
        RmsPropConfig { lr, ..Default::default() }
    }

    pub fn validate(&self) -> Result<()> {
        check::non_negative("RMSprop", "lr", self.lr)?;
        check::unit_interval("RMSprop", "alpha", self.alpha)?;
        check::positive("RMSprop", "eps", self.eps)?;
        check::non_negative("RMSprop", "momentum", self.momentum)?;
        check::non_negative("RMSprop", "weight_decay", self.weight_decay)
    }
}

struct RmsPropState {
    square_avg: Tensor,
    grad_avg: Option<Tensor>,
    momentum_buffer: Option<Tensor>,
}

impl StateSlots for RmsPropState {
    fn slots(&self) -> [Option<&Tensor>; 3] {
        [Some(&self.square_avg), self.grad_avg.as_ref(), self.momentum_buffer.as_ref()]
    }
}

/// RMSprop: `s = alpha s + (1 - alpha) g²`, `avg = sqrt(s - ḡ²) + eps` (centered, with
/// `ḡ` the running mean gradient) or `sqrt(s) + eps`; then `p -= lr * g / avg`, or with
/// momentum `buf = momentum * buf + g / avg`, `p -= lr * buf`.
pub struct RmsProp {
    params: ParamSet<RmsPropState>,
    config: RmsPropConfig,
}

impl RmsProp {
    pub fn new(params: Vec<Tensor>, config: RmsPropConfig) -> Result<Self> {
        config.validate()?;
        Ok(RmsProp { params: ParamSet::new("RMSprop", params)?, config })
    }

    pub fn config(&self) -> &RmsPropConfig {
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

impl Optimizer for RmsProp {
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        let c = &self.config;
        let hp = RmsPropHyper {
            lr: c.lr,
            alpha: c.alpha,
            eps: c.eps,
            weight_decay: c.weight_decay,
            momentum: c.momentum,
            centered: c.centered,
        };
        let prepare = |p: &Tensor, state: &mut Option<RmsPropState>| {
            if state.is_none() {
                *state = Some(RmsPropState {
                    square_avg: p.zeros_like()?,
                    grad_avg: if hp.centered { Some(p.zeros_like()?) } else { None },
                    momentum_buffer: if hp.momentum > 0.0 { Some(p.zeros_like()?) } else { None },
                });
            }
            Ok(hp)
        };
        self.params.update("RMSprop", grads, UpdateRule::RmsProp, prepare, update_with_tensor_ops)
    }

    fn learning_rate(&self) -> f64 {
        self.config.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.config.lr = lr;
    }
}

/// The update as tensor ops, in the order of PyTorch's single-tensor RMSprop.
fn update_with_tensor_ops(p: &Tensor, g: &Tensor, s: &mut RmsPropState, hp: &RmsPropHyper) -> Result<()> {
    let g = l2_decayed(p, g, hp.weight_decay)?;
    let w = 1.0 - hp.alpha;
    s.square_avg = s.square_avg.mul_scalar(hp.alpha)?.add(&g.mul(&g)?.mul_scalar(w)?)?;
    let avg = match &mut s.grad_avg {
        Some(ga) => {
            *ga = ga.add(&g.sub(ga)?.mul_scalar(w)?)?;
            s.square_avg.sub(&ga.mul(ga)?)?.sqrt()?.add_scalar(hp.eps)?
        }
        None => s.square_avg.sqrt()?.add_scalar(hp.eps)?,
    };
    let step = match &mut s.momentum_buffer {
        Some(buf) => {
            *buf = buf.mul_scalar(hp.momentum)?.add(&g.div(&avg)?)?;
            buf.clone()
        }
        None => g.div(&avg)?,
    };
    p.assign(&p.sub(&step.mul_scalar(hp.lr)?)?)
}

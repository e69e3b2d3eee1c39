//! Adam (`torch.optim.Adam`, with L2 weight decay added to the gradient) and AdamW
//! (`torch.optim.AdamW`, with decoupled weight decay), both with optional AMSGrad.

use rnn_core::fused_update::{AdamHyper, UpdateRule};
use rnn_core::{GradStore, Result, Tensor};

use super::{check, l2_decayed, Optimizer, ParamSet, StateSlots};

/// Adam / AdamW settings; `Default` is PyTorch's Adam (`lr` 1e-3, betas 0.9 / 0.999,
/// `eps` 1e-8, no weight decay); `AdamConfig::adamw()` is PyTorch's AdamW (decay 0.01).
#[derive(Clone, Debug, PartialEq)]
pub struct AdamConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    /// Added to the denominator `sqrt(v_hat)`, outside the square root.
    pub eps: f64,
    /// Adam: L2 penalty added to the gradient. AdamW: decoupled decay `p -= lr * wd * p`.
    pub weight_decay: f64,
    /// Use the running maximum of the second moment (AMSGrad).
    pub amsgrad: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, amsgrad: false }
    }
}

impl AdamConfig {
    /// Adam's defaults with learning rate `lr`.
    pub fn with_lr(lr: f64) -> Self {
        AdamConfig { lr, ..Default::default() }
    }

    /// PyTorch's AdamW defaults: Adam's, with weight decay 0.01.
    pub fn adamw() -> Self {
        AdamConfig { weight_decay: 0.01, ..Default::default() }
    }

    pub fn validate(&self) -> Result<()> {
        check::non_negative("Adam", "lr", self.lr)?;
        check::unit_interval("Adam", "beta1", self.beta1)?;
        check::unit_interval("Adam", "beta2", self.beta2)?;
        check::positive("Adam", "eps", self.eps)?;
        check::non_negative("Adam", "weight_decay", self.weight_decay)
    }
}

/// Per-parameter state: the moment estimates and the parameter's update count.
struct AdamState {
    m: Tensor,
    v: Tensor,
    max_v: Option<Tensor>,
    step: u64,
}

impl StateSlots for AdamState {
    fn slots(&self) -> [Option<&Tensor>; 3] {
        [Some(&self.m), Some(&self.v), self.max_v.as_ref()]
    }
}

/// Adam: `m = beta1 m + (1 - beta1) g`, `v = beta2 v + (1 - beta2) g²`,
/// `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`, with
/// `g += weight_decay * p` first.
pub struct Adam {
    params: ParamSet<AdamState>,
    config: AdamConfig,
    decoupled: bool,
}

impl Adam {
    pub fn new(params: Vec<Tensor>, config: AdamConfig) -> Result<Self> {
        Self::with_decay_mode(params, config, false)
    }

    fn with_decay_mode(params: Vec<Tensor>, config: AdamConfig, decoupled: bool) -> Result<Self> {
        config.validate()?;
        let name = if decoupled { "AdamW" } else { "Adam" };
        Ok(Adam { params: ParamSet::new(name, params)?, config, decoupled })
    }

    pub fn config(&self) -> &AdamConfig {
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

impl Optimizer for Adam {
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        let (c, decoupled) = (self.config.clone(), self.decoupled);
        let name = if decoupled { "AdamW" } else { "Adam" };
        let prepare = |p: &Tensor, state: &mut Option<AdamState>| {
            let state = match state {
                Some(s) => s,
                None => state.insert(AdamState {
                    m: p.zeros_like()?,
                    v: p.zeros_like()?,
                    max_v: if c.amsgrad { Some(p.zeros_like()?) } else { None },
                    step: 0,
                }),
            };
            state.step += 1;
            Ok(AdamHyper {
                lr: c.lr,
                beta1: c.beta1,
                beta2: c.beta2,
                eps: c.eps,
                weight_decay: c.weight_decay,
                decoupled,
                amsgrad: c.amsgrad,
                step: state.step,
            })
        };
        self.params.update(name, grads, UpdateRule::Adam, prepare, update_with_tensor_ops)
    }

    fn learning_rate(&self) -> f64 {
        self.config.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.config.lr = lr;
    }
}

/// The update as tensor ops, in the order of PyTorch's single-tensor Adam.
fn update_with_tensor_ops(p: &Tensor, g: &Tensor, s: &mut AdamState, hp: &AdamHyper) -> Result<()> {
    let (p_decayed, g) = match hp.decoupled {
        true if hp.weight_decay != 0.0 => (p.mul_scalar(1.0 - hp.lr * hp.weight_decay)?, g.clone()),
        true => (p.clone(), g.clone()),
        false => (p.clone(), l2_decayed(p, g, hp.weight_decay)?),
    };
    s.m = s.m.add(&g.sub(&s.m)?.mul_scalar(1.0 - hp.beta1)?)?;
    s.v = s.v.mul_scalar(hp.beta2)?.add(&g.mul(&g)?.mul_scalar(1.0 - hp.beta2)?)?;
    let v_hat = match &mut s.max_v {
        Some(max_v) => {
            *max_v = max_v.maximum(&s.v)?;
            max_v.clone()
        }
        None => s.v.clone(),
    };
    let denom = v_hat.sqrt()?.div_scalar(hp.bias_correction2_sqrt())?.add_scalar(hp.eps)?;
    p.assign(&p_decayed.sub(&s.m.div(&denom)?.mul_scalar(hp.step_size())?)?)
}

/// AdamW: Adam with decoupled weight decay, `p *= 1 - lr * weight_decay` before the Adam
/// update of the undecayed gradient. Use `AdamConfig::adamw()` for PyTorch's defaults.
pub struct AdamW(Adam);

impl AdamW {
    pub fn new(params: Vec<Tensor>, config: AdamConfig) -> Result<Self> {
        Ok(AdamW(Adam::with_decay_mode(params, config, true)?))
    }

    pub fn config(&self) -> &AdamConfig {
        self.0.config()
    }

    /// The parameters being optimized.
    pub fn params(&self) -> &[Tensor] {
        self.0.params()
    }

    /// Turns the fused update on (the default) or off (tensor ops everywhere).
    pub fn set_fused(&mut self, fused: bool) {
        self.0.set_fused(fused);
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.0.step(grads)
    }

    fn learning_rate(&self) -> f64 {
        self.0.learning_rate()
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.0.set_learning_rate(lr);
    }
}

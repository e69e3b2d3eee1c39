//! Adagrad (`torch.optim.Adagrad`).

use rnn_core::fused_update::{AdagradHyper, UpdateRule};
use rnn_core::{GradStore, Result, Tensor};

use super::{check, l2_decayed, Optimizer, ParamSet, StateSlots};

/// Adagrad settings; `Default` is PyTorch's (`lr` 0.01, `eps` 1e-10, no decay).
#[derive(Clone, Debug, PartialEq)]
pub struct AdagradConfig {
    pub lr: f64,
    /// The step size at update `t` (from 1) is `lr / (1 + (t - 1) * lr_decay)`.
    pub lr_decay: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Starting value of the sum of squared gradients.
    pub initial_accumulator_value: f64,
    /// Added to the denominator, outside the square root.
    pub eps: f64,
}

impl Default for AdagradConfig {
    fn default() -> Self {
        AdagradConfig { lr: 1e-2, lr_decay: 0.0, weight_decay: 0.0, initial_accumulator_value: 0.0, eps: 1e-10 }
    }
}

impl AdagradConfig {
    /// The defaults with learning rate `lr`.
    pub fn with_lr(lr: f64) -> Self {
        AdagradConfig { lr, ..Default::default() }
    }

    pub fn validate(&self) -> Result<()> {
        check::non_negative("Adagrad", "lr", self.lr)?;
        check::non_negative("Adagrad", "lr_decay", self.lr_decay)?;
        check::non_negative("Adagrad", "weight_decay", self.weight_decay)?;
        check::non_negative("Adagrad", "initial_accumulator_value", self.initial_accumulator_value)?;
        check::positive("Adagrad", "eps", self.eps)
    }
}

struct AdagradState {
    sum: Tensor,
    step: u64,
}

impl StateSlots for AdagradState {
    fn slots(&self) -> [Option<&Tensor>; 3] {
        [Some(&self.sum), None, None]
    }
}

/// Adagrad: `sum += g²`, `p -= lr_t * g / (sqrt(sum) + eps)` with
/// `lr_t = lr / (1 + (t - 1) * lr_decay)` and `g += weight_decay * p` first.
pub struct Adagrad {
    params: ParamSet<AdagradState>,
    config: AdagradConfig,
}

impl Adagrad {
    pub fn new(params: Vec<Tensor>, config: AdagradConfig) -> Result<Self> {
        config.validate()?;
        Ok(Adagrad { params: ParamSet::new("Adagrad", params)?, config })
    }

    pub fn config(&self) -> &AdagradConfig {
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

impl Optimizer for Adagrad {
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        let c = self.config.clone();
        let prepare = |p: &Tensor, state: &mut Option<AdagradState>| {
            let s = match state {
                Some(s) => s,
                None => state.insert(AdagradState { sum: p.full_like(c.initial_accumulator_value)?, step: 0 }),
            };
            s.step += 1;
            let lr = c.lr / (1.0 + (s.step - 1) as f64 * c.lr_decay);
            Ok(AdagradHyper { lr, eps: c.eps, weight_decay: c.weight_decay })
        };
        self.params.update("Adagrad", grads, UpdateRule::Adagrad, prepare, update_with_tensor_ops)
    }

    fn learning_rate(&self) -> f64 {
        self.config.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.config.lr = lr;
    }
}

/// The update as tensor ops, in the order of PyTorch's single-tensor Adagrad.
fn update_with_tensor_ops(p: &Tensor, g: &Tensor, s: &mut AdagradState, hp: &AdagradHyper) -> Result<()> {
    let g = l2_decayed(p, g, hp.weight_decay)?;
    s.sum = s.sum.add(&g.mul(&g)?)?;
    let std = s.sum.sqrt()?.add_scalar(hp.eps)?;
    p.assign(&p.sub(&g.div(&std)?.mul_scalar(hp.lr)?)?)
}

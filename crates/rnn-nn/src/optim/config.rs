//! `OptimizerConfig`: which optimizer to build and with which settings, as a value a
//! training config can hold before the parameters exist.

use rnn_core::{Result, Tensor};

use super::{Adagrad, AdagradConfig, Adam, AdamConfig, AdamW, Optimizer, RmsProp, RmsPropConfig, Sgd, SgdConfig};

/// An optimizer and its settings. `Default` is Adam with PyTorch's defaults.
#[derive(Clone, Debug, PartialEq)]
pub enum OptimizerConfig {
    Sgd(SgdConfig),
    Adam(AdamConfig),
    /// Adam with decoupled weight decay (`AdamConfig::adamw()` for PyTorch's defaults).
    AdamW(AdamConfig),
    RmsProp(RmsPropConfig),
    Adagrad(AdagradConfig),
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig::Adam(AdamConfig::default())
    }
}

/// Each optimizer's own config names that optimizer (`AdamConfig` means Adam; AdamW is
/// `OptimizerConfig::AdamW(..)`), so APIs can take `impl Into<OptimizerConfig>`.
macro_rules! config_names_optimizer {
    ($($config:ident => $variant:ident),*) => {$(
        impl From<$config> for OptimizerConfig {
            fn from(c: $config) -> Self {
                OptimizerConfig::$variant(c)
            }
        }
    )*};
}
config_names_optimizer!(SgdConfig => Sgd, AdamConfig => Adam, RmsPropConfig => RmsProp, AdagradConfig => Adagrad);

impl OptimizerConfig {
    /// Plain SGD with learning rate `lr`.
    pub fn sgd(lr: f64) -> Self {
        OptimizerConfig::Sgd(SgdConfig::with_lr(lr))
    }

    /// SGD with momentum.
    pub fn sgd_momentum(lr: f64, momentum: f64) -> Self {
        OptimizerConfig::Sgd(SgdConfig { lr, momentum, ..Default::default() })
    }

    /// Adam with PyTorch's defaults and learning rate `lr`.
    pub fn adam(lr: f64) -> Self {
        OptimizerConfig::Adam(AdamConfig::with_lr(lr))
    }

    /// AdamW with PyTorch's defaults (weight decay 0.01) and learning rate `lr`.
    pub fn adamw(lr: f64) -> Self {
        OptimizerConfig::AdamW(AdamConfig { lr, ..AdamConfig::adamw() })
    }

    /// RMSprop with PyTorch's defaults and learning rate `lr`.
    pub fn rmsprop(lr: f64) -> Self {
        OptimizerConfig::RmsProp(RmsPropConfig::with_lr(lr))
    }

    /// Adagrad with PyTorch's defaults and learning rate `lr`.
    pub fn adagrad(lr: f64) -> Self {
        OptimizerConfig::Adagrad(AdagradConfig::with_lr(lr))
    }

    /// The optimizer's name as PyTorch spells it.
    pub fn name(&self) -> &'static str {
        match self {
            OptimizerConfig::Sgd(_) => "SGD",
            OptimizerConfig::Adam(_) => "Adam",
            OptimizerConfig::AdamW(_) => "AdamW",
            OptimizerConfig::RmsProp(_) => "RMSprop",
            OptimizerConfig::Adagrad(_) => "Adagrad",
        }
    }

    pub fn learning_rate(&self) -> f64 {
        match self {
            OptimizerConfig::Sgd(c) => c.lr,
            OptimizerConfig::Adam(c) | OptimizerConfig::AdamW(c) => c.lr,
            OptimizerConfig::RmsProp(c) => c.lr,
            OptimizerConfig::Adagrad(c) => c.lr,
        }
    }

    /// The same config with learning rate `lr`.
    pub fn with_learning_rate(mut self, lr: f64) -> Self {
        match &mut self {
            OptimizerConfig::Sgd(c) => c.lr = lr,
            OptimizerConfig::Adam(c) | OptimizerConfig::AdamW(c) => c.lr = lr,
            OptimizerConfig::RmsProp(c) => c.lr = lr,
            OptimizerConfig::Adagrad(c) => c.lr = lr,
        }
        self
    }

    /// Checks the settings (negative rates, betas outside [0, 1), eps <= 0 ...).
    pub fn validate(&self) -> Result<()> {
        match self {
            OptimizerConfig::Sgd(c) => c.validate(),
            OptimizerConfig::Adam(c) => c.validate(),
            OptimizerConfig::AdamW(c) => c.validate(),
            OptimizerConfig::RmsProp(c) => c.validate(),
            OptimizerConfig::Adagrad(c) => c.validate(),
        }
    }

    /// The optimizer over `params`.
    pub fn build(&self, params: Vec<Tensor>) -> Result<Box<dyn Optimizer>> {
        Ok(match self {
            OptimizerConfig::Sgd(c) => Box::new(Sgd::new(params, c.clone())?),
            OptimizerConfig::Adam(c) => Box::new(Adam::new(params, c.clone())?),
            OptimizerConfig::AdamW(c) => Box::new(AdamW::new(params, c.clone())?),
            OptimizerConfig::RmsProp(c) => Box::new(RmsProp::new(params, c.clone())?),
            OptimizerConfig::Adagrad(c) => Box::new(Adagrad::new(params, c.clone())?),
        })
    }
}

//! The optimizer constructors of the optirs-gpu API: `Adam::new(0.001)` names Adam with
//! that learning rate (and PyTorch's other defaults), for
//! `GpuOptimizer::new(device).with_optimizer(Adam::new(0.001))`. Each returns the config of
//! the optimizer of the same name in `rnn::nn::optim`; change other settings on it
//! (`Adam::new(1e-3).weight_decay = ..`) or use those configs directly.
//!
//! ```
//! use rnn::gpu::optimizers::{Adam, Sgd};
//! let adam = Adam::new(0.001);
//! assert_eq!((adam.lr, adam.beta1, adam.beta2), (0.001, 0.9, 0.999));
//! assert_eq!(Sgd::new(0.1).momentum, 0.0);
//! ```

use rnn_nn::optim::{AdagradConfig, AdamConfig, OptimizerConfig, RmsPropConfig, SgdConfig};

/// Adam (`torch.optim.Adam`).
pub struct Adam;

impl Adam {
    #[allow(clippy::new_ret_no_self)]
    pub fn new(lr: f64) -> AdamConfig {
        AdamConfig::with_lr(lr)
    }
}

/// AdamW (`torch.optim.AdamW`: decoupled weight decay 0.01).
pub struct AdamW;

impl AdamW {
    #[allow(clippy::new_ret_no_self)]
    pub fn new(lr: f64) -> OptimizerConfig {
        OptimizerConfig::adamw(lr)
    }
}

/// Stochastic gradient descent (`torch.optim.SGD`; no momentum unless set).
pub struct Sgd;

impl Sgd {
    #[allow(clippy::new_ret_no_self)]
    pub fn new(lr: f64) -> SgdConfig {
        SgdConfig::with_lr(lr)
    }
}

/// RMSprop (`torch.optim.RMSprop`).
pub struct RmsProp;

impl RmsProp {
    #[allow(clippy::new_ret_no_self)]
    pub fn new(lr: f64) -> RmsPropConfig {
        RmsPropConfig::with_lr(lr)
    }
}

/// Adagrad (`torch.optim.Adagrad`).
pub struct Adagrad;

impl Adagrad {
    #[allow(clippy::new_ret_no_self)]
    pub fn new(lr: f64) -> AdagradConfig {
        AdagradConfig::with_lr(lr)
    }
}

//! Layers, losses, optimizers and initializers built on `rnn-core` tensors.
//!
//! ```
//! use rnn_nn::{Linear, Module, VarBuilder};
//! # fn main() -> rnn_core::Result<()> {
//! let mut vb = VarBuilder::cpu(42);
//! let layer = Linear::new(4, 3, &mut vb)?;
//! let x = rnn_core::Tensor::ones((2, 4), rnn_core::DType::F32, vb.device())?;
//! assert_eq!(layer.forward(&x)?.dims(), &[2, 3]);
//! # Ok(()) }
//! ```

mod activation;
mod init;
pub mod layers;
pub mod loss;
mod module;
pub mod optim;

pub use activation::{leaky_relu, Activation, SWISH};
pub use init::{fans, Init, VarBuilder};
pub use layers::*;
pub use loss::{
    binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, cross_entropy_with, huber_loss, l1_loss,
    mse, nll_loss, CrossEntropyOptions, Loss, Reduction,
};
pub use module::{prefixed, Module, Sequential};
pub use optim::{
    clip_grad_norm, clip_grad_norm_on_device, clip_grad_value, Adagrad, AdagradConfig, Adam, AdamConfig, AdamW,
    LrSchedule, LrScheduler, Optimizer, OptimizerConfig, PlateauConfig, PlateauMode, RmsProp, RmsPropConfig, Sgd,
    SgdConfig,
};

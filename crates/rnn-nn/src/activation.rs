//! Activation functions as layers.

use rnn_core::{Result, Tensor};

use crate::Module;

/// An elementwise activation (Softmax over the last dim).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Identity,
    Relu,
    LeakyRelu(f64),
    Sigmoid,
    Tanh,
    /// The tanh approximation, as in GPT-2 (PyTorch's `approximate="tanh"`).
    Gelu,
    /// The exact erf form (PyTorch's default GELU).
    GeluErf,
    Silu,
    Softmax,
}

/// Swish is another name for SiLU: x * sigmoid(x).
pub const SWISH: Activation = Activation::Silu;

impl Activation {
    pub fn apply(&self, xs: &Tensor) -> Result<Tensor> {
        match self {
            Activation::Identity => Ok(xs.clone()),
            Activation::Relu => xs.relu(),
            Activation::LeakyRelu(slope) => leaky_relu(xs, *slope),
            Activation::Sigmoid => xs.sigmoid(),
            Activation::Tanh => xs.tanh(),
            Activation::Gelu => xs.gelu(),
            Activation::GeluErf => xs.gelu_erf(),
            Activation::Silu => xs.silu(),
            Activation::Softmax => xs.softmax(-1),
        }
    }
}

/// `x` where `x > 0`, else `slope * x`; NaN stays NaN, and as in PyTorch the gradient is 1
/// where `x > 0` and `slope` elsewhere (NaN and 0 included).
pub fn leaky_relu(xs: &Tensor, slope: f64) -> Result<Tensor> {
    xs.gt_scalar(0.0)?.where_cond(xs, &xs.mul_scalar(slope)?)
}

impl Module for Activation {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.apply(xs)
    }
}

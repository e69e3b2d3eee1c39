//! Dropout: zeroes elements at random while training.

use rnn_core::{Error, Result, Tensor};

use crate::init::bad_config;
use crate::Module;

/// Inverted dropout: in training mode each element is zeroed with probability `p` and the
/// others are scaled by `1 / (1 - p)`, so the expected output equals the input; in
/// evaluation mode it is the identity. The mask comes from `Tensor::rand`, so
/// `rnn_core::manual_seed` makes it reproducible.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    p: f64,
    training: bool,
}

impl Dropout {
    /// `p` must be in `[0, 1)`. The layer starts in training mode.
    pub fn new(p: f64) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(bad_config("Dropout", format!("p = {p} must be in [0, 1)")));
        }
        Ok(Dropout { p, training: true })
    }

    pub fn p(&self) -> f64 {
        self.p
    }

    pub fn is_training(&self) -> bool {
        self.training
    }
}

impl Module for Dropout {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        if !xs.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: "Dropout",
                dtype: xs.dtype(),
                hint: ": the input must be float",
            });
        }
        if !self.training || self.p == 0.0 {
            return Ok(xs.clone());
        }
        let keep = Tensor::rand(0.0, 1.0, xs.shape(), xs.dtype(), xs.device())?.ge_scalar(self.p)?;
        let scale = keep.to_dtype(xs.dtype())?.mul_scalar(1.0 / (1.0 - self.p))?;
        xs.mul(&scale)
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}

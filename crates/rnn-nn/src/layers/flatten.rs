//! Flatten: merges a range of dims into one.

use rnn_core::{Result, Tensor};

use crate::Module;

/// Merges dims `start_dim..=end_dim` (negative counts from the end) into one; the default,
/// as in PyTorch, keeps the batch dim and flattens the rest: `[N, C, H, W] -> [N, C*H*W]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flatten {
    start_dim: i64,
    end_dim: i64,
}

impl Flatten {
    pub fn new(start_dim: i64, end_dim: i64) -> Self {
        Flatten { start_dim, end_dim }
    }

    pub fn start_dim(&self) -> i64 {
        self.start_dim
    }

    pub fn end_dim(&self) -> i64 {
        self.end_dim
    }
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten { start_dim: 1, end_dim: -1 }
    }
}

impl Module for Flatten {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        xs.flatten(self.start_dim, self.end_dim)
    }
}

//! `rnn`: tensors with autograd on the CPU, CUDA GPUs and wgpu GPUs, plus layers and a
//! training API. This facade re-exports the crates users need.

pub use ndarray;
pub use rnn_core::*;
pub use rnn_nn as nn;
pub use rnn_train as train;

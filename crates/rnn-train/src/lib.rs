//! The training stack of `rnn`: the Keras-like `Network` builder, `TrainingConfig`, the
//! training loop with progress output, metrics and history, datasets (MNIST IDX files and a
//! built-in procedurally drawn digits set) and safetensors checkpoints.

pub mod checkpoint;
pub mod data;
mod history;
pub mod plot;
pub mod progress;

pub use history::History;

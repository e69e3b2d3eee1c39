//! The training stack of `rnn`: the Keras-like `Network` builder, `TrainingConfig`, the
//! training loop with progress output, metrics and history, datasets (MNIST IDX files and a
//! built-in procedurally drawn digits set) and safetensors checkpoints.
//!
//! ```
//! use rnn_train::{ActivationFunction, LayerBuilder, LossFunction, Network, TrainingConfig};
//! # fn main() -> rnn_core::Result<()> {
//! let data = rnn_train::data::synthetic_digits(512, 7)?;
//! let mut net = Network::with_input_size(784)?
//!     .add_layer(LayerBuilder::dense(32).activation(ActivationFunction::ReLU))
//!     .add_layer(LayerBuilder::dense(10).activation(ActivationFunction::Softmax))
//!     .loss(LossFunction::CategoricalCrossEntropy)
//!     .build()?;
//! let config = TrainingConfig { max_epochs: 2, verbose: false, use_gpu: false, ..Default::default() };
//! let history = net.train(&data.inputs, &data.labels, &config)?;
//! assert_eq!(history.train_loss.len(), 2);
//! # Ok(()) }
//! ```

pub mod atomic_file;
pub mod checkpoint;
mod config;
pub mod data;
pub mod distributed;
mod fit;
mod guard;
mod history;
mod inputs;
pub mod language_model;
mod model;
mod network;
mod objective;
mod persist;
pub mod plot;
mod precision;
pub mod progress;
mod spec;

pub use config::{EarlyStopping, MixedPrecision, Monitor, NonFinitePolicy, TrainingConfig};
pub use fit::Evaluation;
pub use history::History;
pub use inputs::IntoTensor;
pub use language_model::{load_gpt, save_gpt, train_gpt, GptProgress, GptTrainConfig};
pub use network::{Network, NetworkBuilder, DEFAULT_INIT_SEED};
pub use spec::{ActivationFunction, LayerBuilder, LayerKind, LossFunction};

/// Runs one training step: on a CPU worker thread when training on the CPU
/// (`rnn_core::on_cpu_workers`: the step's parallel ops then skip the hand-off from an outside
/// thread), in place on a GPU, whose backends batch their launches per thread. Not for a
/// step that blocks on other threads (a collective): it would hold a worker they may need.
fn step_thread<R: Send>(device: rnn_core::Device, step: impl FnOnce() -> R + Send) -> R {
    match device.is_cpu() {
        true => rnn_core::on_cpu_workers(step),
        false => step(),
    }
}

//! What `Network::train` returns: per-epoch losses, metrics and times.

use std::collections::HashMap;

/// Per-epoch records of one training run. `val_*` are empty when there is no validation set.
/// Metrics are keyed by name; classification records `"accuracy"` (a fraction in 0..=1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub train_loss: Vec<f64>,
    pub val_loss: Vec<f64>,
    pub train_metrics: HashMap<String, Vec<f64>>,
    pub val_metrics: HashMap<String, Vec<f64>>,
    /// Wall-clock seconds per epoch (training and validation).
    pub epoch_times: Vec<f64>,
    /// Training samples per second per epoch.
    pub samples_per_sec: Vec<f64>,
    /// Data-parallel training only (empty otherwise): seconds per epoch this rank spent after
    /// its backward passes waiting for the averaged gradients: the communication that
    /// backward did not hide, plus the time the slowest rank took to catch up. Compare with
    /// `epoch_times` to see what the averaging costs.
    pub comm_wait_seconds: Vec<f64>,
    /// Learning rate used in each epoch.
    pub learning_rates: Vec<f64>,
    /// The epoch (0-based) whose weights the model holds at the end (differs from the last
    /// epoch when early stopping restored the best weights).
    pub best_epoch: Option<usize>,
}

impl History {
    pub fn epochs(&self) -> usize {
        self.train_loss.len()
    }

    /// The last value of a validation metric, if recorded.
    pub fn last_val_metric(&self, name: &str) -> Option<f64> {
        self.val_metrics.get(name).and_then(|v| v.last()).copied()
    }

    /// The last value of a training metric, if recorded.
    pub fn last_train_metric(&self, name: &str) -> Option<f64> {
        self.train_metrics.get(name).and_then(|v| v.last()).copied()
    }
}

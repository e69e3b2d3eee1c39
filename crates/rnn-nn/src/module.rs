//! The `Module` trait every layer implements, and `Sequential` to chain them.

use rnn_core::{Result, Tensor};

/// A layer or a model: a forward pass plus named state.
///
/// Parameter names are unique within the module and dotted for nested modules
/// (`"0.weight"`, `"encoder.bias"`), so they can be saved and loaded by name.
pub trait Module: Send + Sync {
    fn forward(&self, xs: &Tensor) -> Result<Tensor>;

    /// Trainable tensors (they track gradients), with their names.
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// Saved but not trained state, such as BatchNorm's running statistics.
    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }

    /// Training mode (Dropout drops, BatchNorm uses batch statistics) or evaluation mode.
    fn set_training(&mut self, _training: bool) {}

    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters().into_iter().map(|(_, t)| t).collect()
    }

    /// Total number of trainable scalars.
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(|t| t.elem_count()).sum()
    }
}

/// Prepends `prefix.` to every name.
pub fn prefixed(prefix: &str, named: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    named.into_iter().map(|(name, t)| (format!("{prefix}.{name}"), t)).collect()
}

/// Layers applied in order; parameters are named `"<index>.<name>"`.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a layer (builder style).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Module + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    pub fn push(&mut self, layer: Box<dyn Module>) {
        self.layers.push(layer);
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    pub fn layers(&self) -> &[Box<dyn Module>] {
        &self.layers
    }
}

impl Module for Sequential {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.layers.iter().try_fold(xs.clone(), |x, layer| layer.forward(&x))
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let each = self.layers.iter().enumerate();
        each.flat_map(|(i, l)| prefixed(&i.to_string(), l.named_parameters())).collect()
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        let each = self.layers.iter().enumerate();
        each.flat_map(|(i, l)| prefixed(&i.to_string(), l.named_buffers())).collect()
    }

    fn set_training(&mut self, training: bool) {
        self.layers.iter_mut().for_each(|l| l.set_training(training));
    }
}

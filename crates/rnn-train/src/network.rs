//! `Network`: the seed API's Keras-like model. Build it from `LayerBuilder`s, train it with
//! a `TrainingConfig`, then evaluate, predict, save and load it.

use std::sync::{Mutex, PoisonError};

use rnn_core::{no_grad, DType, Device, Error, Result, Tensor};
use rnn_nn::VarBuilder;

use crate::fit::TrainRun;
use crate::inputs::IntoTensor;
use crate::model::Model;
use crate::spec::{LayerBuilder, LayerKind, LossFunction};

/// The default seed for parameter initialization (see `NetworkBuilder::seed`).
pub const DEFAULT_INIT_SEED: u64 = 42;

/// Rows per forward pass in `predict` and `evaluate`.
pub(crate) const INFERENCE_BATCH: usize = 512;

/// Collects layers; `build()` checks the shapes and creates the parameters.
#[derive(Clone, Debug)]
pub struct NetworkBuilder {
    input_shape: Vec<usize>,
    layers: Vec<LayerBuilder>,
    loss: LossFunction,
    seed: u64,
}

impl NetworkBuilder {
    pub fn add_layer(mut self, layer: LayerBuilder) -> Self {
        self.layers.push(layer);
        self
    }

    pub fn loss(mut self, loss: LossFunction) -> Self {
        self.loss = loss;
        self
    }

    /// Seed of the initial weights (default 42): the same seed builds the same network.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Checks every layer against the shape it receives and creates the parameters (f32, CPU;
    /// `train` moves them to the training device).
    pub fn build(self) -> Result<Network> {
        if self.layers.is_empty() {
            return Err(Error::invalid("Network::build", "the network has no layers; call add_layer first"));
        }
        let mut vb = VarBuilder::new(Device::Cpu, DType::F32, self.seed);
        let mut model = Model::build(&self.input_shape, &self.layers, &mut vb)?;
        // Evaluation mode except inside `train`, so predict/evaluate are deterministic.
        model.set_training(false);
        let net = Network { spec: self, model, device: Device::Cpu, run: Mutex::new(None) };
        net.check_loss_fits()?;
        Ok(net)
    }
}

/// A feed-forward stack of layers with a loss.
pub struct Network {
    spec: NetworkBuilder,
    pub(crate) model: Model,
    pub(crate) device: Device,
    /// The optimizer state `train` carries to its next call (a mutex only so that a
    /// `Network` stays `Sync`: `train` takes `&mut self` and never locks it).
    run: Mutex<Option<TrainRun>>,
}

impl Network {
    /// A network taking flat samples of `size` features (`[n, size]` inputs).
    pub fn with_input_size(size: usize) -> Result<NetworkBuilder> {
        Self::with_input_shape(&[size])
    }

    /// A network taking samples of `shape` (e.g. `[1, 28, 28]` for images, `[T, F]` for
    /// sequences); inputs are `[n, ..shape]`.
    pub fn with_input_shape(shape: &[usize]) -> Result<NetworkBuilder> {
        if shape.is_empty() || shape.contains(&0) {
            return Err(Error::invalid("Network", format!("input shape {shape:?} must be non-empty with no zero")));
        }
        let builder = NetworkBuilder {
            input_shape: shape.to_vec(),
            layers: Vec::new(),
            loss: LossFunction::default(),
            seed: DEFAULT_INIT_SEED,
        };
        Ok(builder)
    }

    pub fn input_shape(&self) -> &[usize] {
        &self.spec.input_shape
    }

    /// Shape of one output sample.
    pub fn output_shape(&self) -> &[usize] {
        self.model.shapes.last().map(|s| s.as_slice()).unwrap_or(&[])
    }

    pub fn layers(&self) -> &[LayerBuilder] {
        &self.spec.layers
    }

    pub fn loss_function(&self) -> LossFunction {
        self.spec.loss
    }

    pub(crate) fn init_seed(&self) -> u64 {
        self.spec.seed
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Trainable tensors, named `layers.<i>.<name>`.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.model.named_parameters()
    }

    /// Parameters and buffers (BatchNorm running statistics): what a checkpoint holds.
    pub fn state(&self) -> Vec<(String, Tensor)> {
        let mut all = self.model.named_parameters();
        all.extend(self.model.named_buffers());
        all
    }

    pub fn num_parameters(&self) -> usize {
        self.named_parameters().iter().map(|(_, t)| t.elem_count()).sum()
    }

    /// Forgets the optimizer state (moments, step count), the schedule's position and the
    /// epoch count that `train` carries from one call to the next: the next call starts as
    /// the first did. (`train` also starts afresh by itself when the optimizer, learning
    /// rate, schedule or device changes, and after it stops on a NaN or infinite value.)
    pub fn reset_optimizer(&mut self) {
        self.set_run(None);
    }

    pub(crate) fn take_run(&mut self) -> Option<TrainRun> {
        self.run.get_mut().unwrap_or_else(PoisonError::into_inner).take()
    }

    pub(crate) fn set_run(&mut self, run: impl Into<Option<TrainRun>>) {
        *self.run.get_mut().unwrap_or_else(PoisonError::into_inner) = run.into();
    }

    /// The name of the first parameter or buffer holding a NaN or infinite value, if any.
    pub fn first_non_finite(&self) -> Result<Option<String>> {
        crate::guard::first_non_finite(&self.state())
    }

    /// Moves the parameters to `device` (rebuilds the layers there and copies the values).
    pub fn to_device(&mut self, device: Device) -> Result<()> {
        if device != self.device {
            // The optimizer held the old parameters: the moved network starts a new run.
            *self = self.copy_to(device)?;
        }
        Ok(())
    }

    /// A copy of this network on `device`: the same layers, weights and buffers, in
    /// evaluation mode, without the optimizer state `train` keeps.
    pub fn copy_to(&self, device: Device) -> Result<Network> {
        device.check_available()?;
        let mut vb = VarBuilder::new(device, DType::F32, self.spec.seed);
        let model = Model::build(&self.spec.input_shape, &self.spec.layers, &mut vb)?;
        let mut copy = Network { spec: self.spec.clone(), model, device, run: Mutex::new(None) };
        crate::checkpoint::apply(
            &copy.state(),
            &crate::checkpoint::Checkpoint { tensors: self.state(), metadata: Default::default() },
        )?;
        copy.model.set_training(false);
        Ok(copy)
    }

    /// The network's outputs (the final activation included) for `[n, ..input_shape]` inputs,
    /// computed in evaluation mode, in batches, without recording gradients.
    pub fn predict(&self, x: &impl IntoTensor) -> Result<Tensor> {
        let x = self.check_inputs(&x.to_tensor()?, "Network::predict")?;
        let batches = self.map_batches(&x, |xb| self.model.forward(xb, false))?;
        Tensor::cat(&batches, 0)
    }

    /// The most likely class of each sample (argmax of the outputs; for a single sigmoid
    /// output, 1 when above 0.5).
    pub fn predict_classes(&self, x: &impl IntoTensor) -> Result<Vec<u32>> {
        let out = self.predict(x)?;
        // Class ids fit u32 (the label dtype of the datasets).
        crate::objective::classes(&out)?.to_dtype(DType::U32)?.to_vec::<u32>()
    }

    /// Forward pass of a batch that tracks gradients; skips the activation the loss absorbs.
    pub(crate) fn logits(&self, xb: &Tensor) -> Result<Tensor> {
        self.model.forward(xb, self.folds_last_activation())
    }

    pub(crate) fn folds_last_activation(&self) -> bool {
        let last = self.spec.layers.last().map(|l| l.activation);
        last.is_some() && last == self.spec.loss.folded_activation()
    }

    /// `f` applied to consecutive row batches, in eval mode without gradients.
    pub(crate) fn map_batches<T>(&self, x: &Tensor, f: impl Fn(&Tensor) -> Result<T>) -> Result<Vec<T>> {
        let n = x.dims().first().copied().unwrap_or(0);
        no_grad(|| {
            (0..n)
                .step_by(INFERENCE_BATCH)
                .map(|start| f(&x.narrow(0, start, INFERENCE_BATCH.min(n - start))?))
                .collect()
        })
    }

    /// Checks `[n, ..input_shape]`, converts to f32 and moves to the network's device.
    /// `op` names the API in errors.
    pub(crate) fn check_inputs(&self, x: &Tensor, op: &'static str) -> Result<Tensor> {
        let want = &self.spec.input_shape;
        if x.rank() != want.len() + 1 || &x.dims()[1..] != want.as_slice() {
            return Err(Error::invalid(
                op,
                format!("inputs of shape {:?} given; expected [n, {}]", x.dims(), join(want)),
            ));
        }
        if x.dims()[0] == 0 {
            return Err(Error::EmptyTensor { op, shape: x.shape().clone() });
        }
        self.check_token_ids(x, op)?;
        x.to_dtype(DType::F32)?.to_device(self.device)
    }

    /// Token ids fed to a first embedding layer, checked on the host once per call (inputs
    /// on a GPU are read back for it), before training: the network's input is float, and
    /// the embedding casts it to ids without looking again, so NaN or 1.5 must not get
    /// that far (a cast would make them ids 0 and 1).
    fn check_token_ids(&self, x: &Tensor, op: &'static str) -> Result<()> {
        let Some(LayerKind::Embedding { vocab, .. }) = self.spec.layers.first().map(|l| &l.kind) else {
            return Ok(());
        };
        rnn_nn::check_ids(op, "input", x, *vocab)
    }

    fn check_loss_fits(&self) -> Result<()> {
        let out = self.output_shape();
        if self.spec.loss == LossFunction::CategoricalCrossEntropy && (out.len() != 1 || out[0] < 2) {
            let msg =
                format!("CategoricalCrossEntropy needs [classes >= 2] outputs per sample, the network gives {out:?}");
            return Err(Error::invalid("Network::build", msg));
        }
        Ok(())
    }

    /// One line per layer with its output shape and parameter count.
    pub fn summary(&self) -> String {
        let mut s = format!("input        {:?}\n", self.spec.input_shape);
        for (i, (layer, shape)) in self.spec.layers.iter().zip(&self.model.shapes).enumerate() {
            let prefix = format!("layers.{i}.");
            let params: usize = self
                .named_parameters()
                .iter()
                .filter(|(n, _)| n.starts_with(&prefix))
                .map(|(_, t)| t.elem_count())
                .sum();
            s += &format!("{i:>3} {:<28} -> {:<16} {params:>10} params\n", layer.describe(), format!("{shape:?}"));
        }
        s + &format!("loss {:?}, {} parameters, on {}", self.spec.loss, self.num_parameters(), self.device)
    }
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

fn join(dims: &[usize]) -> String {
    dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}

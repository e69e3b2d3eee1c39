//! Turns a list of `LayerBuilder`s into modules: one `Block` (layer + activation) each.

use rnn_core::{DType, Epilogue, Result, Tensor};
use rnn_nn::{
    Activation, AvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d, Conv2dConfig, Dropout, Embedding, Flatten, Gru, LayerNorm,
    Linear, Lstm, MaxPool2d, Module, Pool2dConfig, RecurrentConfig, Rnn, RnnNonlinearity, VarBuilder,
};

use crate::spec::{layer_error, output_shape, LayerBuilder, LayerKind};

/// A layer followed by its activation.
pub(crate) struct Block {
    pub layer: Box<dyn Module>,
    pub activation: Activation,
}

/// The built layers and the sample shape after each.
pub(crate) struct Model {
    pub blocks: Vec<Block>,
    pub shapes: Vec<Vec<usize>>,
}

impl Model {
    /// Builds every layer for samples of `input_shape`, with parameters from `vb`.
    pub fn build(input_shape: &[usize], specs: &[LayerBuilder], vb: &mut VarBuilder) -> Result<Model> {
        let mut shape = input_shape.to_vec();
        let (mut blocks, mut shapes) = (Vec::new(), Vec::new());
        for (i, spec) in specs.iter().enumerate() {
            let out = output_shape(i, spec, &shape)?;
            blocks.push(build_block(i, spec, &shape, vb)?);
            shapes.push(out.clone());
            shape = out;
        }
        Ok(Model { blocks, shapes })
    }

    /// Applies the blocks; the last block's activation is skipped when `skip_last_activation`.
    pub fn forward(&self, xs: &Tensor, skip_last_activation: bool) -> Result<Tensor> {
        let last = self.blocks.len().saturating_sub(1);
        let mut x = xs.clone();
        for (i, block) in self.blocks.iter().enumerate() {
            x = block.layer.forward(&x)?;
            if !(skip_last_activation && i == last) {
                x = block.activation.apply(&x)?;
            }
        }
        Ok(x)
    }

    pub fn set_training(&mut self, training: bool) {
        self.blocks.iter_mut().for_each(|b| b.layer.set_training(training));
    }

    /// Parameters named `layers.<i>.<name>`.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.named(|m| m.named_parameters())
    }

    pub fn named_buffers(&self) -> Vec<(String, Tensor)> {
        self.named(|m| m.named_buffers())
    }

    fn named(&self, f: impl Fn(&dyn Module) -> Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
        let each = self.blocks.iter().enumerate();
        each.flat_map(|(i, b)| rnn_nn::prefixed(&format!("layers.{i}"), f(b.layer.as_ref()))).collect()
    }
}

/// The layer and its activation. A dense layer's ReLU or GELU is fused into the layer
/// (`Linear::with_activation`), so on CUDA it runs inside the product; a convolution's ReLU
/// likewise (`Conv2d::with_activation`: on the CPU it is applied to the output in cache).
fn build_block(i: usize, spec: &LayerBuilder, input: &[usize], vb: &mut VarBuilder) -> Result<Block> {
    let activation = spec.activation.to_activation();
    let fused = match activation {
        Activation::Relu => Epilogue::Relu,
        Activation::Gelu => Epilogue::Gelu,
        _ => Epilogue::None,
    };
    if let (LayerKind::Dense { units }, false) = (&spec.kind, fused == Epilogue::None) {
        let linear = dense(input, *units, spec, vb)?.with_activation(fused);
        return Ok(Block { layer: Box::new(linear), activation: Activation::Identity });
    }
    if let (LayerKind::Conv2d { filters, kernel }, Epilogue::Relu) = (&spec.kind, fused) {
        let conv = conv2d(input, *filters, *kernel, spec, vb)?.with_activation(fused);
        return Ok(Block { layer: Box::new(conv), activation: Activation::Identity });
    }
    Ok(Block { layer: build_layer(i, spec, input, vb)?, activation })
}

fn build_layer(i: usize, spec: &LayerBuilder, input: &[usize], vb: &mut VarBuilder) -> Result<Box<dyn Module>> {
    let features = input.last().copied().unwrap_or(0);
    let channels = input.first().copied().unwrap_or(0);
    Ok(match &spec.kind {
        LayerKind::Dense { units } => Box::new(dense(input, *units, spec, vb)?),
        LayerKind::Conv2d { filters, kernel } => Box::new(conv2d(input, *filters, *kernel, spec, vb)?),
        LayerKind::MaxPool2d { kernel } => Box::new(MaxPool2d::with_config((*kernel, *kernel), pool_cfg(spec))?),
        LayerKind::AvgPool2d { kernel } => Box::new(AvgPool2d::with_config((*kernel, *kernel), pool_cfg(spec))?),
        LayerKind::Dropout { rate } => Box::new(Dropout::new(*rate)?),
        LayerKind::BatchNorm => match input.len() {
            1 | 2 => Box::new(BatchNorm1d::new(channels, vb)?),
            3 => Box::new(BatchNorm2d::new(channels, vb)?),
            _ => return Err(layer_error(i, spec, format!("needs [C], [C, L] or [C, H, W] samples, got {input:?}"))),
        },
        LayerKind::LayerNorm => Box::new(LayerNorm::new(&[features], vb)?),
        LayerKind::Flatten => Box::new(Flatten::new(1, -1)),
        LayerKind::Rnn { units } => {
            recurrent(spec, Rnn::new(features, *units, RnnNonlinearity::Tanh, rec_cfg(spec), vb)?)
        }
        LayerKind::Lstm { units } => recurrent(spec, Lstm::new(features, *units, rec_cfg(spec), vb)?),
        LayerKind::Gru { units } => recurrent(spec, Gru::new(features, *units, rec_cfg(spec), vb)?),
        LayerKind::Embedding { vocab, dim } => Box::new(TokenEmbedding(Embedding::new(*vocab, *dim, vb)?)),
    })
}

/// A dense layer over the last dim of `input`, with Keras' and PyTorch's fan-in init.
fn dense(input: &[usize], units: usize, spec: &LayerBuilder, vb: &mut VarBuilder) -> Result<Linear> {
    let features = input.last().copied().unwrap_or(0);
    Linear::with_init(features, units, rnn_nn::Init::FanInUniform, spec.use_bias, vb)
}

/// A square convolution over `[C, H, W]` samples.
fn conv2d(input: &[usize], filters: usize, kernel: usize, spec: &LayerBuilder, vb: &mut VarBuilder) -> Result<Conv2d> {
    let channels = input.first().copied().unwrap_or(0);
    let (s, p, d) = (spec.stride.unwrap_or(1), spec.padding, spec.dilation);
    let cfg =
        Conv2dConfig { stride: (s, s), padding: (p, p), dilation: (d, d), groups: spec.groups, bias: spec.use_bias };
    Conv2d::new(channels, filters, (kernel, kernel), cfg, vb)
}

fn pool_cfg(spec: &LayerBuilder) -> Pool2dConfig {
    let (p, d) = (spec.padding, spec.dilation);
    Pool2dConfig { stride: spec.stride.map(|s| (s, s)), padding: (p, p), dilation: (d, d) }
}

fn rec_cfg(spec: &LayerBuilder) -> RecurrentConfig {
    RecurrentConfig { num_layers: spec.num_layers, batch_first: true, ..Default::default() }
}

fn recurrent(spec: &LayerBuilder, layer: impl Module + 'static) -> Box<dyn Module> {
    match spec.return_sequences {
        true => Box::new(layer),
        false => Box::new(LastStep(Box::new(layer))),
    }
}

/// A recurrent layer that keeps only the last time step: `[B, T, H]` to `[B, H]`.
struct LastStep(Box<dyn Module>);

impl Module for LastStep {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let out = self.0.forward(xs)?;
        let steps = out.dims().get(1).copied().unwrap_or(0);
        out.narrow(1, steps.saturating_sub(1), 1)?.squeeze(1)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.0.named_parameters()
    }
}

/// An embedding fed from the network's (float) input: values are token ids, which
/// `Network` has checked on the host (`check_token_ids`), so the cast needs no read-back.
struct TokenEmbedding(Embedding);

impl Module for TokenEmbedding {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        self.0.forward(&xs.to_dtype(DType::I64)?)
    }
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.0.named_parameters()
    }
}

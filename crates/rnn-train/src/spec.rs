//! The seed API's layer and loss vocabulary: `LayerBuilder`, `ActivationFunction`,
//! `LossFunction`. A network's architecture is a list of `LayerBuilder`s; it is serialized
//! into checkpoints so `Network::load` can rebuild the model.

use rnn_core::{Error, Result};
use rnn_nn::Activation;
use serde::{Deserialize, Serialize};

/// The activation applied after a layer (Keras naming).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
pub enum ActivationFunction {
    /// No activation.
    #[default]
    Linear,
    ReLU,
    LeakyReLU(f64),
    Sigmoid,
    Tanh,
    /// GELU, tanh approximation.
    GELU,
    /// x * sigmoid(x), also called SiLU.
    Swish,
    /// Softmax over the last dim.
    Softmax,
}

impl ActivationFunction {
    pub fn to_activation(self) -> Activation {
        match self {
            ActivationFunction::Linear => Activation::Identity,
            ActivationFunction::ReLU => Activation::Relu,
            ActivationFunction::LeakyReLU(slope) => Activation::LeakyRelu(slope),
            ActivationFunction::Sigmoid => Activation::Sigmoid,
            ActivationFunction::Tanh => Activation::Tanh,
            ActivationFunction::GELU => Activation::Gelu,
            ActivationFunction::Swish => Activation::Silu,
            ActivationFunction::Softmax => Activation::Softmax,
        }
    }
}

/// The training objective.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
pub enum LossFunction {
    /// Cross entropy over classes. Labels are class ids (`[n]`, integer or float) or one-hot /
    /// probability rows (`[n, classes]`). A final Softmax is folded into the loss during
    /// training (log-softmax of the logits), which is exact and numerically stable; without
    /// a final Softmax the outputs are taken as logits.
    #[default]
    CategoricalCrossEntropy,
    /// Mean squared error against float targets of the output's shape.
    MeanSquaredError,
    /// Binary cross entropy against 0/1 targets; a final Sigmoid is folded into the loss.
    BinaryCrossEntropy,
    /// Huber loss with the given delta.
    Huber(f64),
}

impl LossFunction {
    /// Whether accuracy is a meaningful metric for this loss.
    pub fn is_classification(self) -> bool {
        matches!(self, LossFunction::CategoricalCrossEntropy | LossFunction::BinaryCrossEntropy)
    }

    /// The final activation this loss absorbs during training.
    pub(crate) fn folded_activation(self) -> Option<ActivationFunction> {
        match self {
            LossFunction::CategoricalCrossEntropy => Some(ActivationFunction::Softmax),
            LossFunction::BinaryCrossEntropy => Some(ActivationFunction::Sigmoid),
            _ => None,
        }
    }
}

/// Which layer a `LayerBuilder` describes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum LayerKind {
    Dense {
        units: usize,
    },
    Conv2d {
        filters: usize,
        kernel: usize,
    },
    MaxPool2d {
        kernel: usize,
    },
    AvgPool2d {
        kernel: usize,
    },
    Dropout {
        rate: f64,
    },
    /// BatchNorm1d on `[C]` / `[C, L]` samples, BatchNorm2d on `[C, H, W]`.
    BatchNorm,
    LayerNorm,
    Flatten,
    Rnn {
        units: usize,
    },
    Lstm {
        units: usize,
    },
    Gru {
        units: usize,
    },
    /// Token ids (stored as numbers in the input) to vectors.
    Embedding {
        vocab: usize,
        dim: usize,
    },
}

/// One layer of a `Network`, Keras style: `LayerBuilder::dense(128).activation(ReLU)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerBuilder {
    pub kind: LayerKind,
    pub activation: ActivationFunction,
    /// Conv / pool stride (default: 1 for conv, the kernel size for pools).
    pub stride: Option<usize>,
    pub padding: usize,
    pub dilation: usize,
    pub groups: usize,
    pub use_bias: bool,
    /// Stacked recurrent layers.
    pub num_layers: usize,
    /// Recurrent layers: output every time step (`[T, units]`) or only the last (`[units]`).
    pub return_sequences: bool,
}

impl LayerBuilder {
    fn new(kind: LayerKind) -> Self {
        LayerBuilder {
            kind,
            activation: ActivationFunction::Linear,
            stride: None,
            padding: 0,
            dilation: 1,
            groups: 1,
            use_bias: true,
            num_layers: 1,
            return_sequences: false,
        }
    }

    pub fn dense(units: usize) -> Self {
        Self::new(LayerKind::Dense { units })
    }
    /// 2-D convolution over `[C, H, W]` samples with a square kernel.
    pub fn conv2d(filters: usize, kernel: usize) -> Self {
        Self::new(LayerKind::Conv2d { filters, kernel })
    }
    pub fn max_pool2d(kernel: usize) -> Self {
        Self::new(LayerKind::MaxPool2d { kernel })
    }
    pub fn avg_pool2d(kernel: usize) -> Self {
        Self::new(LayerKind::AvgPool2d { kernel })
    }
    pub fn dropout(rate: f64) -> Self {
        Self::new(LayerKind::Dropout { rate })
    }
    pub fn batch_norm() -> Self {
        Self::new(LayerKind::BatchNorm)
    }
    pub fn layer_norm() -> Self {
        Self::new(LayerKind::LayerNorm)
    }
    pub fn flatten() -> Self {
        Self::new(LayerKind::Flatten)
    }
    /// Elman RNN (tanh) over `[T, F]` samples.
    pub fn rnn(units: usize) -> Self {
        Self::new(LayerKind::Rnn { units })
    }
    pub fn lstm(units: usize) -> Self {
        Self::new(LayerKind::Lstm { units })
    }
    pub fn gru(units: usize) -> Self {
        Self::new(LayerKind::Gru { units })
    }
    pub fn embedding(vocab: usize, dim: usize) -> Self {
        Self::new(LayerKind::Embedding { vocab, dim })
    }

    pub fn activation(mut self, activation: ActivationFunction) -> Self {
        self.activation = activation;
        self
    }
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = Some(stride);
        self
    }
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = padding;
        self
    }
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.dilation = dilation;
        self
    }
    pub fn groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }
    pub fn use_bias(mut self, use_bias: bool) -> Self {
        self.use_bias = use_bias;
        self
    }
    pub fn num_layers(mut self, num_layers: usize) -> Self {
        self.num_layers = num_layers;
        self
    }
    pub fn return_sequences(mut self, return_sequences: bool) -> Self {
        self.return_sequences = return_sequences;
        self
    }

    /// A short description such as `dense(512, ReLU)`.
    pub fn describe(&self) -> String {
        let act = match self.activation {
            ActivationFunction::Linear => String::new(),
            a => format!(", {a:?}"),
        };
        let kind = match &self.kind {
            LayerKind::Dense { units } => format!("dense({units}"),
            LayerKind::Conv2d { filters, kernel } => format!("conv2d({filters}, {kernel}x{kernel}"),
            LayerKind::MaxPool2d { kernel } => format!("max_pool2d({kernel}"),
            LayerKind::AvgPool2d { kernel } => format!("avg_pool2d({kernel}"),
            LayerKind::Dropout { rate } => format!("dropout({rate}"),
            LayerKind::BatchNorm => "batch_norm(".into(),
            LayerKind::LayerNorm => "layer_norm(".into(),
            LayerKind::Flatten => "flatten(".into(),
            LayerKind::Rnn { units } => format!("rnn({units}"),
            LayerKind::Lstm { units } => format!("lstm({units}"),
            LayerKind::Gru { units } => format!("gru({units}"),
            LayerKind::Embedding { vocab, dim } => format!("embedding({vocab}, {dim}"),
        };
        format!("{kind}{act})")
    }
}

/// An error about layer `index` of a network being built.
pub(crate) fn layer_error(index: usize, layer: &LayerBuilder, msg: impl std::fmt::Display) -> Error {
    Error::invalid("Network::build", format!("layer {index} ({}): {msg}", layer.describe()))
}

/// Output shape of one sample after `layer`, given the input sample shape.
pub(crate) fn output_shape(index: usize, layer: &LayerBuilder, input: &[usize]) -> Result<Vec<usize>> {
    let err = |msg: String| Err(layer_error(index, layer, msg));
    let spatial = |out_c: usize, k: usize, stride: usize| -> Result<Vec<usize>> {
        let [c, h, w] = input else {
            return err(format!("needs [channels, height, width] samples, got {input:?}"));
        };
        let _ = c;
        let span = layer.dilation * (k.max(1) - 1) + 1;
        let (hp, wp) = (h + 2 * layer.padding, w + 2 * layer.padding);
        if k == 0 || stride == 0 || span > hp || span > wp {
            return err(format!("kernel {k} (stride {stride}) does not fit a padded {hp}x{wp} input"));
        }
        Ok(vec![out_c, (hp - span) / stride + 1, (wp - span) / stride + 1])
    };
    match &layer.kind {
        LayerKind::Dense { units } => match input.split_last() {
            Some((_, rest)) if *units > 0 => Ok([rest, &[*units]].concat()),
            _ => err(format!("needs units > 0 and a non-scalar input, got units {units}, input {input:?}")),
        },
        LayerKind::Conv2d { filters, kernel } => spatial(*filters, *kernel, layer.stride.unwrap_or(1)),
        LayerKind::MaxPool2d { kernel } | LayerKind::AvgPool2d { kernel } => {
            spatial(input.first().copied().unwrap_or(0), *kernel, layer.stride.unwrap_or(*kernel))
        }
        LayerKind::Dropout { .. } | LayerKind::BatchNorm | LayerKind::LayerNorm => Ok(input.to_vec()),
        LayerKind::Flatten => Ok(vec![input.iter().product()]),
        LayerKind::Rnn { units } | LayerKind::Lstm { units } | LayerKind::Gru { units } => match input {
            [t, _] if layer.return_sequences => Ok(vec![*t, *units]),
            [_, _] => Ok(vec![*units]),
            _ => err(format!("needs [time, features] samples, got {input:?}")),
        },
        LayerKind::Embedding { dim, .. } => Ok([input, &[*dim]].concat()),
    }
}

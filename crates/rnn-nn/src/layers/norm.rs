//! Normalization layers: BatchNorm1d / BatchNorm2d (per-channel statistics over the batch
//! through the fused `Tensor::batch_norm`, running statistics for evaluation), LayerNorm and RmsNorm (statistics over the last dims,
//! through the fused kernels of `Tensor::layer_norm` / `Tensor::rms_norm`).

use rnn_core::{no_grad, Error, Result, Tensor};

use crate::init::bad_config;
use crate::{Init, Module, VarBuilder};

/// Options of a batch normalization layer; the defaults are PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormConfig {
    /// Added to the variance before the square root.
    pub eps: f64,
    /// Weight of the new batch statistic in the running average:
    /// `running = (1 - momentum) * running + momentum * batch`.
    pub momentum: f64,
    /// Learnable per-channel scale ("weight", ones) and shift ("bias", zeros).
    pub affine: bool,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        BatchNormConfig { eps: 1e-5, momentum: 0.1, affine: true }
    }
}

/// The state and forward pass shared by BatchNorm1d and BatchNorm2d: the channel dim is 1,
/// the statistics are taken over every other dim.
#[derive(Clone, Debug)]
struct BatchNorm {
    layer: &'static str,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    running_mean: Tensor,
    running_var: Tensor,
    config: BatchNormConfig,
    training: bool,
}

impl BatchNorm {
    fn new(layer: &'static str, num_features: usize, config: BatchNormConfig, vb: &mut VarBuilder) -> Result<Self> {
        if num_features == 0 {
            return Err(bad_config(layer, "num_features must be > 0"));
        }
        let (weight, bias) = match config.affine {
            true => (Some(vb.var(&[num_features], Init::Ones)?), Some(vb.var(&[num_features], Init::Zeros)?)),
            false => (None, None),
        };
        let running_mean = vb.buffer(&[num_features], 0.0)?;
        let running_var = vb.buffer(&[num_features], 1.0)?;
        Self::from_parts(layer, weight, bias, running_mean, running_var, config)
    }

    fn from_parts(
        layer: &'static str,
        weight: Option<Tensor>,
        bias: Option<Tensor>,
        running_mean: Tensor,
        running_var: Tensor,
        config: BatchNormConfig,
    ) -> Result<Self> {
        if config.eps.is_nan() || config.eps <= 0.0 || !(0.0..=1.0).contains(&config.momentum) {
            let msg = format!("eps {} must be > 0 and momentum {} in [0, 1]", config.eps, config.momentum);
            return Err(bad_config(layer, msg));
        }
        if running_mean.rank() != 1 {
            let shape = running_mean.shape().clone();
            return Err(Error::RankMismatch { op: layer, expected: 1, got: running_mean.rank(), shape });
        }
        let all_match = [Some(&running_var), weight.as_ref(), bias.as_ref()].into_iter().flatten();
        for t in all_match {
            if t.shape() != running_mean.shape() {
                return Err(Error::ShapeMismatch {
                    op: layer,
                    lhs: running_mean.shape().clone(),
                    rhs: t.shape().clone(),
                });
            }
        }
        let config = BatchNormConfig { affine: weight.is_some() || bias.is_some(), ..config };
        Ok(BatchNorm { layer, weight, bias, running_mean, running_var, config, training: true })
    }

    fn num_features(&self) -> usize {
        self.running_mean.dims()[0]
    }

    /// Normalizes `x` of rank in `ranks` with channels at dim 1, adds `residual` when given,
    /// then applies a ReLU when `relu` (both fused into the normalization's pass in training
    /// mode).
    fn forward(&self, x: &Tensor, ranks: &[usize], residual: Option<&Tensor>, relu: bool) -> Result<Tensor> {
        // Batch statistics need f32: inside autocast a 16-bit input is cast up (as PyTorch).
        let x = &rnn_core::autocast::cast(rnn_core::AutocastOp::BatchNorm, x)?;
        if !ranks.contains(&x.rank()) {
            let msg = format!("expected an input of rank {ranks:?}, got shape {:?}", x.shape());
            return Err(Error::invalid(self.layer, msg));
        }
        let c = self.num_features();
        if x.dims()[1] != c {
            let msg = format!("expected {c} channels at dim 1, got input of shape {:?}", x.shape());
            return Err(Error::invalid(self.layer, msg));
        }
        if self.training {
            return self.train_forward(x, residual, relu);
        }
        // Eval: one per-channel scale and shift from the running statistics.
        let mut channel_shape = vec![1; x.rank()];
        channel_shape[1] = c;
        let mut scale = self.running_var.add_scalar(self.config.eps)?.sqrt()?.recip()?;
        if let Some(w) = &self.weight {
            scale = scale.mul(w)?;
        }
        let mut shift = self.running_mean.mul(&scale)?.neg()?;
        if let Some(b) = &self.bias {
            shift = shift.add(b)?;
        }
        let mut y = x.mul(&scale.reshape(channel_shape.clone())?)?.add(&shift.reshape(channel_shape)?)?;
        if let Some(r) = residual {
            y = y.add(r)?;
        }
        if relu {
            y.relu()
        } else {
            Ok(y)
        }
    }

    /// The fused `Tensor::batch_norm` with the batch's statistics; updates the running
    /// statistics with the unbiased variance, as PyTorch does.
    fn train_forward(&self, x: &Tensor, residual: Option<&Tensor>, relu: bool) -> Result<Tensor> {
        let count = x.elem_count() / self.num_features();
        if count < 2 {
            let msg =
                format!("expected more than 1 value per channel when training, got input of shape {:?}", x.shape());
            return Err(Error::invalid(self.layer, msg));
        }
        let (w, b) = (self.weight.as_ref(), self.bias.as_ref());
        let (y, mean, var) = x.batch_norm(w, b, residual, self.config.eps, relu)?;
        let m = self.config.momentum;
        no_grad(|| -> Result<()> {
            let unbiased = var.mul_scalar(count as f64 / (count as f64 - 1.0))?;
            let blend = |running: &Tensor, batch: &Tensor| {
                running.mul_scalar(1.0 - m)?.add(&batch.to_dtype(running.dtype())?.mul_scalar(m)?)
            };
            self.running_mean.assign(&blend(&self.running_mean, &mean)?)?;
            self.running_var.assign(&blend(&self.running_var, &unbiased)?)
        })?;
        Ok(y)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let w = self.weight.iter().map(|w| ("weight".to_string(), w.clone()));
        w.chain(self.bias.iter().map(|b| ("bias".to_string(), b.clone()))).collect()
    }

    fn named_buffers(&self) -> Vec<(String, Tensor)> {
        vec![
            ("running_mean".to_string(), self.running_mean.clone()),
            ("running_var".to_string(), self.running_var.clone()),
        ]
    }
}

/// Defines a batch normalization layer: a named wrapper around `BatchNorm` that accepts
/// inputs of the given ranks.
macro_rules! batch_norm_layer {
    ($(#[$doc:meta])* $name:ident, $ranks:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name(BatchNorm);

        impl $name {
            /// PyTorch's defaults: eps 1e-5, momentum 0.1, weight ones, bias zeros, running
            /// mean zeros, running variance ones; in training mode.
            pub fn new(num_features: usize, vb: &mut VarBuilder) -> Result<Self> {
                Self::with_config(num_features, BatchNormConfig::default(), vb)
            }

            pub fn with_config(num_features: usize, config: BatchNormConfig, vb: &mut VarBuilder) -> Result<Self> {
                Ok($name(BatchNorm::new(stringify!($name), num_features, config, vb)?))
            }

            /// A layer from existing tensors, all `[C]`; it is affine when a weight or a bias
            /// is given (`config.affine` is ignored). The running statistics are updated in place.
            pub fn from_tensors(
                weight: Option<Tensor>,
                bias: Option<Tensor>,
                running_mean: Tensor,
                running_var: Tensor,
                config: BatchNormConfig,
            ) -> Result<Self> {
                let layer = stringify!($name);
                Ok($name(BatchNorm::from_parts(layer, weight, bias, running_mean, running_var, config)?))
            }

            pub fn num_features(&self) -> usize {
                self.0.num_features()
            }

            pub fn config(&self) -> &BatchNormConfig {
                &self.0.config
            }

            pub fn is_training(&self) -> bool {
                self.0.training
            }

            pub fn running_mean(&self) -> &Tensor {
                &self.0.running_mean
            }

            pub fn running_var(&self) -> &Tensor {
                &self.0.running_var
            }

            /// `relu(self.forward(xs))`; in training mode the ReLU is applied in the
            /// normalization's output pass and its gradient in the normalization's backward.
            pub fn forward_relu(&self, xs: &Tensor) -> Result<Tensor> {
                self.0.forward(xs, $ranks, None, true)
            }

            /// `relu(self.forward(xs) + residual)`, the end of a ResNet block; in training
            /// mode the add and the ReLU are part of the normalization's output pass, and
            /// their gradients of its backward.
            pub fn forward_add_relu(&self, xs: &Tensor, residual: &Tensor) -> Result<Tensor> {
                self.0.forward(xs, $ranks, Some(residual), true)
            }
        }

        impl Module for $name {
            fn forward(&self, xs: &Tensor) -> Result<Tensor> {
                self.0.forward(xs, $ranks, None, false)
            }

            fn named_parameters(&self) -> Vec<(String, Tensor)> {
                self.0.named_parameters()
            }

            fn named_buffers(&self) -> Vec<(String, Tensor)> {
                self.0.named_buffers()
            }

            fn set_training(&mut self, training: bool) {
                self.0.training = training;
            }
        }
    };
}

batch_norm_layer!(
    /// Batch normalization of `[N, C]` or `[N, C, L]` inputs, per channel C.
    BatchNorm1d,
    &[2, 3]
);
batch_norm_layer!(
    /// Batch normalization of `[N, C, H, W]` inputs, per channel C.
    BatchNorm2d,
    &[4]
);

/// Options of a `LayerNorm`; the defaults are PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormConfig {
    pub eps: f64,
    /// A learnable elementwise scale ("weight", ones) of the normalized shape.
    pub elementwise_affine: bool,
    /// A learnable elementwise shift ("bias", zeros); only with `elementwise_affine`.
    pub bias: bool,
}

impl Default for LayerNormConfig {
    fn default() -> Self {
        LayerNormConfig { eps: 1e-5, elementwise_affine: true, bias: true }
    }
}

/// Normalizes over the last dims (`normalized_shape`) of each input, with the biased
/// variance, then scales and shifts elementwise.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    normalized_shape: Vec<usize>,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    eps: f64,
}

impl LayerNorm {
    pub fn new(normalized_shape: &[usize], vb: &mut VarBuilder) -> Result<Self> {
        Self::with_config(normalized_shape, LayerNormConfig::default(), vb)
    }

    pub fn with_config(normalized_shape: &[usize], config: LayerNormConfig, vb: &mut VarBuilder) -> Result<Self> {
        let weight = config.elementwise_affine.then(|| vb.var(normalized_shape, Init::Ones)).transpose()?;
        let with_bias = config.elementwise_affine && config.bias;
        let bias = with_bias.then(|| vb.var(normalized_shape, Init::Zeros)).transpose()?;
        Self::from_tensors(normalized_shape, weight, bias, config.eps)
    }

    /// A layer from existing tensors, each of `normalized_shape`.
    pub fn from_tensors(
        normalized_shape: &[usize],
        weight: Option<Tensor>,
        bias: Option<Tensor>,
        eps: f64,
    ) -> Result<Self> {
        if normalized_shape.is_empty() || normalized_shape.contains(&0) || eps.is_nan() || eps <= 0.0 {
            let msg = format!("normalized_shape {normalized_shape:?} must be non-empty with sizes > 0, eps {eps} > 0");
            return Err(bad_config("LayerNorm", msg));
        }
        for t in [weight.as_ref(), bias.as_ref()].into_iter().flatten() {
            if t.dims() != normalized_shape {
                return Err(Error::ShapeMismatch {
                    op: "LayerNorm",
                    lhs: normalized_shape.into(),
                    rhs: t.shape().clone(),
                });
            }
        }
        Ok(LayerNorm { normalized_shape: normalized_shape.to_vec(), weight, bias, eps })
    }

    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    pub fn eps(&self) -> f64 {
        self.eps
    }
}

/// Checks that `xs` ends in `normalized_shape`; returns `xs` with those dims flattened into
/// one (the fused norms normalize over the last dim) and the shape to restore afterwards.
fn flatten_normalized(layer: &'static str, xs: &Tensor, normalized_shape: &[usize]) -> Result<Tensor> {
    let k = normalized_shape.len();
    if xs.rank() < k || xs.dims()[xs.rank() - k..] != normalized_shape[..] {
        let msg = format!("expected an input ending in {normalized_shape:?}, got shape {:?}", xs.shape());
        return Err(Error::invalid(layer, msg));
    }
    if k == 1 {
        return Ok(xs.clone());
    }
    let mut dims = xs.dims()[..xs.rank() - k].to_vec();
    dims.push(normalized_shape.iter().product());
    xs.reshape(dims)
}

/// A parameter of `normalized_shape` as the fused norms take it: one flat dim.
fn flat(t: &Option<Tensor>) -> Result<Option<Tensor>> {
    t.as_ref().map(|t| t.flatten_all()).transpose()
}

impl Module for LayerNorm {
    /// The fused `Tensor::layer_norm` over the last `normalized_shape.len()` dims (flattened
    /// into one).
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let x = flatten_normalized("LayerNorm", xs, &self.normalized_shape)?;
        let (w, b) = (flat(&self.weight)?, flat(&self.bias)?);
        x.layer_norm(w.as_ref(), b.as_ref(), self.eps)?.reshape(xs.shape().clone())
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let w = self.weight.iter().map(|w| ("weight".to_string(), w.clone()));
        w.chain(self.bias.iter().map(|b| ("bias".to_string(), b.clone()))).collect()
    }
}

/// Options of an `RmsNorm`; the defaults are PyTorch's `nn.RMSNorm`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNormConfig {
    /// Added to the mean square; `None`: the machine epsilon of the input's dtype.
    pub eps: Option<f64>,
    /// A learnable elementwise scale ("weight", ones) of the normalized shape.
    pub elementwise_affine: bool,
}

impl Default for RmsNormConfig {
    fn default() -> Self {
        RmsNormConfig { eps: None, elementwise_affine: true }
    }
}

/// Root-mean-square normalization over the last dims (`normalized_shape`), like PyTorch's
/// `nn.RMSNorm`: `x / sqrt(mean(x²) + eps) * weight`, through the fused `Tensor::rms_norm`.
#[derive(Clone, Debug)]
pub struct RmsNorm {
    normalized_shape: Vec<usize>,
    weight: Option<Tensor>,
    eps: Option<f64>,
}

impl RmsNorm {
    pub fn new(normalized_shape: &[usize], vb: &mut VarBuilder) -> Result<Self> {
        Self::with_config(normalized_shape, RmsNormConfig::default(), vb)
    }

    pub fn with_config(normalized_shape: &[usize], config: RmsNormConfig, vb: &mut VarBuilder) -> Result<Self> {
        let weight = config.elementwise_affine.then(|| vb.var(normalized_shape, Init::Ones)).transpose()?;
        Self::from_tensors(normalized_shape, weight, config.eps)
    }

    /// A layer from an existing weight of `normalized_shape` (or none).
    pub fn from_tensors(normalized_shape: &[usize], weight: Option<Tensor>, eps: Option<f64>) -> Result<Self> {
        let bad_eps = eps.is_some_and(|e| !(e >= 0.0 && e.is_finite()));
        if normalized_shape.is_empty() || normalized_shape.contains(&0) || bad_eps {
            let msg =
                format!("normalized_shape {normalized_shape:?} must be non-empty with sizes > 0, eps {eps:?} >= 0");
            return Err(bad_config("RmsNorm", msg));
        }
        if let Some(w) = &weight {
            if w.dims() != normalized_shape {
                return Err(Error::ShapeMismatch {
                    op: "RmsNorm",
                    lhs: normalized_shape.into(),
                    rhs: w.shape().clone(),
                });
            }
        }
        Ok(RmsNorm { normalized_shape: normalized_shape.to_vec(), weight, eps })
    }

    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    pub fn eps(&self) -> Option<f64> {
        self.eps
    }
}

impl Module for RmsNorm {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let x = flatten_normalized("RmsNorm", xs, &self.normalized_shape)?;
        x.rms_norm(flat(&self.weight)?.as_ref(), self.eps)?.reshape(xs.shape().clone())
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.weight.iter().map(|w| ("weight".to_string(), w.clone())).collect()
    }
}

//! The constructors of `rnn.nn`'s layers: one function per rnn-nn layer, each returning a
//! `_Layer` (see `nn.rs`) with PyTorch's argument names and defaults.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rnn_core::Result;
use rnn_nn::{
    Activation, AvgPool2d, BatchNorm1d, BatchNorm2d, BatchNormConfig, Conv2d, Conv2dConfig, Dropout, Embedding,
    Flatten, Gru, LayerNorm, LayerNormConfig, Linear, Lstm, MaxPool2d, MultiHeadAttention, Pool2dConfig,
    RecurrentConfig, RmsNorm, RmsNormConfig, Rnn, RnnNonlinearity, VarBuilder,
};

use crate::nn::{LayerImpl, PyLayer, Recipe};

type Arg<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// A `_Layer` from a recipe (see `PyLayer::build`).
fn layer(
    py: Python<'_>,
    description: String,
    device: Arg,
    dtype: Arg,
    recipe: impl Fn(&mut VarBuilder) -> Result<LayerImpl> + Send + Sync + 'static,
) -> PyResult<PyLayer> {
    let recipe: Recipe = std::sync::Arc::new(recipe);
    PyLayer::build(py, description, device, dtype, recipe)
}

/// An `int` or a pair of ints (PyTorch's `_size_2_t`).
fn pair(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<(usize, usize)> {
    if let Ok(n) = obj.extract::<usize>() {
        return Ok((n, n));
    }
    obj.extract::<(usize, usize)>()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a non-negative int or a pair of them, got {obj}")))
}

/// An `int` or a sequence of ints (a normalized shape).
fn shape(obj: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if let Ok(n) = obj.extract::<usize>() {
        return Ok(vec![n]);
    }
    obj.extract::<Vec<usize>>()
        .map_err(|_| PyValueError::new_err(format!("normalized_shape must be an int or a list of ints, got {obj}")))
}

#[pyfunction]
#[pyo3(signature = (in_features, out_features, bias = true, device = None, dtype = None))]
fn _linear(
    py: Python<'_>,
    in_features: usize,
    out_features: usize,
    bias: bool,
    device: Arg,
    dtype: Arg,
) -> PyResult<PyLayer> {
    let text = format!("Linear(in_features={in_features}, out_features={out_features}, bias={})", py_bool(bias));
    layer(py, text, device, dtype, move |vb| {
        let init = rnn_nn::Init::FanInUniform;
        Ok(LayerImpl::plain(Linear::with_init(in_features, out_features, init, bias, vb)?))
    })
}

#[pyfunction]
#[pyo3(signature = (in_channels, out_channels, kernel_size, stride = None, padding = None, dilation = None,
                    groups = 1, bias = true, device = None, dtype = None))]
#[allow(clippy::too_many_arguments)]
fn _conv2d(
    py: Python<'_>,
    in_channels: usize,
    out_channels: usize,
    kernel_size: &Bound<'_, PyAny>,
    stride: Arg,
    padding: Arg,
    dilation: Arg,
    groups: usize,
    bias: bool,
    device: Arg,
    dtype: Arg,
) -> PyResult<PyLayer> {
    let kernel = pair(kernel_size, "kernel_size")?;
    let or_default = |arg: Arg, name, default| arg.map_or(Ok(default), |a| pair(a, name));
    let config = Conv2dConfig {
        stride: or_default(stride, "stride", (1, 1))?,
        padding: or_default(padding, "padding", (0, 0))?,
        dilation: or_default(dilation, "dilation", (1, 1))?,
        groups,
        bias,
    };
    let text = format!(
        "Conv2d({in_channels}, {out_channels}, kernel_size={kernel:?}, stride={:?}, padding={:?})",
        config.stride, config.padding
    );
    layer(py, text, device, dtype, move |vb| {
        Ok(LayerImpl::plain(Conv2d::new(in_channels, out_channels, kernel, config, vb)?))
    })
}

/// Max (`max = true`) or average pooling.
#[pyfunction]
#[pyo3(signature = (max, kernel_size, stride = None, padding = None, dilation = None))]
fn _pool2d(
    py: Python<'_>,
    max: bool,
    kernel_size: &Bound<'_, PyAny>,
    stride: Arg,
    padding: Arg,
    dilation: Arg,
) -> PyResult<PyLayer> {
    let kernel = pair(kernel_size, "kernel_size")?;
    let config = Pool2dConfig {
        stride: stride.filter(|s| !s.is_none()).map(|s| pair(s, "stride")).transpose()?,
        padding: padding.map_or(Ok((0, 0)), |p| pair(p, "padding"))?,
        dilation: dilation.map_or(Ok((1, 1)), |d| pair(d, "dilation"))?,
    };
    let name = if max { "MaxPool2d" } else { "AvgPool2d" };
    let text = format!(
        "{name}(kernel_size={kernel:?}, stride={:?}, padding={:?})",
        config.stride.unwrap_or(kernel),
        config.padding
    );
    layer(py, text, None, None, move |_| match max {
        true => Ok(LayerImpl::plain(MaxPool2d::with_config(kernel, config)?)),
        false => Ok(LayerImpl::plain(AvgPool2d::with_config(kernel, config)?)),
    })
}

/// BatchNorm1d (`spatial = false`) or BatchNorm2d.
#[pyfunction]
#[pyo3(signature = (spatial, num_features, eps = 1e-5, momentum = 0.1, affine = true, device = None, dtype = None))]
#[allow(clippy::too_many_arguments)]
fn _batch_norm(
    py: Python<'_>,
    spatial: bool,
    num_features: usize,
    eps: f64,
    momentum: f64,
    affine: bool,
    device: Arg,
    dtype: Arg,
) -> PyResult<PyLayer> {
    let config = BatchNormConfig { eps, momentum, affine };
    let name = if spatial { "BatchNorm2d" } else { "BatchNorm1d" };
    let text = format!("{name}({num_features}, eps={eps}, momentum={momentum}, affine={})", py_bool(affine));
    layer(py, text, device, dtype, move |vb| match spatial {
        true => Ok(LayerImpl::plain(BatchNorm2d::with_config(num_features, config, vb)?)),
        false => Ok(LayerImpl::plain(BatchNorm1d::with_config(num_features, config, vb)?)),
    })
}

#[pyfunction]
#[pyo3(signature = (normalized_shape, eps = 1e-5, elementwise_affine = true, bias = true, device = None, dtype = None))]
fn _layer_norm(
    py: Python<'_>,
    normalized_shape: &Bound<'_, PyAny>,
    eps: f64,
    elementwise_affine: bool,
    bias: bool,
    device: Arg,
    dtype: Arg,
) -> PyResult<PyLayer> {
    let dims = shape(normalized_shape)?;
    let config = LayerNormConfig { eps, elementwise_affine, bias };
    let text = format!("LayerNorm({dims:?}, eps={eps}, elementwise_affine={})", py_bool(elementwise_affine));
    layer(py, text, device, dtype, move |vb| Ok(LayerImpl::plain(LayerNorm::with_config(&dims, config, vb)?)))
}

#[pyfunction]
#[pyo3(signature = (normalized_shape, eps = None, elementwise_affine = true, device = None, dtype = None))]
fn _rms_norm(
    py: Python<'_>,
    normalized_shape: &Bound<'_, PyAny>,
    eps: Option<f64>,
    elementwise_affine: bool,
    device: Arg,
    dtype: Arg,
) -> PyResult<PyLayer> {
    let dims = shape(normalized_shape)?;
    let config = RmsNormConfig { eps, elementwise_affine };
    let text = format!("RMSNorm({dims:?}, eps={eps:?}, elementwise_affine={})", py_bool(elementwise_affine));
    layer(py, text, device, dtype, move |vb| Ok(LayerImpl::plain(RmsNorm::with_config(&dims, config, vb)?)))
}

#[pyfunction]
#[pyo3(signature = (p = 0.5))]
fn _dropout(py: Python<'_>, p: f64) -> PyResult<PyLayer> {
    layer(py, format!("Dropout(p={p})"), None, None, move |_| Ok(LayerImpl::plain(Dropout::new(p)?)))
}

#[pyfunction]
#[pyo3(signature = (start_dim = 1, end_dim = -1))]
fn _flatten(py: Python<'_>, start_dim: i64, end_dim: i64) -> PyResult<PyLayer> {
    let text = format!("Flatten(start_dim={start_dim}, end_dim={end_dim})");
    layer(py, text, None, None, move |_| Ok(LayerImpl::plain(Flatten::new(start_dim, end_dim))))
}

#[pyfunction]
#[pyo3(signature = (num_embeddings, embedding_dim, device = None, dtype = None))]
fn _embedding(
    py: Python<'_>,
    num_embeddings: usize,
    embedding_dim: usize,
    device: Arg,
    dtype: Arg,
) -> PyResult<PyLayer> {
    let text = format!("Embedding({num_embeddings}, {embedding_dim})");
    layer(py, text, device, dtype, move |vb| Ok(LayerImpl::plain(Embedding::new(num_embeddings, embedding_dim, vb)?)))
}

/// An activation layer by name: identity, relu, leaky_relu, sigmoid, tanh, gelu (exact),
/// gelu_tanh, silu, softmax (over the last dim).
#[pyfunction]
#[pyo3(signature = (name, negative_slope = 0.01))]
fn _activation(py: Python<'_>, name: &str, negative_slope: f64) -> PyResult<PyLayer> {
    let activation = match name {
        "identity" => Activation::Identity,
        "relu" => Activation::Relu,
        "leaky_relu" => Activation::LeakyRelu(negative_slope),
        "sigmoid" => Activation::Sigmoid,
        "tanh" => Activation::Tanh,
        "gelu" => Activation::GeluErf,
        "gelu_tanh" => Activation::Gelu,
        "silu" => Activation::Silu,
        "softmax" => Activation::Softmax,
        other => return Err(PyValueError::new_err(format!("unknown activation '{other}'"))),
    };
    layer(py, format!("{activation:?}"), None, None, move |_| Ok(LayerImpl::plain(activation)))
}

#[pyfunction]
#[pyo3(signature = (embed_dim, num_heads, bias = true, device = None, dtype = None))]
fn _multihead_attention(
    py: Python<'_>,
    embed_dim: usize,
    num_heads: usize,
    bias: bool,
    device: Arg,
    dtype: Arg,
) -> PyResult<PyLayer> {
    let text = format!("MultiheadAttention(embed_dim={embed_dim}, num_heads={num_heads}, bias={})", py_bool(bias));
    layer(py, text, device, dtype, move |vb| {
        Ok(LayerImpl::Attention(MultiHeadAttention::with_bias(embed_dim, num_heads, bias, vb)?))
    })
}

/// RNN (`kind = "rnn"`, with `nonlinearity` tanh or relu), LSTM or GRU; inputs
/// `[batch, time, features]` when `batch_first` (the default here), the output sequence out.
#[pyfunction]
#[pyo3(signature = (kind, input_size, hidden_size, num_layers = 1, bias = true, batch_first = true,
                    nonlinearity = "tanh", device = None, dtype = None))]
#[allow(clippy::too_many_arguments)]
fn _recurrent(
    py: Python<'_>,
    kind: &str,
    input_size: usize,
    hidden_size: usize,
    num_layers: usize,
    bias: bool,
    batch_first: bool,
    nonlinearity: &str,
    device: Arg,
    dtype: Arg,
) -> PyResult<PyLayer> {
    let config = RecurrentConfig { num_layers, bias, batch_first };
    let act = match nonlinearity {
        "tanh" => RnnNonlinearity::Tanh,
        "relu" => RnnNonlinearity::Relu,
        other => return Err(PyValueError::new_err(format!("nonlinearity must be 'tanh' or 'relu', got '{other}'"))),
    };
    let text = format!("{}({input_size}, {hidden_size}, num_layers={num_layers})", kind.to_uppercase());
    let kind = kind.to_string();
    if !["rnn", "lstm", "gru"].contains(&kind.as_str()) {
        return Err(PyValueError::new_err(format!("unknown recurrent layer '{kind}'")));
    }
    layer(py, text, device, dtype, move |vb| match kind.as_str() {
        "lstm" => Ok(LayerImpl::plain(Lstm::new(input_size, hidden_size, config, vb)?)),
        "gru" => Ok(LayerImpl::plain(Gru::new(input_size, hidden_size, config, vb)?)),
        _ => Ok(LayerImpl::plain(Rnn::new(input_size, hidden_size, act, config, vb)?)),
    })
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_linear, m)?)?;
    m.add_function(wrap_pyfunction!(_conv2d, m)?)?;
    m.add_function(wrap_pyfunction!(_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(_batch_norm, m)?)?;
    m.add_function(wrap_pyfunction!(_layer_norm, m)?)?;
    m.add_function(wrap_pyfunction!(_rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(_dropout, m)?)?;
    m.add_function(wrap_pyfunction!(_flatten, m)?)?;
    m.add_function(wrap_pyfunction!(_embedding, m)?)?;
    m.add_function(wrap_pyfunction!(_activation, m)?)?;
    m.add_function(wrap_pyfunction!(_multihead_attention, m)?)?;
    m.add_function(wrap_pyfunction!(_recurrent, m)?)
}

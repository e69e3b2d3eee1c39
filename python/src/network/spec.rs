//! The vocabulary of `rnn.Network`'s builder, mirroring the Rust names:
//! `ActivationFunction.ReLU`, `LossFunction.CategoricalCrossEntropy`,
//! `LayerBuilder.dense(128).activation(ActivationFunction.ReLU)`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use rnn_train::{ActivationFunction, LayerBuilder, LossFunction};

/// The activation after a layer: ``ActivationFunction.ReLU``, ``.Sigmoid``, ``.Tanh``,
/// ``.GELU`` (tanh approximation), ``.Swish``, ``.Softmax``, ``.Linear`` (none) or
/// ``ActivationFunction.LeakyReLU(slope)``. Where one is expected, its name as a string
/// (``"relu"``, ``"softmax"``, ...) is accepted too.
#[pyclass(name = "ActivationFunction", module = "rnn", frozen, eq)]
#[derive(Clone, Copy, PartialEq)]
pub struct PyActivation(pub ActivationFunction);

#[pymethods]
#[allow(non_snake_case)]
impl PyActivation {
    #[classattr]
    fn Linear() -> Self {
        PyActivation(ActivationFunction::Linear)
    }
    #[classattr]
    fn ReLU() -> Self {
        PyActivation(ActivationFunction::ReLU)
    }
    #[classattr]
    fn Sigmoid() -> Self {
        PyActivation(ActivationFunction::Sigmoid)
    }
    #[classattr]
    fn Tanh() -> Self {
        PyActivation(ActivationFunction::Tanh)
    }
    #[classattr]
    fn GELU() -> Self {
        PyActivation(ActivationFunction::GELU)
    }
    #[classattr]
    fn Swish() -> Self {
        PyActivation(ActivationFunction::Swish)
    }
    #[classattr]
    fn Softmax() -> Self {
        PyActivation(ActivationFunction::Softmax)
    }
    /// ``x`` where ``x > 0``, else ``slope * x``.
    #[staticmethod]
    fn LeakyReLU(slope: f64) -> Self {
        PyActivation(ActivationFunction::LeakyReLU(slope))
    }

    fn __repr__(&self) -> String {
        format!("ActivationFunction.{:?}", self.0)
    }
}

/// An activation from an `ActivationFunction` or its name (case-insensitive).
pub fn activation_from_py(obj: &Bound<'_, PyAny>) -> PyResult<ActivationFunction> {
    if let Ok(a) = obj.cast::<PyActivation>() {
        return Ok(a.get().0);
    }
    let Ok(name) = obj.cast::<PyString>() else {
        return Err(PyTypeError::new_err(format!("expected an ActivationFunction or its name, got {obj}")));
    };
    let name: String = name.extract()?;
    Ok(match name.to_ascii_lowercase().as_str() {
        "linear" | "none" | "identity" => ActivationFunction::Linear,
        "relu" => ActivationFunction::ReLU,
        "leaky_relu" | "leakyrelu" => ActivationFunction::LeakyReLU(0.01),
        "sigmoid" => ActivationFunction::Sigmoid,
        "tanh" => ActivationFunction::Tanh,
        "gelu" => ActivationFunction::GELU,
        "swish" | "silu" => ActivationFunction::Swish,
        "softmax" => ActivationFunction::Softmax,
        other => return Err(PyValueError::new_err(format!("unknown activation '{other}'"))),
    })
}

/// The training objective: ``LossFunction.CategoricalCrossEntropy`` (class ids or one-hot
/// labels), ``.MeanSquaredError``, ``.BinaryCrossEntropy`` or ``LossFunction.Huber(delta)``.
#[pyclass(name = "LossFunction", module = "rnn", frozen, eq)]
#[derive(Clone, Copy, PartialEq)]
pub struct PyLoss(pub LossFunction);

#[pymethods]
#[allow(non_snake_case)]
impl PyLoss {
    #[classattr]
    fn CategoricalCrossEntropy() -> Self {
        PyLoss(LossFunction::CategoricalCrossEntropy)
    }
    #[classattr]
    fn MeanSquaredError() -> Self {
        PyLoss(LossFunction::MeanSquaredError)
    }
    #[classattr]
    fn BinaryCrossEntropy() -> Self {
        PyLoss(LossFunction::BinaryCrossEntropy)
    }
    #[staticmethod]
    fn Huber(delta: f64) -> Self {
        PyLoss(LossFunction::Huber(delta))
    }

    fn __repr__(&self) -> String {
        format!("LossFunction.{:?}", self.0)
    }
}

/// One layer of a `Network`, Keras style: ``LayerBuilder.dense(128).activation("relu")``.
/// Each method returns a new builder.
#[pyclass(name = "LayerBuilder", module = "rnn", frozen)]
#[derive(Clone)]
pub struct PyLayerBuilder(pub LayerBuilder);

#[pymethods]
impl PyLayerBuilder {
    /// A fully connected layer of ``units`` outputs.
    #[staticmethod]
    fn dense(units: usize) -> Self {
        PyLayerBuilder(LayerBuilder::dense(units))
    }
    /// A 2-D convolution over ``[C, H, W]`` samples with a square kernel.
    #[staticmethod]
    fn conv2d(filters: usize, kernel: usize) -> Self {
        PyLayerBuilder(LayerBuilder::conv2d(filters, kernel))
    }
    #[staticmethod]
    fn max_pool2d(kernel: usize) -> Self {
        PyLayerBuilder(LayerBuilder::max_pool2d(kernel))
    }
    #[staticmethod]
    fn avg_pool2d(kernel: usize) -> Self {
        PyLayerBuilder(LayerBuilder::avg_pool2d(kernel))
    }
    #[staticmethod]
    fn dropout(rate: f64) -> Self {
        PyLayerBuilder(LayerBuilder::dropout(rate))
    }
    #[staticmethod]
    fn batch_norm() -> Self {
        PyLayerBuilder(LayerBuilder::batch_norm())
    }
    #[staticmethod]
    fn layer_norm() -> Self {
        PyLayerBuilder(LayerBuilder::layer_norm())
    }
    #[staticmethod]
    fn flatten() -> Self {
        PyLayerBuilder(LayerBuilder::flatten())
    }
    /// An Elman RNN (tanh) over ``[T, F]`` samples.
    #[staticmethod]
    fn rnn(units: usize) -> Self {
        PyLayerBuilder(LayerBuilder::rnn(units))
    }
    #[staticmethod]
    fn lstm(units: usize) -> Self {
        PyLayerBuilder(LayerBuilder::lstm(units))
    }
    #[staticmethod]
    fn gru(units: usize) -> Self {
        PyLayerBuilder(LayerBuilder::gru(units))
    }
    /// Token ids (numbers in the input) to vectors of ``dim``.
    #[staticmethod]
    fn embedding(vocab: usize, dim: usize) -> Self {
        PyLayerBuilder(LayerBuilder::embedding(vocab, dim))
    }

    /// This layer followed by ``activation`` (an ActivationFunction or its name).
    fn activation(&self, activation: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyLayerBuilder(self.0.clone().activation(activation_from_py(activation)?)))
    }
    fn stride(&self, stride: usize) -> Self {
        PyLayerBuilder(self.0.clone().stride(stride))
    }
    fn padding(&self, padding: usize) -> Self {
        PyLayerBuilder(self.0.clone().padding(padding))
    }
    fn dilation(&self, dilation: usize) -> Self {
        PyLayerBuilder(self.0.clone().dilation(dilation))
    }
    fn groups(&self, groups: usize) -> Self {
        PyLayerBuilder(self.0.clone().groups(groups))
    }
    fn use_bias(&self, use_bias: bool) -> Self {
        PyLayerBuilder(self.0.clone().use_bias(use_bias))
    }
    fn num_layers(&self, num_layers: usize) -> Self {
        PyLayerBuilder(self.0.clone().num_layers(num_layers))
    }
    fn return_sequences(&self, return_sequences: bool) -> Self {
        PyLayerBuilder(self.0.clone().return_sequences(return_sequences))
    }

    /// A short description such as ``dense(512, ReLU)``.
    fn describe(&self) -> String {
        self.0.describe()
    }

    fn __repr__(&self) -> String {
        format!("LayerBuilder.{}", self.0.describe())
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyActivation>()?;
    m.add_class::<PyLoss>()?;
    m.add_class::<PyLayerBuilder>()
}

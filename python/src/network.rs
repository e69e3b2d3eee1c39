//! `rnn.Network`: rnn-train's Keras-like model, built as in Rust,
//!
//! ```python
//! net = (rnn.Network.with_input_size(784)
//!        .add_layer(rnn.LayerBuilder.dense(128).activation(rnn.ActivationFunction.ReLU))
//!        .add_layer(rnn.LayerBuilder.dense(10).activation(rnn.ActivationFunction.Softmax))
//!        .loss(rnn.LossFunction.CategoricalCrossEntropy)
//!        .build())
//! history = net.train(x, y, max_epochs=5, validation_split=0.2)
//! ```
//!
//! and trained, evaluated and used on numpy arrays (or Tensors). Training runs in Rust with
//! the GIL released; its progress goes to stderr (a bar on a terminal, lines otherwise).

mod config;
mod spec;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rnn_train::{Network, NetworkBuilder};

use self::config::{PyEvaluation, PyHistory, PyTrainingConfig};
use self::spec::{PyLayerBuilder, PyLoss};
use crate::device::{device_from_py, PyDevice};
use crate::errors::without_gil;
use crate::nn::named_to_py;
use crate::numpy_io::{tensor_from_py, tensor_to_numpy};
use crate::tensor::PyTensor;

/// Collects layers; ``build()`` checks the shapes and creates the parameters. Each method
/// returns a new builder.
#[pyclass(name = "NetworkBuilder", module = "rnn", frozen)]
pub struct PyNetworkBuilder(NetworkBuilder);

#[pymethods]
impl PyNetworkBuilder {
    fn add_layer(&self, layer: &PyLayerBuilder) -> Self {
        PyNetworkBuilder(self.0.clone().add_layer(layer.0.clone()))
    }

    fn loss(&self, loss: &PyLoss) -> Self {
        PyNetworkBuilder(self.0.clone().loss(loss.0))
    }

    /// Seed of the initial weights (default 42): the same seed builds the same network.
    fn seed(&self, seed: u64) -> Self {
        PyNetworkBuilder(self.0.clone().seed(seed))
    }

    /// The network (f32 parameters on the CPU; ``train`` moves them to its device).
    fn build(&self, py: Python<'_>) -> PyResult<PyNetwork> {
        let builder = self.0.clone();
        Ok(PyNetwork(without_gil(py, move || builder.build())?))
    }
}

/// A feed-forward stack of layers with a loss (see ``Network.with_input_size``).
#[pyclass(name = "Network", module = "rnn")]
pub struct PyNetwork(Network);

#[pymethods]
impl PyNetwork {
    /// A builder for a network taking flat samples of ``size`` features (``[n, size]`` inputs).
    #[staticmethod]
    fn with_input_size(size: usize) -> PyResult<PyNetworkBuilder> {
        Ok(PyNetworkBuilder(crate::errors::PyErrExt::py_err(Network::with_input_size(size))?))
    }

    /// A builder for a network taking samples of ``shape`` (``[1, 28, 28]`` for images,
    /// ``[T, F]`` for sequences); inputs are ``[n, *shape]``.
    #[staticmethod]
    fn with_input_shape(shape: Vec<usize>) -> PyResult<PyNetworkBuilder> {
        Ok(PyNetworkBuilder(crate::errors::PyErrExt::py_err(Network::with_input_shape(&shape))?))
    }

    /// Rebuilds a network saved by ``save`` (on the CPU).
    #[staticmethod]
    fn load(py: Python<'_>, path: std::path::PathBuf) -> PyResult<PyNetwork> {
        Ok(PyNetwork(without_gil(py, move || Network::load(&path))?))
    }

    /// Trains on ``x`` (``[n, *input_shape]``) and ``y`` (class ids ``[n]``, one-hot rows, or
    /// targets shaped like the outputs) and returns the ``History``. Settings come from
    /// ``config`` (a ``TrainingConfig``) and keyword overrides of its fields, e.g.
    /// ``train(x, y, max_epochs=5, batch_size=64, validation_split=0.1)``. A second call
    /// continues the first (optimizer state, schedule), as Keras' ``fit`` does. Progress is
    /// printed on stderr unless ``verbose=False``.
    #[pyo3(signature = (x, y, config = None, **kwargs))]
    fn train(
        &mut self,
        py: Python<'_>,
        x: &Bound<'_, PyAny>,
        y: &Bound<'_, PyAny>,
        config: Option<PyTrainingConfig>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyHistory> {
        let config = PyTrainingConfig::with_overrides(py, config.unwrap_or_default(), kwargs)?.to_rust()?;
        let (x, y) = (tensor_from_py(x)?, tensor_from_py(y)?);
        let net = &mut self.0;
        Ok(without_gil(py, move || net.train(&x, &y, &config))?.into())
    }

    /// Loss and accuracy on ``x``, ``y`` (evaluation mode, no gradients).
    fn evaluate(&self, py: Python<'_>, x: &Bound<'_, PyAny>, y: &Bound<'_, PyAny>) -> PyResult<PyEvaluation> {
        let (x, y) = (tensor_from_py(x)?, tensor_from_py(y)?);
        Ok(without_gil(py, || self.0.evaluate(&x, &y))?.into())
    }

    /// The outputs (final activation included) for ``[n, *input_shape]`` inputs, as numpy.
    fn predict(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let x = tensor_from_py(x)?;
        let out = without_gil(py, || self.0.predict(&x))?;
        tensor_to_numpy(py, &out)
    }

    /// The most likely class of each sample, as a numpy uint32 array.
    fn predict_classes(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let x = tensor_from_py(x)?;
        let classes = without_gil(py, || {
            let ids = self.0.predict_classes(&x)?;
            let n = ids.len();
            rnn_core::Tensor::from_vec(ids, n, rnn_core::Device::Cpu)
        })?;
        tensor_to_numpy(py, &classes)
    }

    /// Writes the network (architecture and weights) to a safetensors file, atomically;
    /// weights holding NaN or infinity are refused.
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        without_gil(py, || self.0.save(&path))
    }

    /// Loads the weights of a file saved by ``save`` into this network (same architecture).
    fn load_weights(&mut self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let net = &mut self.0;
        without_gil(py, move || net.load_weights(&path))
    }

    /// Moves the parameters to ``device`` (a Device or a name such as ``"cpu"``).
    #[allow(clippy::wrong_self_convention)] // the Rust API's name (`Network::to_device`)
    fn to_device(&mut self, py: Python<'_>, device: &Bound<'_, PyAny>) -> PyResult<()> {
        let device = device_from_py(Some(device))?;
        let net = &mut self.0;
        without_gil(py, move || net.to_device(device))
    }

    /// Forgets the optimizer state that ``train`` carries from one call to the next.
    fn reset_optimizer(&mut self) {
        self.0.reset_optimizer();
    }

    /// Trainable tensors, named ``layers.<i>.<name>``.
    fn named_parameters(&self) -> Vec<(String, PyTensor)> {
        named_to_py(self.0.named_parameters())
    }

    /// Parameters and buffers by name (what ``save`` writes), sharing the network's storage.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (name, t) in named_to_py(self.0.state()) {
            dict.set_item(name, t)?;
        }
        Ok(dict)
    }

    fn num_parameters(&self) -> usize {
        self.0.num_parameters()
    }

    /// One line per layer with its output shape and parameter count.
    fn summary(&self) -> String {
        self.0.summary()
    }

    #[getter]
    fn input_shape(&self) -> Vec<usize> {
        self.0.input_shape().to_vec()
    }

    #[getter]
    fn output_shape(&self) -> Vec<usize> {
        self.0.output_shape().to_vec()
    }

    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice { inner: self.0.device() }
    }

    fn __repr__(&self) -> String {
        self.0.summary()
    }
}

pub fn register(py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyNetworkBuilder>()?;
    m.add_class::<PyNetwork>()?;
    spec::register(py, m)?;
    config::register(py, m)
}

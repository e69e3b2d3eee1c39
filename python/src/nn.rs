//! `rnn.nn`'s native part: `_Layer`, one rnn-nn layer behind a Python handle.
//!
//! Each Python layer class of `rnn/nn.py` (`Linear`, `Conv2d`, ...) holds a `_Layer` made by
//! one of the constructor functions of `nn/layers.rs`. A `_Layer` keeps the recipe that
//! built it, so `to(device, dtype)` can rebuild the layer elsewhere and copy its state in.
//! Losses are in `nn/losses.rs`, state dicts and safetensors files in `nn/state.rs`.

mod layers;
mod losses;
mod state;

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use rnn_core::{DType, Device, Result, Tensor};
use rnn_nn::{Module, MultiHeadAttention, VarBuilder};
use rnn_train::checkpoint::{self, Checkpoint};

use crate::autograd::{slot_for, GradSlot};
use crate::device::{device_from_py, device_or, PyDevice};
use crate::errors::without_gil;
use crate::numpy_io::dtype_or;
use crate::tensor::PyTensor;

/// Builds a layer's fresh parameters with a `VarBuilder` (on its device, in its dtype).
pub type Recipe = Arc<dyn Fn(&mut VarBuilder) -> Result<LayerImpl> + Send + Sync>;

/// A layer: any rnn-nn module, or a multi-head attention (which also takes separate
/// query, key and value inputs).
pub enum LayerImpl {
    Plain(Box<dyn Module>),
    Attention(MultiHeadAttention),
}

impl LayerImpl {
    pub fn plain(module: impl Module + 'static) -> LayerImpl {
        LayerImpl::Plain(Box::new(module))
    }

    fn module(&self) -> &dyn Module {
        match self {
            LayerImpl::Plain(m) => m.as_ref(),
            LayerImpl::Attention(m) => m,
        }
    }

    fn module_mut(&mut self) -> &mut dyn Module {
        match self {
            LayerImpl::Plain(m) => m.as_mut(),
            LayerImpl::Attention(m) => m,
        }
    }

    /// Parameters then buffers, by name: what a state dict holds.
    fn state(&self) -> Vec<(String, Tensor)> {
        let mut all = self.module().named_parameters();
        all.extend(self.module().named_buffers());
        all
    }
}

/// One layer of `rnn.nn` (internal: use the classes of `rnn.nn`).
#[pyclass(name = "_Layer", module = "rnn.nn")]
pub struct PyLayer {
    layer: Mutex<LayerImpl>,
    recipe: Recipe,
    /// What `repr` shows, e.g. `Linear(in_features=4, out_features=3, bias=True)`.
    description: String,
    device: Device,
    dtype: DType,
    training: bool,
    /// The gradient slots of the parameters, kept alive with the layer so that
    /// `loss.backward()` fills them even when no Python handle of a parameter exists (a
    /// handle made later, `layer.weight.grad`, shares the slot).
    grad_slots: Vec<GradSlot>,
}

impl PyLayer {
    /// Builds a layer with fresh parameters on `device` in `dtype`, seeded from the global
    /// generator (so `rnn.manual_seed` makes initialization reproducible).
    pub fn build(
        py: Python<'_>,
        description: String,
        device: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
        recipe: Recipe,
    ) -> PyResult<PyLayer> {
        let device = device_from_py(device)?;
        let dtype = dtype_or(dtype, DType::F32)?;
        let make = recipe.clone();
        let layer = without_gil(py, move || {
            let mut vb = VarBuilder::new(device, dtype, next_seed()?);
            make(&mut vb)
        })?;
        let grad_slots = slots_of(&layer);
        let layer =
            PyLayer { layer: Mutex::new(layer), recipe, description, device, dtype, training: true, grad_slots };
        layer.lock().module_mut().set_training(true);
        Ok(layer)
    }

    fn lock(&self) -> MutexGuard<'_, LayerImpl> {
        self.layer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The gradient slots of a layer's parameters.
fn slots_of(layer: &LayerImpl) -> Vec<GradSlot> {
    layer.module().parameters().iter().map(slot_for).collect()
}

/// A seed drawn from the global generator of `rnn_core` (the one `rnn.manual_seed` sets).
pub fn next_seed() -> Result<u64> {
    let draws = Tensor::rand(0.0, 1.0, 2, DType::F64, Device::Cpu)?.to_vec::<f64>()?;
    let word = |x: f64| (x * 4_294_967_296.0) as u64;
    Ok(word(draws[0]) << 32 | word(draws[1]))
}

/// Python handles for named tensors.
pub fn named_to_py(named: Vec<(String, Tensor)>) -> Vec<(String, PyTensor)> {
    named.into_iter().map(|(n, t)| (n, PyTensor::new(t))).collect()
}

#[pymethods]
impl PyLayer {
    /// The layer's output for ``x`` (a Tensor; numpy arrays are converted).
    fn forward(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let x = crate::numpy_io::tensor_from_py(x)?;
        Ok(PyTensor::new(without_gil(py, || self.lock().module().forward(&x))?))
    }

    /// Attention of ``query`` over ``key`` / ``value`` (``[B, L, E]``, ``[B, S, E]``), with an
    /// optional mask (u8, 1 = masked, or float, added to the scores) and a causal mask.
    #[pyo3(signature = (query, key, value, attn_mask = None, is_causal = false))]
    fn attend(
        &self,
        py: Python<'_>,
        query: &Bound<'_, PyAny>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        attn_mask: Option<&Bound<'_, PyAny>>,
        is_causal: bool,
    ) -> PyResult<PyTensor> {
        let from = crate::numpy_io::tensor_from_py;
        let (q, k, v) = (from(query)?, from(key)?, from(value)?);
        let mask = attn_mask.filter(|m| !m.is_none()).map(from).transpose()?;
        let out = without_gil(py, || match &*self.lock() {
            LayerImpl::Attention(mha) => {
                let masks =
                    rnn_nn::AttentionMasks { attn_mask: mask.as_ref(), causal: is_causal, ..Default::default() };
                mha.forward_with(&q, &k, &v, masks)
            }
            LayerImpl::Plain(_) => Err(rnn_core::Error::invalid("attend", "this layer is not an attention layer")),
        })?;
        Ok(PyTensor::new(out))
    }

    /// Trainable tensors with their names (``"weight"``, ``"bias"``, ...).
    fn named_parameters(&self) -> Vec<(String, PyTensor)> {
        named_to_py(self.lock().module().named_parameters())
    }

    /// Saved but not trained tensors (BatchNorm's running statistics).
    fn named_buffers(&self) -> Vec<(String, PyTensor)> {
        named_to_py(self.lock().module().named_buffers())
    }

    /// Training mode (Dropout drops, BatchNorm uses batch statistics) or evaluation mode.
    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.lock().module_mut().set_training(training);
    }

    #[getter]
    fn training(&self) -> bool {
        self.training
    }

    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice { inner: self.device }
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.as_str()
    }

    /// Rebuilds the layer on ``device`` in ``dtype`` (either may be None: unchanged; a dtype
    /// in the first place is the dtype, ``layer.to(rnn.float64)``) with the same values. The
    /// parameters are new tensors: build optimizers after moving.
    #[pyo3(signature = (device = None, dtype = None))]
    fn to(
        &mut self,
        py: Python<'_>,
        device: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (device, dtype) = crate::device::device_and_dtype(device, dtype);
        let (device, dtype) = (device_or(device, self.device)?, dtype_or(dtype, self.dtype)?);
        let (recipe, old, training) = (self.recipe.clone(), self.lock().state(), self.training);
        let moved = without_gil(py, move || {
            let mut vb = VarBuilder::new(device, dtype, 0);
            let mut layer = recipe(&mut vb)?;
            let converted = old.into_iter().map(|(n, t)| Ok((n, t.to_dtype(dtype)?))).collect::<Result<_>>()?;
            checkpoint::apply(&layer.state(), &Checkpoint { tensors: converted, metadata: Default::default() })?;
            layer.module_mut().set_training(training);
            Ok(layer)
        })?;
        self.grad_slots = slots_of(&moved);
        *self.lock() = moved;
        (self.device, self.dtype) = (device, dtype);
        Ok(())
    }

    fn __repr__(&self) -> String {
        self.description.clone()
    }
}

pub fn register(py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLayer>()?;
    layers::register(py, m)?;
    losses::register(py, m)?;
    state::register(py, m)
}

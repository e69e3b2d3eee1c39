//! State dicts and safetensors files for `rnn.nn`: rnn-train's checkpoint format (atomic
//! writes; loading checks every name, shape and dtype before changing anything).

use std::collections::BTreeMap;

use pyo3::prelude::*;
use rnn_core::Tensor;
use rnn_train::checkpoint::{self, Checkpoint};

use crate::errors::without_gil;
use crate::nn::named_to_py;
use crate::numpy_io::tensor_from_py;
use crate::tensor::PyTensor;

/// A safetensors file's `(name, tensor)` pairs and metadata.
type FileContents = (Vec<(String, PyTensor)>, BTreeMap<String, String>);

/// `(name, value)` pairs with each value read as a tensor (Tensor or numpy array).
fn named_tensors(pairs: Vec<(String, Bound<'_, PyAny>)>) -> PyResult<Vec<(String, Tensor)>> {
    pairs.into_iter().map(|(name, value)| Ok((name, tensor_from_py(&value)?))).collect()
}

/// Writes ``(name, tensor)`` pairs and string metadata to a safetensors file, atomically
/// (a temporary file, then a rename). Readable by ``safetensors.torch.load_file``.
#[pyfunction]
#[pyo3(signature = (tensors, path, metadata = None))]
fn _save_file(
    py: Python<'_>,
    tensors: Vec<(String, Bound<'_, PyAny>)>,
    path: std::path::PathBuf,
    metadata: Option<BTreeMap<String, String>>,
) -> PyResult<()> {
    let tensors = named_tensors(tensors)?;
    let metadata = metadata.unwrap_or_default();
    without_gil(py, move || checkpoint::save(&path, &tensors, &metadata))
}

/// The ``(name, tensor)`` pairs (on the CPU, sorted by name) and metadata of a safetensors file.
#[pyfunction]
fn _load_file(py: Python<'_>, path: std::path::PathBuf) -> PyResult<FileContents> {
    let ckpt = without_gil(py, move || checkpoint::load(&path))?;
    Ok((named_to_py(ckpt.tensors), ckpt.metadata))
}

/// Copies ``sources`` into ``targets`` (both ``(name, tensor)`` pairs), matched by name and
/// moved to each target's device. Everything is checked first: the same names, shapes and
/// dtypes, or a ValueError listing the differences and nothing changed. A source is first
/// converted to its target's dtype (numpy float64 arrays load into f32 parameters, as
/// PyTorch's ``load_state_dict`` copies with a cast).
#[pyfunction]
fn _assign_state(
    py: Python<'_>,
    targets: Vec<(String, Bound<'_, PyAny>)>,
    sources: Vec<(String, Bound<'_, PyAny>)>,
) -> PyResult<()> {
    let targets = named_tensors(targets)?;
    let sources = named_tensors(sources)?;
    without_gil(py, move || {
        let cast = |(name, t): (String, Tensor)| {
            let target = targets.iter().find(|(n, _)| *n == name).map(|(_, t)| t.dtype());
            Ok((name, target.map_or(Ok(t.clone()), |dtype| t.to_dtype(dtype))?))
        };
        let tensors = sources.into_iter().map(cast).collect::<rnn_core::Result<_>>()?;
        checkpoint::apply(&targets, &Checkpoint { tensors, metadata: Default::default() })
    })
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_save_file, m)?)?;
    m.add_function(wrap_pyfunction!(_load_file, m)?)?;
    m.add_function(wrap_pyfunction!(_assign_state, m)?)
}

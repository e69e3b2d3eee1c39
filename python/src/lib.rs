//! The `rnn` Python package's native module, `rnn._rnn`.
//!
//! A thin layer over the Rust crates: each file binds one area and has a `register`
//! function that adds its classes and functions to the module. Python sources in
//! `python/rnn/` re-export them under their public names and add the pure-Python parts.
//!
//! Conventions for every binding: errors convert with `errors::PyErrExt::py_err`; work that
//! may take long runs in `errors::without_gil` (GIL released, panics caught); tensors cross
//! the boundary as `tensor::PyTensor` and are read with `tensor::tensor_from_py`.

use pyo3::prelude::*;

pub mod autograd;
pub mod backends;
mod creation;
pub mod device;
pub mod errors;
pub mod gpu;
pub mod micrograd;
pub mod network;
pub mod nn;
mod numpy_io;
pub mod optim;
pub mod tensor;
mod tensor_alias;
mod tensor_index;
mod tensor_math;
mod tensor_ops;
mod tensor_select;
mod tensor_shape;

#[pymodule]
fn _rnn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    errors::register(py, m)?;
    device::register(py, m)?;
    tensor::register(py, m)?;
    creation::register(py, m)?;
    tensor_select::register(py, m)?;
    autograd::register(py, m)?;
    nn::register(py, m)?;
    optim::register(py, m)?;
    network::register(py, m)?;
    micrograd::register(py, m)?;
    backends::register(py, m)?;
    gpu::register(py, m)?;
    Ok(())
}

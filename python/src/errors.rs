//! Rust errors and panics as Python exceptions.
//!
//! Every `rnn_core::Error` becomes a Python exception carrying the same message, its class
//! chosen by the kind of error:
//!
//! | error                                                | Python exception    |
//! |------------------------------------------------------|---------------------|
//! | shapes, dims, indices, dtypes, arguments, `backward` | `ValueError`        |
//! | `OutOfMemory`                                        | `MemoryError`       |
//! | devices (mismatch, not available, not compiled in)   | `RuntimeError`      |
//! | files (`Io`, `BadFile`)                              | `OSError`           |
//! | an integer `//` or `%` by zero (`DivisionByZero`)    | `ZeroDivisionError` |
//! | anything else (`Msg`)                                | `RuntimeError`      |
//!
//! Call sites convert with the [`PyErrExt`] trait: `tensor.matmul(&rhs).py_err()?`.
//!
//! Work that may take long runs through [`without_gil`]: it releases the GIL, so other
//! Python threads run meanwhile, and it catches a panic, which becomes a `RuntimeError`
//! instead of unwinding into the interpreter (a panic in the library is a bug, but it must
//! not take the user's process down with it).

use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyValueError, PyZeroDivisionError};
use pyo3::prelude::*;
use rnn_core::Error;

/// The Python exception for a library error: same message, class by kind (see the table above).
pub fn to_py_err(err: &Error) -> PyErr {
    let msg = err.to_string();
    match err {
        Error::OutOfMemory { .. } => PyMemoryError::new_err(msg),
        Error::DeviceMismatch { .. } | Error::NotCompiledWith(_) | Error::DeviceNotAvailable(_) => {
            PyRuntimeError::new_err(msg)
        }
        Error::Io { .. } | Error::BadFile { .. } => PyOSError::new_err(msg),
        Error::Msg(_) => PyRuntimeError::new_err(msg),
        Error::DivisionByZero { .. } => PyZeroDivisionError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// `.py_err()` turns an `rnn_core::Result` into a `PyResult` (see the module docs).
pub trait PyErrExt<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> PyErrExt<T> for rnn_core::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(|e| to_py_err(&e))
    }
}

/// Runs `work` with the GIL released and a panic caught: a panic becomes a `RuntimeError`
/// naming it, an `Err` the matching exception (`to_py_err`).
pub fn without_gil<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: FnOnce() -> rnn_core::Result<T> + Send,
    T: Send,
{
    py.detach(|| catch_panic(work))
}

/// Runs `work` with the GIL held, a panic caught as in `without_gil`.
pub fn catch_panic<T>(work: impl FnOnce() -> rnn_core::Result<T>) -> PyResult<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(result) => result.py_err(),
        Err(payload) => Err(panic_to_py_err(payload.as_ref())),
    }
}

/// Inputs with fewer elements than this make a quick op (microseconds on the CPU): it runs
/// with the GIL held, since releasing and re-taking the GIL would be a sizable share of
/// the call. Larger inputs, and any GPU tensor (a call may wait for the device), release it.
pub const GIL_RELEASE_ELEMS: usize = 1 << 14;

/// Runs a tensor op on `inputs` through `without_gil`, or with the GIL held when it is
/// quick (see `GIL_RELEASE_ELEMS`); panics are caught either way.
pub fn run_op<T, F>(py: Python<'_>, inputs: &[&rnn_core::Tensor], work: F) -> PyResult<T>
where
    F: FnOnce() -> rnn_core::Result<T> + Send,
    T: Send,
{
    let heavy = inputs.iter().any(|t| t.elem_count() >= GIL_RELEASE_ELEMS || !t.device().is_cpu());
    if heavy {
        without_gil(py, work)
    } else {
        catch_panic(work)
    }
}

/// A `RuntimeError` with the panic's message.
fn panic_to_py_err(payload: &(dyn std::any::Any + Send)) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    PyRuntimeError::new_err(format!("internal error in rnn (please report it): {what}"))
}

/// Panics inside `without_gil` (or `catch_panic` when `release_gil` is false): the tests
/// check that the caller sees a `RuntimeError` and that the interpreter carries on.
#[pyfunction]
#[pyo3(name = "_force_panic", signature = (release_gil = true))]
fn force_panic(py: Python<'_>, release_gil: bool) -> PyResult<()> {
    let work = || -> rnn_core::Result<()> { panic!("forced panic for testing") };
    if release_gil {
        without_gil(py, work)
    } else {
        catch_panic(work)
    }
}

pub fn register(_py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(force_panic, m)?)
}

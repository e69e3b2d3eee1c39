//! The one error type of the library. Every variant names the op that failed and the
//! shapes, dtypes or devices involved, so a message is enough to find the bad call.

use crate::{DType, Device, Shape};

#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum Error {
    #[error("{op}: shape mismatch, lhs {lhs:?} vs rhs {rhs:?}")]
    ShapeMismatch { op: &'static str, lhs: Shape, rhs: Shape },

    #[error("{op}: shapes {lhs:?} and {rhs:?} cannot be broadcast together")]
    BroadcastIncompatible { op: &'static str, lhs: Shape, rhs: Shape },

    #[error("{op}: dtype mismatch, {lhs:?} vs {rhs:?}")]
    DTypeMismatch { op: &'static str, lhs: DType, rhs: DType },

    #[error("{op}: dtype {dtype:?} is not supported{hint}")]
    UnsupportedDType { op: &'static str, dtype: DType, hint: &'static str },

    #[error("{op}: device mismatch, {lhs:?} vs {rhs:?}")]
    DeviceMismatch { op: &'static str, lhs: Device, rhs: Device },

    #[error("{op}: dim {dim} is out of range for a tensor of shape {shape:?}")]
    DimOutOfRange { op: &'static str, dim: i64, shape: Shape },

    #[error("{op}: dim {dim} appears twice")]
    DuplicateDim { op: &'static str, dim: usize },

    #[error("{op}: index {index} is out of range for size {size} (shape {shape:?})")]
    IndexOutOfRange { op: &'static str, index: i64, size: usize, shape: Shape },

    #[error("{op}: {what} out of range for shape {shape:?}")]
    NarrowOutOfRange { op: &'static str, what: String, shape: Shape },

    /// An integer `//` or `%` by zero (Python's ZeroDivisionError).
    #[error("{op}: integer division by zero (the divisor holds a 0)")]
    DivisionByZero { op: &'static str },

    #[error("{op}: empty tensor of shape {shape:?}")]
    EmptyTensor { op: &'static str, shape: Shape },

    #[error("{op}: {got} elements cannot fill shape {shape:?} ({expected} elements)")]
    ElementCountMismatch { op: &'static str, shape: Shape, expected: usize, got: usize },

    #[error("{op}: {msg}")]
    InvalidArgument { op: &'static str, msg: String },

    #[error("{op}: rank {got} given, rank {expected} expected (shape {shape:?})")]
    RankMismatch { op: &'static str, expected: usize, got: usize, shape: Shape },

    #[error("backward: {msg}")]
    Backward { msg: String },

    #[error("this build of rnn was compiled without the \"{0}\" feature; rebuild with `--features {0}`")]
    NotCompiledWith(&'static str),

    #[error("device not available: {0}")]
    DeviceNotAvailable(String),

    #[error("out of memory: requested {requested} bytes, {free} free of {total}")]
    OutOfMemory { requested: usize, free: usize, total: usize },

    /// Reading or writing a file failed; `path` names it, `msg` is the OS error.
    #[error("{path}: {msg}")]
    Io { path: String, msg: String },

    /// A file was read but its contents are not what they claim to be (bad magic number,
    /// truncated, sizes that disagree, a checkpoint for another model).
    #[error("{path}: {msg}")]
    BadFile { path: String, msg: String },

    #[error("{0}")]
    Msg(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument { op, msg: msg.into() }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<std::path::Path>, err: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().display().to_string(), msg: err.to_string() }
    }

    /// A file whose contents are invalid.
    pub fn bad_file(path: impl AsRef<std::path::Path>, msg: impl Into<String>) -> Self {
        Error::BadFile { path: path.as_ref().display().to_string(), msg: msg.into() }
    }

    /// A host allocation of `requested` bytes failed (free and total memory from
    /// /proc/meminfo where there is one, else 0).
    pub(crate) fn host_out_of_memory(requested: usize) -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib = |key: &str| -> usize {
            let line = meminfo.lines().find(|l| l.starts_with(key));
            let value = line.and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<usize>().ok());
            value.unwrap_or(0).saturating_mul(1024)
        };
        Error::OutOfMemory { requested, free: kib("MemAvailable:"), total: kib("MemTotal:") }
    }
}

/// An empty vector with room for `n` elements, or `Error::OutOfMemory` instead of an abort.
/// A vector of a tensor dtype comes from the host buffer cache (it may be reused memory, and
/// its capacity may exceed `n`).
pub fn try_vec<T>(n: usize) -> Result<Vec<T>> {
    crate::host_pool::with_capacity(n)
}

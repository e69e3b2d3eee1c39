//! `rnn.Tensor` arithmetic: operators with broadcasting, comparisons, elementwise math and
//! matmul. Each method converts its operands and calls one core op.
//!
//! Operands: another Tensor, a Python number, or anything `Tensor(...)` accepts (converted
//! to this tensor's dtype and device). Mixed dtypes are promoted as in PyTorch: a float beats
//! an integer, the wider float wins, f16 with bf16 gives f32; an integer tensor with a
//! non-integer Python number becomes f32.

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};
use rnn_core::op_table::{BinaryOp, CmpOp};
use rnn_core::{DType, Tensor};

use crate::errors::run_op;
use crate::tensor::{tensor_from_py, PyTensor};

/// The right-hand side of a binary op.
pub(crate) enum Operand {
    Tensor(Tensor),
    Scalar(f64),
}

pub(crate) fn operand(lhs: &Tensor, obj: &Bound<'_, PyAny>) -> PyResult<Operand> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(Operand::Tensor(t.borrow().inner.clone()));
    }
    if obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyBool>() {
        return Ok(Operand::Scalar(obj.extract::<f64>()?));
    }
    let t = tensor_from_py(obj)?;
    let (dtype, device) = (lhs.dtype(), lhs.device());
    let moved = t.clone();
    Ok(Operand::Tensor(run_op(obj.py(), &[&t], move || moved.to_dtype(dtype)?.to_device(device))?))
}

/// The dtype two operands compute in (see the module docs).
fn promoted(a: DType, b: DType) -> DType {
    use DType::*;
    match (a, b) {
        _ if a == b => a,
        (F16, BF16) | (BF16, F16) => F32,
        _ if a.is_float() != b.is_float() => {
            if a.is_float() {
                a
            } else {
                b
            }
        }
        // Same kind: the wider one (u8 < u32 < i64, f16/bf16 < f32 < f64).
        _ if a.size_in_bytes() >= b.size_in_bytes() => a,
        _ => b,
    }
}

/// `(lhs, rhs)` as two tensors of one dtype, in that order (`reflected` swaps them: the
/// Python value was on the left).
pub(crate) fn tensor_pair(lhs: &Tensor, rhs: Operand, reflected: bool) -> rnn_core::Result<(Tensor, Tensor)> {
    let (a, b) = match rhs {
        Operand::Tensor(t) => {
            let dtype = promoted(lhs.dtype(), t.dtype());
            (lhs.to_dtype(dtype)?, t.to_dtype(dtype)?)
        }
        Operand::Scalar(s) => {
            let dtype = lhs.dtype().with_scalar(s);
            let a = lhs.to_dtype(dtype)?;
            let b = Tensor::full(s, (), dtype, lhs.device())?;
            (a, b)
        }
    };
    Ok(if reflected { (b, a) } else { (a, b) })
}

pub(crate) fn binary(
    py: Python<'_>,
    lhs: &Tensor,
    rhs: &Bound<'_, PyAny>,
    op: BinaryOp,
    reflected: bool,
) -> PyResult<PyTensor> {
    let rhs = operand(lhs, rhs)?;
    let out = run_op(py, &[lhs], move || {
        let (a, b) = tensor_pair(lhs, rhs, reflected)?;
        a.binary(&b, op)
    })?;
    Ok(PyTensor::new(out))
}

fn compare(py: Python<'_>, lhs: &Tensor, rhs: &Bound<'_, PyAny>, op: CmpOp) -> PyResult<PyTensor> {
    let rhs = operand(lhs, rhs)?;
    let out = run_op(py, &[lhs], move || {
        let (a, b) = tensor_pair(lhs, rhs, false)?;
        a.cmp(&b, op)
    })?;
    Ok(PyTensor::new(out))
}

/// PyTorch's named forms of the operators: ``t.add(u)`` is ``t + u``, ``t.lt(u)`` is ``t < u``.
macro_rules! named_operators {
    (binary { $($name:ident => $op:ident, $doc:literal;)* } compare { $($cname:ident => $cop:ident, $cdoc:literal;)* }) => {
        #[pymethods]
        impl PyTensor {
            $(
                #[doc = $doc]
                fn $name(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                    binary(py, &self.inner, other, BinaryOp::$op, false)
                }
            )*
            $(
                #[doc = $cdoc]
                fn $cname(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                    compare(py, &self.inner, other, CmpOp::$cop)
                }
            )*
        }
    };
}

named_operators! {
    binary {
    add => Add, "``self + other`` (a Tensor or a number, broadcast).";
    sub => Sub, "``self - other``.";
    mul => Mul, "``self * other``.";
    div => Div, "``self / other`` (true division, as ``torch.div``).";
    pow => Pow, "``self ** other``.";
    floor_divide => FloorDivide, "``self // other``: the quotient rounded toward minus infinity, as Python's and ``torch.floor_divide`` (its gradient is zero).";
    remainder => Remainder, "``self % other``: the remainder with the divisor's sign, as Python's and ``torch.remainder``.";
    }
    compare {
    eq => Eq, "``self == other`` as a u8 mask.";
    ne => Ne, "``self != other`` as a u8 mask.";
    lt => Lt, "``self < other`` as a u8 mask.";
    le => Le, "``self <= other`` as a u8 mask.";
    gt => Gt, "``self > other`` as a u8 mask.";
    ge => Ge, "``self >= other`` as a u8 mask.";
    }
}

/// Operators. Results are new tensors; broadcasting follows numpy's rules.
#[pymethods]
impl PyTensor {
    fn __add__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Add, false)
    }
    fn __radd__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Add, true)
    }
    fn __sub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Sub, false)
    }
    fn __rsub__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Sub, true)
    }
    fn __mul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Mul, false)
    }
    fn __rmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Mul, true)
    }
    /// True division: integer tensors give f32, as in PyTorch.
    fn __truediv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Div, false)
    }
    fn __rtruediv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Div, true)
    }
    /// Floor division (``torch.floor_divide``): integers stay integers; an integer divisor
    /// holding 0 raises ZeroDivisionError; floats divide by 0 to ±inf or NaN.
    fn __floordiv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::FloorDivide, false)
    }
    fn __rfloordiv__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::FloorDivide, true)
    }
    /// Python's modulo (``torch.remainder``): the result takes the divisor's sign.
    fn __mod__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Remainder, false)
    }
    fn __rmod__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        binary(py, &self.inner, other, BinaryOp::Remainder, true)
    }
    fn __pow__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        reject_modulo(modulo)?;
        binary(py, &self.inner, other, BinaryOp::Pow, false)
    }
    fn __rpow__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        reject_modulo(modulo)?;
        binary(py, &self.inner, other, BinaryOp::Pow, true)
    }
    fn __matmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        matmul(py, &self.inner, other, false)
    }
    fn __rmatmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        matmul(py, &self.inner, other, true)
    }
    fn __neg__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.neg(py)
    }
    fn __abs__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        self.abs(py)
    }
    fn __pos__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Elementwise comparisons: a u8 tensor of 0 and 1 (the library has no bool dtype).
    fn __richcmp__(&self, py: Python<'_>, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyTensor> {
        let op = match op {
            CompareOp::Eq => CmpOp::Eq,
            CompareOp::Ne => CmpOp::Ne,
            CompareOp::Lt => CmpOp::Lt,
            CompareOp::Le => CmpOp::Le,
            CompareOp::Gt => CmpOp::Gt,
            CompareOp::Ge => CmpOp::Ge,
        };
        compare(py, &self.inner, other, op)
    }

    /// Matrix product with PyTorch's rules (``a @ b``).
    ///
    /// Both tensors 2-D: ``(n, k) @ (k, m) -> (n, m)``. Higher ranks are batches of
    /// matrices: leading dims broadcast, e.g. ``(b, n, k) @ (k, m) -> (b, n, m)``. A 1-D
    /// operand is a vector: ``(k,) @ (k, m) -> (m,)``, ``(n, k) @ (k,) -> (n,)``.
    /// ``other`` may be a Tensor or anything ``Tensor(...)`` accepts (converted to this
    /// tensor's dtype and device). Differentiable. Runs on the tensor's device (cuBLASLt on
    /// CUDA, gemm on the CPU); the GIL is released for large operands.
    ///
    /// Raises ValueError when the inner dimensions differ or the dtypes do not match.
    fn matmul(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        matmul(py, &self.inner, other, false)
    }
}

/// `lhs @ other` (`other @ lhs` when `reflected`).
fn matmul(py: Python<'_>, lhs: &Tensor, other: &Bound<'_, PyAny>, reflected: bool) -> PyResult<PyTensor> {
    let rhs = match operand(lhs, other)? {
        Operand::Tensor(t) => t,
        Operand::Scalar(_) => {
            return Err(pyo3::exceptions::PyValueError::new_err("matmul: a scalar operand is not allowed, use *"))
        }
    };
    let out = run_op(py, &[lhs, &rhs.clone()], move || {
        let (a, b) = tensor_pair(lhs, Operand::Tensor(rhs), reflected)?;
        a.matmul(&b)
    })?;
    Ok(PyTensor::new(out))
}

fn reject_modulo(modulo: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    match modulo {
        Some(m) if !m.is_none() => Err(pyo3::exceptions::PyTypeError::new_err("pow() with a modulus is not supported")),
        _ => Ok(()),
    }
}

//! Tolerances: one table per dtype, and the relaxation a GPU's f32 math needs.

use rnn_core::{DType, Device};

/// Relative tolerances, in the [`max_rel_err`](crate::max_rel_err) sense
/// (`|got - want| / (1 + |want|)`), of results computed in one dtype and compared with an f64
/// reference (the f64 CPU computation, a naive f64 reference, or PyTorch's f64 values).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// One op on inputs already in the dtype: the result rounded once (a few ulps of the
    /// format).
    pub op: f64,
    /// A composed computation, or one op on inputs rounded to the dtype: a layer or loss
    /// forward, an optimizer step, a golden case's output (rounding adds up over dozens of
    /// ops and sums).
    pub result: f64,
    /// Gradients of such a computation (backward doubles the chain of ops).
    pub grad: f64,
}

/// The tolerances of every dtype; integer results are exact.
pub const TOLERANCES: [(DType, Tolerance); 7] = [
    (DType::F64, Tolerance { op: 1e-12, result: 1e-10, grad: 1e-10 }),
    (DType::F32, Tolerance { op: 1e-6, result: 1e-5, grad: 1e-4 }),
    (DType::F16, Tolerance { op: 1e-3, result: 2e-2, grad: 5e-2 }),
    (DType::BF16, Tolerance { op: 8e-3, result: 2e-2, grad: 5e-2 }),
    (DType::U8, Tolerance { op: 0.0, result: 0.0, grad: 0.0 }),
    (DType::U32, Tolerance { op: 0.0, result: 0.0, grad: 0.0 }),
    (DType::I64, Tolerance { op: 0.0, result: 0.0, grad: 0.0 }),
];

/// The tolerances of `dtype` (from [`TOLERANCES`]).
pub fn tolerance(dtype: DType) -> Tolerance {
    TOLERANCES.iter().find(|(d, _)| *d == dtype).map(|(_, t)| *t).expect("every dtype is in TOLERANCES")
}

/// Largest `|autograd - finite difference| / max(1, |finite difference|)` a finite-difference
/// gradient check (f64, step 1e-6: `rnn_core::gradcheck::GradCheck::default()`) accepts.
pub const GRADCHECK_TOL: f64 = 1e-5;

/// GPU backends compute floats in f32 with the GPU's own `exp`, `sin`, `pow`, .. (WGSL
/// only bounds their error loosely): a relative error this large is within their accuracy.
pub const GPU_F32_TOL: f64 = 1e-5;

/// The tolerance a check with CPU tolerance `cpu_tol` has on `device`: the same on the
/// CPU; on a GPU never tighter than `GPU_F32_TOL` (exact checks, `cpu_tol == 0`, stay exact).
pub fn tol_on(device: Device, cpu_tol: f64) -> f64 {
    if device.is_cpu() || cpu_tol == 0.0 {
        cpu_tol
    } else {
        cpu_tol.max(GPU_F32_TOL)
    }
}

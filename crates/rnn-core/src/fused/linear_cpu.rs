//! The CPU forward of the fused Linear, `act(x @ wᵀ + b)`, in one output buffer: the
//! product is written into it, then one pass adds the bias to every row and applies the
//! activation while the output is still in cache: two passes over the output and no
//! intermediate tensor, where matmul, add and activation take three passes and two
//! intermediate tensors. bf16 and f16 (autocast's linear) do
//! the same in an f32 accumulator and round once at the end, as cuBLASLt's and oneDNN's
//! epilogues do.
//!
//! (Writing the bias into the rows first and accumulating the product onto it, as the gemm
//! crate can, takes one more pass over the output, on one thread at the MLP's sizes.)

use super::rows::par_fill_rows;
use crate::cpu::matmul_half::GemmInput;
use crate::cpu::parallel::{output_vec, par_fill};
use crate::cpu::unary::work_of;
use crate::cpu::{gemm_into, half_gemm_into, CpuStorage};
use crate::num::Float;
use crate::op_table::{Epilogue, UnaryKernel, UnaryVisitor};
use crate::{Error, Layout, Result, WithDType};

/// The output of `Linear { act }` on `[x, w, bias?]`, or `None` for dtypes the product
/// kernels do not cover (integers: `output` refuses them first).
pub(super) fn forward(act: Epilogue, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
    let ((x, xl), (w, wl)) = (inputs[0], inputs[1]);
    let bias = inputs.get(2).copied();
    let out = match (x, w) {
        (CpuStorage::F32(x), CpuStorage::F32(w)) => CpuStorage::F32(typed(act, (x, xl), (w, wl), typed_bias(bias)?)?),
        (CpuStorage::F64(x), CpuStorage::F64(w)) => CpuStorage::F64(typed(act, (x, xl), (w, wl), typed_bias(bias)?)?),
        (CpuStorage::BF16(x), CpuStorage::BF16(w)) => CpuStorage::BF16(half(act, (x, xl), (w, wl), typed_bias(bias)?)?),
        (CpuStorage::F16(x), CpuStorage::F16(w)) => CpuStorage::F16(half(act, (x, xl), (w, wl), typed_bias(bias)?)?),
        _ => return Ok(None),
    };
    Ok(Some(vec![out]))
}

/// [`typed`] for 16-bit floats: bias, product and activation in f32, then one rounding.
fn half<E: GemmInput + WithDType>(
    act: Epilogue,
    x: (&[E], &Layout),
    (w, wl): (&[E], &Layout),
    bias: Option<(&[E], &Layout)>,
) -> Result<Vec<E>> {
    let (m, n) = (x.1.dims()[0], wl.dims()[0]);
    let mut acc = output_vec::<f32>(m * n)?;
    half_gemm_into(&mut acc, x, (w, &wl.transpose(0, 1)?))?;
    bias_and_activation(&mut acc, n, bias, |v| v.to_f64() as f32, act)?;
    let mut out = output_vec::<E>(m * n)?;
    par_fill(&mut out, 1, |chunk, first| E::narrow_slice(&acc[first..first + chunk.len()], chunk));
    Ok(out)
}

/// The bias as a slice of `T` (the op checked that its dtype is the input's).
fn typed_bias<'a, T: WithDType>(bias: Option<(&'a CpuStorage, &'a Layout)>) -> Result<Option<(&'a [T], &'a Layout)>> {
    bias.map(|(s, l)| Ok((s.as_slice::<T>()?, l))).transpose()
}

fn typed<T: WithDType + Float>(
    act: Epilogue,
    x: (&[T], &Layout),
    (w, wl): (&[T], &Layout),
    bias: Option<(&[T], &Layout)>,
) -> Result<Vec<T>> {
    let (m, n) = (x.1.dims()[0], wl.dims()[0]);
    // Every element is written by the product.
    let mut out = output_vec::<T>(m * n)?;
    let wt = wl.transpose(0, 1)?;
    gemm_into(&mut out, x, (w, &wt), (T::from_f64(0.0), T::from_f64(1.0)))?;
    bias_and_activation(&mut out, n, bias, |v| v, act)?;
    Ok(out)
}

/// Adds the `n` bias values (any stride, converted by `cast`) to every row of `out` and
/// applies the epilogue's activation, in one pass.
fn bias_and_activation<B: Copy, T: Float + Send + Sync>(
    out: &mut [T],
    n: usize,
    bias: Option<(&[B], &Layout)>,
    cast: impl Fn(B) -> T,
    act: Epilogue,
) -> Result<()> {
    let bias = bias.map(|b| bias_row(n, b, cast)).transpose()?;
    let rows = RowsInPlace { values: out, n, bias: bias.as_deref() };
    match act.unary() {
        Some(op) => op.visit(WithActivation { rows, work: work_of(op) + 1 }),
        None if rows.bias.is_some() => rows.apply(1, |v| v),
        None => {}
    }
    Ok(())
}

/// The `n` bias values, contiguous and converted by `cast`.
fn bias_row<B: Copy, T>(n: usize, (b, bl): (&[B], &Layout), cast: impl Fn(B) -> T) -> Result<Vec<T>> {
    if bl.storage_extent() > b.len() {
        return Err(Error::invalid("linear", format!("layout {bl:?} reaches past a storage of {} elements", b.len())));
    }
    let (start, stride) = (bl.start_offset(), bl.strides()[0]);
    Ok((0..n).map(|j| cast(b[start + j * stride])).collect())
}

/// Rows of `n` values, and the bias to add to each row (none: add nothing).
struct RowsInPlace<'a, T> {
    values: &'a mut [T],
    n: usize,
    bias: Option<&'a [T]>,
}

impl<T: Float + Send + Sync> RowsInPlace<'_, T> {
    /// Sets every value `v` of column `j` to `f(v + bias[j])` (`f(v)` without a bias), on
    /// the threads when the values times `work` are enough.
    fn apply(self, work: usize, f: impl Fn(T) -> T + Sync + Send) {
        let (n, bias) = (self.n, self.bias);
        par_fill_rows(self.values, n, work, |rows, _| match bias {
            None => rows.iter_mut().for_each(|v| *v = f(*v)),
            Some(bias) => rows.chunks_exact_mut(n.max(1)).for_each(|row| {
                row.iter_mut().zip(bias).for_each(|(v, &b)| *v = f(*v + b));
            }),
        });
    }
}

/// [`RowsInPlace::apply`] with one unary op of the op table.
struct WithActivation<'a, T> {
    rows: RowsInPlace<'a, T>,
    work: usize,
}

impl<T: Float + Send + Sync> UnaryVisitor for WithActivation<'_, T> {
    type Out = ();
    fn visit<K: UnaryKernel>(self) {
        self.rows.apply(self.work, K::f);
    }
}

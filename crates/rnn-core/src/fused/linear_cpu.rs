//! The CPU forward of the fused Linear, `act(x @ wᵀ + b)`, in one output buffer: the bias is
//! written into every row, the product is accumulated onto it (the gemm crate computes
//! `dst = dst + x wᵀ`), and the activation runs in place while the output is still in cache.
//! No intermediate tensor, one pass over the output fewer than matmul + add + activation.
//! bf16 and f16 (autocast's linear) do the same in an f32 accumulator and round once at the
//! end, as cuBLASLt's and oneDNN's epilogues do.

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
    if let Some((b, bl)) = bias {
        fill_rows(&mut acc, n, (b, bl), |v| v.to_f64() as f32)?;
    }
    half_gemm_into(&mut acc, x, (w, &wl.transpose(0, 1)?), bias.is_some())?;
    if let Some(op) = act.unary() {
        op.visit(InPlace { values: &mut acc, work: work_of(op) });
    }
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
    // Every element is written: by the bias and the accumulated product, or by the product.
    let mut out = output_vec::<T>(m * n)?;
    if let Some(bias) = bias {
        fill_rows(&mut out, n, bias, |v| v)?;
    }
    let wt = wl.transpose(0, 1)?;
    gemm_into(&mut out, x, (w, &wt), (T::from_f64(0.0), T::from_f64(1.0)), bias.is_some())?;
    if let Some(op) = act.unary() {
        op.visit(InPlace { values: &mut out, work: work_of(op) });
    }
    Ok(out)
}

/// Copies the `n` bias values (any stride), converted by `cast`, into every row of `out`.
fn fill_rows<B: Copy, T: Copy>(out: &mut [T], n: usize, (b, bl): (&[B], &Layout), cast: impl Fn(B) -> T) -> Result<()> {
    if bl.storage_extent() > b.len() {
        return Err(Error::invalid("linear", format!("layout {bl:?} reaches past a storage of {} elements", b.len())));
    }
    let (start, stride) = (bl.start_offset(), bl.strides()[0]);
    let Some(first) = out.get_mut(..n) else {
        return Ok(());
    };
    first.iter_mut().enumerate().for_each(|(j, o)| *o = cast(b[start + j * stride]));
    let (first, rest) = out.split_at_mut(n);
    rest.chunks_exact_mut(n.max(1)).for_each(|row| row.copy_from_slice(first));
    Ok(())
}

/// Applies one unary op of the op table to every value, in place.
struct InPlace<'a, T> {
    values: &'a mut [T],
    work: usize,
}

impl<T: Float + Send> UnaryVisitor for InPlace<'_, T> {
    type Out = ();
    fn visit<K: UnaryKernel>(self) {
        par_fill(self.values, self.work, |chunk, _| chunk.iter_mut().for_each(|v| *v = K::f(*v)));
    }
}

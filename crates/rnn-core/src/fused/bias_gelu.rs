//! Fused bias + GELU: `gelu(x + b)` with `b` `[n]` broadcast over the rows of `x` (`[.., n]`),
//! in one pass instead of an add and an activation with a temporary between them
//! (`Tensor::bias_gelu`; Linear's epilogue where a product has no fused one). GELU is the
//! tanh approximation (`UnaryOp::Gelu`, PyTorch's `approximate="tanh"`) or the exact erf form
//! (`UnaryOp::GeluErf`), with the op table's formulas. The backward (`BiasGeluBackward`)
//! recomputes `z = x + b` and writes `dx = g gelu'(z)`; `db` is `dx` summed over the rows.
//! Kernels: `bias_gelu.cu` / `bias_gelu.wgsl`, one thread per element, both directions.

use std::sync::Arc;

use super::rows::{compute_slice, contiguous_arg, float_only, par_fill_rows, store, Compute};
use super::{FusedKernels, FusedOp};
use crate::cpu::parallel::{output_vec, HEAVY};
use crate::cpu::simd::zip_slice;
use crate::cpu::CpuStorage;
use crate::gpu::elementwise::template;
use crate::gpu::plan::{Arg, Grid, KernelSource, Program};
use crate::gpu::target::{Lang, Target};
use crate::op_table::{unary, UnaryKernel, UnaryOp};
use crate::{DType, Error, Layout, Result, Shape, Tensor};

/// `gelu(x + b)`: inputs x `[.., n]`, b `[n]`; the erf form when `erf`, else tanh's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BiasGelu {
    pub erf: bool,
}

/// The gradient of `BiasGelu` with respect to x: inputs x, b, g (x's shape); output dx.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BiasGeluBackward {
    pub erf: bool,
}

impl BiasGelu {
    fn unary(self) -> UnaryOp {
        if self.erf {
            UnaryOp::GeluErf
        } else {
            UnaryOp::Gelu
        }
    }
}

/// d/dz gelu(z): tanh form, with `0.5 (1 + tanh(u)) = s = sigmoid(2u)` and
/// `u = c (z + a z³)`, `s (1 + z (1 - s) 2c (1 + 3 a z²))` (the op table's form: one exp,
/// one division); erf form `Phi(z) + z phi(z)` (as `grad_fns::unary_grad`). Inlined, like
/// `gelu`, so that the row loops around them vectorize.
#[inline(always)]
fn gelu_grad<F: Compute>(erf: bool, z: F) -> F {
    let (one, half) = (F::c(1.0), F::c(0.5));
    if erf {
        let cdf = half * (one + (z * F::c(std::f64::consts::FRAC_1_SQRT_2)).erf());
        return cdf + z * (-half * z * z).vexp() * F::c(0.3989422804014327);
    }
    let (two_c, a) = (F::c(2.0 * 0.7978845608028654), F::c(0.044715));
    let z2 = z * z;
    let s = one / (one + (-(two_c * (z + a * z2 * z))).vexp());
    // (1 - s), not exp(-2u) s: where exp(-2u) is inf, s is 0 and the product must be too.
    s * (one + z * (one - s) * two_c * (one + F::c(3.0) * a * z2))
}

#[inline(always)]
fn gelu<F: Compute>(erf: bool, z: F) -> F {
    match erf {
        true => <unary::GeluErf as UnaryKernel>::f(z),
        false => <unary::Gelu as UnaryKernel>::f(z),
    }
}

/// `gelu(x[r, j] + b[j])`, or with `GRAD` `g[r, j] gelu'(x[r, j] + b[j])`, over every
/// element in the compute type: row by row, so that the bias is read as a slice and each
/// row's loop is vectorized (`simd::zip_slice`), threads over blocks of whole rows. `ERF`
/// and `GRAD` are constants so that the loop bodies hold no branch the vectorizer must keep.
fn bias_map<F: Compute, const ERF: bool, const GRAD: bool>(inputs: &[(&CpuStorage, &Layout)]) -> Result<Vec<CpuStorage>> {
    let (xs, xl) = inputs[0];
    let n = xl.dims().last().copied().unwrap_or(1);
    let x = compute_slice::<F>(xs, xl)?;
    let b = compute_slice::<F>(inputs[1].0, inputs[1].1)?;
    let g = if GRAD { Some(compute_slice::<F>(inputs[2].0, inputs[2].1)?) } else { None };
    // Every element is written below.
    let mut out = output_vec::<F>(x.len())?;
    par_fill_rows(&mut out, n, HEAVY, |rows, first| {
        let x = &x[first..first + rows.len()];
        match &g {
            None => rows.chunks_exact_mut(n).zip(x.chunks_exact(n)).for_each(|(o, x)| {
                zip_slice(x, &b[..], o, &|x, b| gelu(ERF, x + b));
            }),
            Some(g) => {
                // z = x + b for one row at a time, in a buffer that stays in cache.
                let mut z = vec![F::c(0.0); n];
                let g = &g[first..first + rows.len()];
                for ((o, x), g) in rows.chunks_exact_mut(n).zip(x.chunks_exact(n)).zip(g.chunks_exact(n)) {
                    zip_slice(x, &b[..], &mut z[..], &|x, b| x + b);
                    zip_slice(&z[..], g, o, &|z, g| g * gelu_grad(ERF, z));
                }
            }
        }
    });
    Ok(vec![store(out, xs.dtype())?])
}

fn check(op: &'static str, inputs: &[&Tensor]) -> Result<()> {
    let (x, b) = (inputs[0], inputs[1]);
    float_only(op, x.dtype())?;
    if x.rank() == 0 {
        return Err(Error::invalid(op, "the input must have at least one dim (the bias is added along the last)"));
    }
    for t in &inputs[1..] {
        if t.dtype() != x.dtype() {
            return Err(Error::DTypeMismatch { op, lhs: x.dtype(), rhs: t.dtype() });
        }
    }
    if b.dims() != [x.dims()[x.rank() - 1]] {
        return Err(Error::ShapeMismatch { op, lhs: x.shape().clone(), rhs: b.shape().clone() });
    }
    if let Some(g) = inputs.get(2) {
        if g.shape() != x.shape() {
            return Err(Error::ShapeMismatch { op, lhs: x.shape().clone(), rhs: g.shape().clone() });
        }
    }
    Ok(())
}

/// The CPU kernel for the input dtype (halves computed in f32) and the GELU form.
fn cpu_dispatch<const GRAD: bool>(erf: bool, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
    let out = match (inputs[0].0.dtype(), erf) {
        (DType::F64, true) => bias_map::<f64, true, GRAD>(inputs),
        (DType::F64, false) => bias_map::<f64, false, GRAD>(inputs),
        (_, true) => bias_map::<f32, true, GRAD>(inputs),
        (_, false) => bias_map::<f32, false, GRAD>(inputs),
    };
    out.map(Some)
}

impl FusedOp for BiasGelu {
    fn name(&self) -> &'static str {
        "bias_gelu"
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        check(self.name(), inputs)?;
        Ok((inputs[0].shape().clone(), inputs[0].dtype()))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        cpu_dispatch::<false>(self.erf, inputs)
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        let mut p = Program::new(target, self.name(), inputs[0].0, inputs[0].1.shape().elem_count());
        let (x, b) = (inputs[0], inputs[1]);
        let (xa, x0) = contiguous_arg(&mut p, Arg::Input(0), x.0, x.1)?;
        let (ba, b0) = contiguous_arg(&mut p, Arg::Input(1), b.0, b.1)?;
        let n = x.1.dims().last().copied().unwrap_or(1);
        bias_gelu_into(&mut p, x.0, self.erf, ((xa, x0), (ba, b0), None), n, Program::OUT)?;
        Ok(Some(p))
    }

    fn backward(&self, inputs: &[Tensor], _: &[Tensor], _: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let (x, b) = (&inputs[0], &inputs[1]);
        let dx = Tensor::fused(Arc::new(BiasGeluBackward { erf: self.erf }), &[x, b, g])?;
        let rows: Vec<usize> = (0..x.rank() - 1).collect();
        let db = b.tracks_grad().then(|| if rows.is_empty() { Ok(dx.clone()) } else { dx.sum(rows) }).transpose()?;
        Ok(vec![x.tracks_grad().then_some(dx), db])
    }
}

impl FusedOp for BiasGeluBackward {
    fn name(&self) -> &'static str {
        "bias_gelu_backward"
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        check(self.name(), inputs)?;
        Ok((inputs[0].shape().clone(), inputs[0].dtype()))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        cpu_dispatch::<true>(self.erf, inputs)
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        let mut p = Program::new(target, self.name(), inputs[0].0, inputs[0].1.shape().elem_count());
        let arg = |p: &mut Program, i: usize| contiguous_arg(p, Arg::Input(i), inputs[i].0, inputs[i].1);
        let (x, b, g) = (arg(&mut p, 0)?, arg(&mut p, 1)?, arg(&mut p, 2)?);
        let n = inputs[0].1.dims().last().copied().unwrap_or(1);
        bias_gelu_into(&mut p, inputs[0].0, self.erf, (x, b, Some(g)), n, Program::OUT)?;
        Ok(Some(p))
    }

    fn backward(&self, _: &[Tensor], _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(Error::invalid(self.name(), "the gradient of bias + GELU's gradient (double backward) is not supported"))
    }
}

/// The kernel: `gelu(x + b)`, or `g gelu'(x + b)` when `grad`.
pub(crate) fn source(target: &Target, dtype: DType, erf: bool, grad: bool) -> Result<KernelSource> {
    float_only("bias_gelu", dtype)?;
    let t = target.elem_type("bias_gelu", dtype)?;
    let op = BiasGelu { erf }.unary();
    let expr = match target.lang {
        Lang::Cuda => op.cuda_expr(),
        Lang::Wgsl => op.wgsl_expr(),
    };
    let tmpl = template(target, rnn_kernels::cuda::BIAS_GELU, rnn_kernels::wgsl::BIAS_GELU);
    let flag = |b: bool| if b { "true" } else { "false" };
    let subs = [("T", t), ("C", target.compute_type(dtype)), ("expr", expr), ("erf", flag(erf)), ("grad", flag(grad))];
    Ok(KernelSource::new(target, tmpl, &subs, target.needs_half(&[dtype])))
}

fn variant(dtype: DType, erf: bool, grad: bool) -> String {
    format!("bias_gelu/{}/{}/{dtype}", if erf { "erf" } else { "tanh" }, if grad { "backward" } else { "forward" })
}

/// A contiguous buffer and the position of its first element.
type Buffer = (Arg, usize);

/// Appends `out = gelu(x + b)` (or, with `g`, `g gelu'(x + b)`) over contiguous buffers of
/// `[.., n]` elements (x, g; `out` as many) and `[n]` (b), each given with its first
/// element's position.
pub(crate) fn bias_gelu_into(
    p: &mut Program,
    dtype: DType,
    erf: bool,
    (x, b, g): (Buffer, Buffer, Option<Buffer>),
    n: usize,
    out: Arg,
) -> Result<()> {
    let count = p.temps.first().map_or(0, |t| t.1);
    let (g_arg, g0) = g.unwrap_or(x);
    let info = p.target.info(p.op, &[count, n, x.1, b.1, g0], &[])?;
    let source = source(&p.target, dtype, erf, g.is_some())?;
    p.kernel(source, variant(dtype, erf, g.is_some()), Grid::Threads(count), &[x.0, b.0, g_arg, out], info)
}

impl FusedKernels for BiasGelu {
    fn variants(target: &Target) -> Vec<(String, KernelSource)> {
        let mut v = Vec::new();
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            for erf in [false, true] {
                for grad in [false, true] {
                    if let Ok(s) = source(target, dtype, erf, grad) {
                        v.push((variant(dtype, erf, grad), s));
                    }
                }
            }
        }
        v
    }
}

impl Tensor {
    /// `gelu(self + bias)` with `bias` `[n]` added along the last dim (`[.., n]` input), like
    /// PyTorch's `F.gelu(x + b, approximate="tanh")` when `tanh`, else the exact erf GELU.
    /// One fused kernel per direction.
    pub fn bias_gelu(&self, bias: &Tensor, tanh: bool) -> Result<Tensor> {
        Tensor::fused(Arc::new(BiasGelu { erf: !tanh }), &[self, bias])
    }
}

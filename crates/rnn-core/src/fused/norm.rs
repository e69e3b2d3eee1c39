//! Fused LayerNorm and RMSNorm over the last dim (`Tensor::layer_norm`, `Tensor::rms_norm`,
//! like PyTorch's `F.layer_norm(x, (n,), w, b, eps)` and `F.rms_norm(x, (n,), w, eps)`).
//!
//! The forward reads each row into its statistics (LayerNorm twice: the mean, then the
//! centered squares; RMSNorm once) and once more to write the output (normalized, scaled
//! and shifted in that one pass), and saves the per-row mean (LayerNorm) and
//! `rstd = 1 / sqrt(var + eps)` (f32, f64 for f64 inputs). The backward
//! (`NormBackward`) computes `dx` of a row from two sums over it, with `gw = g * w` and
//! `xhat = (x - mean) * rstd`:
//! `dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))` (RMSNorm: no `mean(gw)` term,
//! `mean = 0`), and the parameter gradients `dw = sum_rows(g * xhat)`, `db = sum_rows(g)`.
//! On the CPU each thread's chunk of rows sums its own partial `dw` / `db`, added after; on
//! GPUs a second kernel sums each column (`norm_gpu.rs`, kernels `norm.cu` / `norm.wgsl`).

use std::sync::Arc;

use super::attention::stat_dtype;
use super::rows::{compute_slice, float_only, map_row_chunks, store, Compute};
use super::{FusedKernels, FusedOp};
use crate::autocast::AutocastOp;
use crate::cpu::simd::{fold3_pairs, fold_lanes, map_slice, zip3_slice, zip_slice};
use crate::cpu::CpuStorage;
use crate::gpu::plan::{KernelSource, Program};
use crate::gpu::target::Target;
use crate::{DType, Error, Layout, Result, Shape, Tensor};

/// Work units (see `PAR_WORK`) per element of a row, forward or backward: three passes
/// with a multiply-add or two each. At the 4-6 units first written, a GPT step's
/// 2048 x 128 LayerNorms ran on one thread and were among its slowest passes.
const ROW_WORK: usize = 16;

/// LayerNorm (or RMSNorm when `rms`) over the last dim. Inputs: x, then the weight when
/// `weight`, then the bias when `bias` (both `[n]`, x's dtype). Saved: the mean (LayerNorm
/// only), then rstd, both of x's shape without its last dim.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Norm {
    pub rms: bool,
    pub eps: f64,
    pub weight: bool,
    pub bias: bool,
}

impl Norm {
    fn check(&self, inputs: &[&Tensor]) -> Result<usize> {
        let op = self.name();
        let want = 1 + self.weight as usize + self.bias as usize;
        if inputs.len() != want {
            return Err(Error::Msg(format!("internal: {op} takes {want} inputs, got {}", inputs.len())));
        }
        let x = inputs[0];
        float_only(op, x.dtype())?;
        if x.rank() == 0 {
            return Err(Error::invalid(op, "the input must have at least one dim (normalized over the last)"));
        }
        let n = x.dims()[x.rank() - 1];
        for p in &inputs[1..] {
            if p.dtype() != x.dtype() {
                return Err(Error::DTypeMismatch { op, lhs: x.dtype(), rhs: p.dtype() });
            }
            if p.dims() != [n] {
                return Err(Error::ShapeMismatch { op, lhs: x.shape().clone(), rhs: p.shape().clone() });
            }
        }
        Ok(n)
    }

    /// The shapes and dtype of the saved statistics.
    fn stats(&self, x: &Tensor) -> Vec<(Shape, DType)> {
        let shape = Shape::from(x.dims()[..x.rank() - 1].to_vec());
        vec![(shape, stat_dtype(x.dtype())); if self.rms { 1 } else { 2 }]
    }

    fn cpu_in<F: Compute>(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Vec<CpuStorage>> {
        let (xs, xl) = inputs[0];
        let n = xl.dims().last().copied().unwrap_or(1);
        let rows = xl.dims()[..xl.dims().len() - 1].iter().product::<usize>();
        let x = compute_slice::<F>(xs, xl)?;
        let mut params = inputs[1..].iter();
        let mut next = || params.next().map(|(s, l)| compute_slice::<F>(s, l)).transpose();
        let w = if self.weight { next()? } else { None };
        let b = if self.bias { next()? } else { None };
        let mut y = crate::cpu::parallel::output_vec::<F>(rows * n)?;
        let mut stats = crate::cpu::parallel::zeroed_vec::<F>(rows * 2)?;
        let (rms, eps) = (self.rms, F::c(self.eps));
        map_row_chunks(rows, (&mut y, n), (&mut stats, 2), n * ROW_WORK, |first, y, stats| {
            for (r, st) in stats.chunks_mut(2).enumerate() {
                let row = (first + r) * n..(first + r + 1) * n;
                let out = &mut y[r * n..(r + 1) * n];
                let (mean, rstd) = norm_row(rms, eps, &x[row], (w.as_deref(), b.as_deref()), out);
                st.copy_from_slice(&[mean, rstd]);
            }
        });
        let mut out = vec![store(y, xs.dtype())?];
        if !rms {
            out.push(F::into_storage(stats.iter().step_by(2).copied().collect()));
        }
        out.push(F::into_storage(stats.iter().skip(1).step_by(2).copied().collect()));
        Ok(out)
    }
}

/// Normalizes one row into `out`, scaled by `w` and shifted by `b` when given; returns
/// its mean (0 for RMSNorm) and rstd. Two passes over the row (mean, then the centered
/// squares; RMSNorm needs only the second) keep the variance exact for rows with a large
/// mean, as PyTorch's kernels do; one more writes the output.
fn norm_row<F: Compute>(rms: bool, eps: F, x: &[F], (w, b): (Option<&[F]>, Option<&[F]>), out: &mut [F]) -> (F, F) {
    let n = F::c(x.len() as f64);
    let add = |a: F, b: F| a + b;
    let mean = if rms { F::c(0.0) } else { fold_lanes(x, F::c(0.0), |v| v, add) / n };
    let var = fold_lanes(x, F::c(0.0), |v| (v - mean) * (v - mean), add) / n;
    let rstd = F::c(1.0) / (var + eps).sqrt();
    let xhat = move |v: F| (v - mean) * rstd;
    match (w, b) {
        (Some(w), Some(b)) => zip3_slice(x, w, b, out, &|v, w, b| xhat(v) * w + b),
        (Some(w), None) => zip_slice(x, w, out, &|v, w| xhat(v) * w),
        (None, Some(b)) => zip_slice(x, b, out, &|v, b| xhat(v) + b),
        (None, None) => map_slice(x, out, &xhat),
    }
    (mean, rstd)
}

impl FusedOp for Norm {
    fn autocast(&self) -> Option<AutocastOp> {
        Some(if self.rms { AutocastOp::RmsNorm } else { AutocastOp::LayerNorm })
    }

    fn name(&self) -> &'static str {
        if self.rms {
            "rms_norm"
        } else {
            "layer_norm"
        }
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        self.check(inputs)?;
        Ok((inputs[0].shape().clone(), inputs[0].dtype()))
    }

    fn saved(&self, inputs: &[&Tensor]) -> Result<Vec<(Shape, DType)>> {
        Ok(self.stats(inputs[0]))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        match inputs[0].0.dtype() {
            DType::F64 => self.cpu_in::<f64>(inputs).map(Some),
            _ => self.cpu_in::<f32>(inputs).map(Some),
        }
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        super::norm_gpu::forward(self, target, inputs).map(Some)
    }

    fn backward(&self, inputs: &[Tensor], saved: &[Tensor], _: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let op = NormBackward { fwd: *self };
        let mut args: Vec<&Tensor> = vec![&inputs[0], g];
        args.extend(saved.iter());
        if self.weight {
            args.push(&inputs[1]);
        }
        let outs = Tensor::fused_outputs(Arc::new(op), &args)?;
        Ok(inputs.iter().zip(&outs).map(|(t, d)| t.tracks_grad().then(|| d.clone())).collect())
    }
}

/// The gradient of `Norm`. Inputs: x, the output's gradient g, the saved statistics (the
/// mean for LayerNorm, then rstd), then the weight when the forward had one. Output: dx;
/// saved extra outputs: dw when the forward had a weight, db when it had a bias.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NormBackward {
    pub fwd: Norm,
}

impl NormBackward {
    fn stat_count(&self) -> usize {
        if self.fwd.rms {
            1
        } else {
            2
        }
    }

    fn cpu_in<F: Compute>(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Vec<CpuStorage>> {
        let (xs, xl) = inputs[0];
        let n = xl.dims().last().copied().unwrap_or(1);
        let rows = xl.dims()[..xl.dims().len() - 1].iter().product::<usize>();
        let read = |i: usize| compute_slice::<F>(inputs[i].0, inputs[i].1);
        let (x, g) = (read(0)?, read(1)?);
        let k = self.stat_count();
        let mean = if self.fwd.rms { None } else { Some(read(2)?) };
        let rstd = read(1 + k)?;
        let w = if self.fwd.weight { Some(read(2 + k)?) } else { None };
        let mut dx = crate::cpu::parallel::output_vec::<F>(rows * n)?;
        let mut row_marks = vec![0u8; rows]; // one per row: splits the rows with dx
        let params = self.fwd.weight || self.fwd.bias;
        let rms = self.fwd.rms;
        let partials = map_row_chunks(rows, (&mut dx, n), (&mut row_marks, 1), n * ROW_WORK, |first, dx, chunk_rows| {
            let mut sums = Sums::new(if params { n } else { 0 });
            for r in 0..chunk_rows.len() {
                let dx = &mut dx[r * n..(r + 1) * n];
                let (i, row) = (first + r, (first + r) * n..(first + r + 1) * n);
                let m = mean.as_ref().map_or(F::c(0.0), |m| m[i]);
                let (x, g) = (&x[row.clone()], &g[row]);
                backward_row(rms, (m, rstd[i]), x, g, w.as_deref(), dx);
                sums.add(x, g, (m, rstd[i]));
            }
            sums
        });
        let mut out = vec![store(dx, xs.dtype())?];
        let total = partials.into_iter().reduce(Sums::merge).unwrap_or_else(|| Sums::new(n));
        if self.fwd.weight {
            out.push(store(total.dw, xs.dtype())?);
        }
        if self.fwd.bias {
            out.push(store(total.db, xs.dtype())?);
        }
        Ok(out)
    }
}

/// `dx` of one row from its statistics (see the module doc): one pass for the two sums,
/// one to write `dx`. The sums run in `LANES` independent accumulators (`fold3_pairs`): a
/// single running sum is a chain of dependent adds, which made this the slowest pass of a
/// GPT step's LayerNorm backward.
fn backward_row<F: Compute>(rms: bool, (mean, rstd): (F, F), x: &[F], g: &[F], w: Option<&[F]>, dx: &mut [F]) {
    let n = F::c(x.len() as f64);
    // Without a weight, `gw = g`: `g` stands in for the weight slice and is ignored.
    let (w, scaled) = match w {
        Some(w) => (w, true),
        None => (g, false),
    };
    let gw = move |g: F, w: F| if scaled { g * w } else { g };
    let (sum_gw, sum_gw_xhat) = fold3_pairs(g, w, x, F::c(0.0), &|g, w, v| {
        let gw = gw(g, w);
        (gw, gw * ((v - mean) * rstd))
    });
    let shift = if rms { F::c(0.0) } else { sum_gw / n };
    let slope = sum_gw_xhat / n;
    zip3_slice(g, w, x, dx, &|g, w, v| rstd * (gw(g, w) - shift - (v - mean) * rstd * slope));
}

/// Partial sums of `dw = sum_rows(g * xhat)` and `db = sum_rows(g)` over a chunk of rows.
struct Sums<F> {
    dw: Vec<F>,
    db: Vec<F>,
}

impl<F: Compute> Sums<F> {
    fn new(n: usize) -> Self {
        Sums { dw: vec![F::c(0.0); n], db: vec![F::c(0.0); n] }
    }

    fn add(&mut self, x: &[F], g: &[F], (mean, rstd): (F, F)) {
        if self.dw.is_empty() {
            return;
        }
        for (((dw, db), &v), &g) in self.dw.iter_mut().zip(self.db.iter_mut()).zip(x).zip(g) {
            *dw = *dw + g * ((v - mean) * rstd);
            *db = *db + g;
        }
    }

    fn merge(mut self, other: Self) -> Self {
        self.dw.iter_mut().zip(&other.dw).for_each(|(a, &b)| *a = *a + b);
        self.db.iter_mut().zip(&other.db).for_each(|(a, &b)| *a = *a + b);
        self
    }
}

impl FusedOp for NormBackward {
    fn name(&self) -> &'static str {
        if self.fwd.rms {
            "rms_norm_backward"
        } else {
            "layer_norm_backward"
        }
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        let x = inputs[0];
        if inputs[1].shape() != x.shape() || inputs[1].dtype() != x.dtype() {
            return Err(Error::ShapeMismatch { op: self.name(), lhs: x.shape().clone(), rhs: inputs[1].shape().clone() });
        }
        Ok((x.shape().clone(), x.dtype()))
    }

    fn saved(&self, inputs: &[&Tensor]) -> Result<Vec<(Shape, DType)>> {
        let x = inputs[0];
        let param = (Shape::from(vec![x.dims()[x.rank() - 1]]), x.dtype());
        Ok(vec![param; self.fwd.weight as usize + self.fwd.bias as usize])
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        match inputs[0].0.dtype() {
            DType::F64 => self.cpu_in::<f64>(inputs).map(Some),
            _ => self.cpu_in::<f32>(inputs).map(Some),
        }
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        super::norm_gpu::backward(self, target, inputs).map(Some)
    }

    fn backward(&self, _: &[Tensor], _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(Error::invalid(self.name(), "the gradient of a norm's gradient (double backward) is not supported"))
    }
}

impl FusedKernels for Norm {
    fn variants(target: &Target) -> Vec<(String, KernelSource)> {
        super::norm_gpu::variants(target)
    }
}

/// The `eps` PyTorch's `rms_norm` uses when none is given: the machine epsilon of the dtype.
fn dtype_eps(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F16 => half::f16::EPSILON.to_f64(),
        DType::BF16 => half::bf16::EPSILON.to_f64(),
        _ => f32::EPSILON as f64,
    }
}

impl Tensor {
    /// Layer normalization over the last dim, like PyTorch's
    /// `F.layer_norm(x, (n,), weight, bias, eps)`: each row (the last dim, of size `n`)
    /// becomes `(x - mean) / sqrt(var + eps) * weight + bias`, with the biased variance.
    /// `weight` and `bias` are optional `[n]` tensors of x's dtype. One fused kernel per
    /// direction on every backend; half types compute in f32.
    pub fn layer_norm(&self, weight: Option<&Tensor>, bias: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        self.norm(false, weight, bias, eps)
    }

    /// Root-mean-square normalization over the last dim, like PyTorch's
    /// `F.rms_norm(x, (n,), weight, eps)`: `x / sqrt(mean(x²) + eps) * weight`. `eps`
    /// defaults (`None`) to the machine epsilon of x's dtype, as in PyTorch.
    pub fn rms_norm(&self, weight: Option<&Tensor>, eps: Option<f64>) -> Result<Tensor> {
        self.norm(true, weight, None, eps.unwrap_or_else(|| dtype_eps(self.dtype())))
    }

    fn norm(&self, rms: bool, weight: Option<&Tensor>, bias: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        let op = Norm { rms, eps, weight: weight.is_some(), bias: bias.is_some() };
        if !(eps >= 0.0 && eps.is_finite()) {
            return Err(Error::invalid(op.name(), format!("eps must be finite and >= 0, got {eps}")));
        }
        let inputs: Vec<&Tensor> = [Some(self), weight, bias].into_iter().flatten().collect();
        Tensor::fused(Arc::new(op), &inputs)
    }
}

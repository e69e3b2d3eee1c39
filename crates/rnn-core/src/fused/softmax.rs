//! Fused softmax / log_softmax over the last dim: one read of the input and one write of
//! the output per row, instead of the five passes of a composition of primitives. CPU:
//! `softmax_rows` below; CUDA and WGSL: `softmax.cu` / `softmax.wgsl`, one block per row.
//! `Tensor::softmax` moves any other dim last first.

use half::{bf16, f16};
use rayon::prelude::*;

use super::{FusedKernels, FusedOp};
use crate::autocast::AutocastOp;
use crate::cpu::parallel::{par_work, HEAVY};
use crate::cpu::simd::{fold_lanes, map_slice};
use crate::cpu::unary::contiguous_slice;
use crate::cpu::CpuStorage;
use crate::gpu::elementwise::template;
use crate::gpu::plan::{Arg, Grid, KernelSource, Program};
use crate::gpu::reduce::split_layouts;
use crate::gpu::target::{Lang, Target, BLOCK};
use crate::num::Float;
use crate::{DType, Error, Layout, Result, Shape, Tensor};

/// Softmax over the last dim, or log-softmax when `log`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Softmax {
    pub log: bool,
}

fn float_only(op: &'static str, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType { op, dtype, hint: ": softmax needs a float dtype" });
    }
    Ok(())
}

impl FusedOp for Softmax {
    fn autocast(&self) -> Option<AutocastOp> {
        Some(if self.log { AutocastOp::LogSoftmax } else { AutocastOp::Softmax })
    }

    fn name(&self) -> &'static str {
        if self.log {
            "log_softmax"
        } else {
            "softmax"
        }
    }

    fn output(&self, inputs: &[&Tensor]) -> Result<(Shape, DType)> {
        let x = inputs[0];
        float_only(self.name(), x.dtype())?;
        Ok((x.shape().clone(), x.dtype()))
    }

    fn cpu(&self, inputs: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
        let (x, l) = inputs[0];
        let row = l.dims().last().copied().unwrap_or(1);
        let log = self.log;
        Ok(Some(vec![match x {
            CpuStorage::F32(v) => CpuStorage::F32(softmax_rows(&contiguous_slice(v, l)?, row, log)?),
            CpuStorage::F64(v) => CpuStorage::F64(softmax_rows(&contiguous_slice(v, l)?, row, log)?),
            CpuStorage::F16(v) => {
                let wide: Vec<f32> = contiguous_slice(v, l)?.iter().map(|x| x.to_f32()).collect();
                CpuStorage::F16(softmax_rows(&wide, row, log)?.into_iter().map(f16::from_f32).collect())
            }
            CpuStorage::BF16(v) => {
                let wide: Vec<f32> = contiguous_slice(v, l)?.iter().map(|x| x.to_f32()).collect();
                CpuStorage::BF16(softmax_rows(&wide, row, log)?.into_iter().map(bf16::from_f32).collect())
            }
            s => return float_only(self.name(), s.dtype()).map(|_| None),
        }]))
    }

    fn gpu(&self, target: &Target, inputs: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
        let (dtype, l, _) = inputs[0];
        self.program(target, dtype, l).map(Some)
    }

    fn backward(&self, inputs: &[Tensor], _: &[Tensor], y: &Tensor, g: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let dx = if self.log {
            // dx = g - softmax(x) * sum(g), with softmax(x) = exp(y)
            g.sub(&y.exp()?.mul(&g.sum_keepdim(-1)?)?)?
        } else {
            // dx = y * (g - sum(g * y))
            let dot = g.mul(y)?.sum_keepdim(-1)?;
            y.mul(&g.sub(&dot)?)?
        };
        Ok(vec![inputs[0].tracks_grad().then_some(dx)])
    }
}

impl Softmax {
    fn source(&self, target: &Target, dtype: DType) -> Result<KernelSource> {
        float_only(self.name(), dtype)?;
        let t = target.elem_type(self.name(), dtype)?;
        let log = if self.log { "true" } else { "false" };
        let tmpl = template(target, rnn_kernels::cuda::SOFTMAX, rnn_kernels::wgsl::SOFTMAX);
        let subs = [("T", t), ("C", target.compute_type(dtype)), ("log", log)];
        Ok(KernelSource::new(target, tmpl, &subs, target.needs_half(&[dtype])))
    }

    /// One block per row of the last dim of `l`; the result is contiguous.
    fn program(&self, target: &Target, dtype: DType, l: &Layout) -> Result<Program> {
        let source = self.source(target, dtype)?;
        let (n, stride) = match (l.dims().last(), l.strides().last()) {
            (Some(&n), Some(&s)) => (n, s),
            _ => (1, 0),
        };
        let last = l.dims().len().checked_sub(1).map_or(Vec::new(), |d| vec![d]);
        let (rows_layout, _, rows, _) = split_layouts(l, &last);
        let mut p = Program::new(target, self.name(), dtype, rows * n);
        if rows * n == 0 {
            return Ok(p);
        }
        // CUDA: a block as wide as the row, up to BLOCK threads, so short rows leave no
        // thread idle. WGSL fixes the workgroup size in the shader.
        let threads = match target.lang {
            Lang::Cuda => (n.min(BLOCK).next_power_of_two() as u32).clamp(32, BLOCK as u32),
            Lang::Wgsl => BLOCK as u32,
        };
        let info = target.info(self.name(), &[rows, n, stride], &[&rows_layout])?;
        let variant = format!("{}/{dtype}", self.name());
        p.kernel(source, variant, Grid::Blocks(rows, threads), &[Arg::Input(0), Program::OUT], info)?;
        Ok(p)
    }
}

impl FusedKernels for Softmax {
    fn variants(target: &Target) -> Vec<(String, KernelSource)> {
        let mut v = Vec::new();
        for log in [false, true] {
            let op = Softmax { log };
            for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
                if let Ok(source) = op.source(target, dtype) {
                    v.push((format!("{}/{dtype}", op.name()), source));
                }
            }
        }
        v
    }
}

fn softmax_row<F: Float>(x: &[F], out: &mut [F], log: bool) {
    let max = fold_lanes(x, F::neg_infinity(), |v| v, |a, b| if b > a { b } else { a });
    // A row of -inf (fully masked) gives NaN, as in PyTorch.
    map_slice(x, out, &|v: F| (v - max).vexp());
    let sum = fold_lanes(out, F::c(0.0), |v| v, |a, b| a + b);
    if log {
        // (v - max) - ln(sum), not v - (max + ln(sum)): for large v the latter rounds badly.
        let log_sum = sum.ln();
        map_slice(x, out, &|v: F| (v - max) - log_sum);
    } else {
        let inv = F::c(1.0) / sum;
        out.iter_mut().for_each(|o| *o = *o * inv);
    }
}

fn softmax_rows<F: Float>(x: &[F], row: usize, log: bool) -> Result<Vec<F>> {
    // Every element is written below: no zeroing.
    let mut out = crate::cpu::parallel::output_vec(x.len())?;
    if row == 0 {
        return Ok(out);
    }
    let rows = |o: &mut [F], xs: &[F]| o.chunks_mut(row).zip(xs.chunks(row)).for_each(|(o, x)| softmax_row(x, o, log));
    let par_work = par_work();
    if x.len().saturating_mul(HEAVY) < par_work {
        rows(&mut out, x);
        return Ok(out);
    }
    // Tasks of whole rows, each worth spawning.
    let chunk = (par_work / 4 / HEAVY / row).max(1) * row;
    out.par_chunks_mut(chunk).zip(x.par_chunks(chunk)).for_each(|(o, xs)| rows(o, xs));
    Ok(out)
}

//! Fused softmax / log_softmax over the last dim: one read of the input and one write of
//! the output per row, instead of the five passes of the composition of primitives.
//! Its gradient is in `grad_fns.rs` (`Op::Softmax`).

use half::{bf16, f16};
use rayon::prelude::*;

use super::parallel::{HEAVY, PAR_WORK};
use super::simd::{fold_lanes, map_slice};
use super::unary::contiguous_slice;
use super::CpuStorage;
use crate::num::Float;
use crate::{Error, Layout, Result};

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
    let mut out = super::parallel::zeroed_vec(x.len())?;
    if row == 0 {
        return Ok(out);
    }
    let rows = |o: &mut [F], xs: &[F]| o.chunks_mut(row).zip(xs.chunks(row)).for_each(|(o, x)| softmax_row(x, o, log));
    if x.len().saturating_mul(HEAVY) < PAR_WORK {
        rows(&mut out, x);
        return Ok(out);
    }
    // Tasks of whole rows, each worth spawning.
    let chunk = (PAR_WORK / 4 / HEAVY / row).max(1) * row;
    out.par_chunks_mut(chunk).zip(x.par_chunks(chunk)).for_each(|(o, xs)| rows(o, xs));
    Ok(out)
}

impl CpuStorage {
    /// Softmax (or log-softmax) along the last dim of `l`; the result is contiguous.
    pub fn softmax_last_dim(&self, l: &Layout, log: bool) -> Result<CpuStorage> {
        let row = l.dims().last().copied().unwrap_or(1);
        Ok(match self {
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
            s => {
                let hint = ": softmax needs a float dtype";
                return Err(Error::UnsupportedDType {
                    op: if log { "log_softmax" } else { "softmax" },
                    dtype: s.dtype(),
                    hint,
                });
            }
        })
    }
}

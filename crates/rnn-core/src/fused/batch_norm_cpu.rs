//! CPU kernels of the fused batch normalization (`batch_norm.rs`). The input `[N, C, ...]`
//! is seen as `N * C` contiguous planes; channel `c` owns planes `c, C + c, 2C + c, ...`.
//!
//! The per-channel sums (mean, centered squares; in the backward the sums of `g` and
//! `g * (x - mean)`) run with one task per channel over that channel's planes, in lanes of
//! the compute type over blocks of `BLOCK` elements added in f64, so an f32 sum over a whole
//! batch keeps about f64's accuracy without converting every element. The elementwise
//! passes (normalize, `dx`) then run over planes in parallel, each plane with its channel's
//! coefficients.

use rayon::prelude::*;

use super::rows::Compute;
use crate::cpu::parallel::{output_vec, par_work};
use crate::cpu::simd::{fold3_pairs, fold_lanes, map_slice, zip3_slice, zip_slice};
use crate::Result;

/// Elements folded in the compute type before their sum is added in f64.
const BLOCK: usize = 4096;

/// The input's view as planes: `n * c` planes of `plane` elements.
#[derive(Clone, Copy, Debug)]
pub(super) struct Planes {
    pub n: usize,
    pub c: usize,
    pub plane: usize,
}

impl Planes {
    /// The values each channel's statistics are taken over.
    pub fn count(&self) -> usize {
        self.n * self.plane
    }

    /// The planes of channel `ch` in `v`.
    fn of_channel<'a, F>(&self, v: &'a [F], ch: usize) -> impl Iterator<Item = &'a [F]> {
        let (c, plane) = (self.c, self.plane);
        (0..self.n).map(move |i| &v[(i * c + ch) * plane..(i * c + ch + 1) * plane])
    }

    /// Whether a job of `passes` reads of the whole input is worth threads.
    fn parallel(&self, passes: usize) -> bool {
        self.n * self.c * self.plane * passes >= par_work()
    }

    /// `f(ch)` for every channel, one task per channel when worth it.
    fn per_channel<R: Send>(&self, passes: usize, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
        if self.parallel(passes) {
            (0..self.c).into_par_iter().map(f).collect()
        } else {
            (0..self.c).map(f).collect()
        }
    }

    /// Fills `out` plane by plane: `f(plane_index, channel, out_plane)`, planes in parallel
    /// when worth it.
    fn fill_planes<F: Send>(&self, out: &mut [F], f: impl Fn(usize, usize, &mut [F]) + Sync + Send) {
        let (c, plane) = (self.c, self.plane.max(1));
        if self.parallel(2) {
            // Enough planes per task to amortize the task (a few thousand elements).
            let min_planes = (BLOCK / plane).max(1);
            out.par_chunks_mut(plane).with_min_len(min_planes).enumerate().for_each(|(i, o)| f(i, i % c, o));
        } else {
            out.chunks_mut(plane).enumerate().for_each(|(i, o)| f(i, i % c, o));
        }
    }
}

/// The two sums of `h(a, b, c) = (u, v)` over the matching planes of three tensors, in one
/// pass and in blocks (see the module doc), vectorized for this CPU (`fold3_pairs`).
fn channel_sums<'a, F: Compute>(
    planes: impl Iterator<Item = [&'a [F]; 3]>,
    h: impl Fn(F, F, F) -> (F, F) + Copy,
) -> (f64, f64) {
    let (mut total_u, mut total_v) = (0.0, 0.0);
    for [a, b, c] in planes {
        for ((a, b), c) in a.chunks(BLOCK).zip(b.chunks(BLOCK)).zip(c.chunks(BLOCK)) {
            let (u, v) = fold3_pairs(a, b, c, F::c(0.0), &h);
            (total_u, total_v) = (total_u + u.to_f64(), total_v + v.to_f64());
        }
    }
    (total_u, total_v)
}

/// Per-channel affine parameters and options of the normalization.
pub(super) struct Affine<'a, F> {
    pub weight: Option<&'a [F]>,
    pub bias: Option<&'a [F]>,
    pub eps: f64,
    pub relu: bool,
}

impl<F: Compute> Affine<'_, F> {
    fn weight(&self, ch: usize) -> f64 {
        self.weight.map_or(1.0, |w| w[ch].to_f64())
    }

    fn bias(&self, ch: usize) -> f64 {
        self.bias.map_or(0.0, |b| b[ch].to_f64())
    }
}

/// The per-channel mean and biased variance of `x`, in one pass over memory: each block of
/// `BLOCK` values gets its mean and centered squares in two passes while it is in L1 (which
/// keeps the variance exact for channels with a large mean), and the blocks are combined in
/// f64 by Chan et al.'s update of mean and squares.
pub(super) fn statistics<F: Compute>(x: &[F], p: Planes) -> (Vec<f64>, Vec<f64>) {
    let count = p.count() as f64;
    let add = |a: F, b: F| a + b;
    p.per_channel(2, |ch| {
        let (mut n, mut mean, mut squares) = (0.0, 0.0, 0.0);
        for block in p.of_channel(x, ch).flat_map(|plane| plane.chunks(BLOCK)) {
            let len = block.len() as f64;
            let block_mean = fold_lanes(block, F::c(0.0), |v| v, add).to_f64() / len;
            let m = F::c(block_mean);
            let block_squares = fold_lanes(block, F::c(0.0), |v| (v - m) * (v - m), add).to_f64();
            let (delta, total) = (block_mean - mean, n + len);
            mean += delta * len / total;
            squares += block_squares + delta * delta * n * len / total;
            n = total;
        }
        // No values: 0 / 0, as a sum over none divided by the count.
        if n == 0.0 {
            return (f64::NAN, f64::NAN);
        }
        (mean, squares / count)
    })
    .into_iter()
    .unzip()
}

/// `relu?((x - mean) * rstd * weight + bias + residual)` per channel, from the statistics.
pub(super) fn normalize<F: Compute>(
    x: &[F],
    residual: Option<&[F]>,
    p: Planes,
    (mean, var): (&[f64], &[f64]),
    a: &Affine<F>,
) -> Result<Vec<F>> {
    let mut y = output_vec::<F>(x.len())?;
    let coef: Vec<(F, F, F)> = (0..p.c)
        .map(|ch| {
            let scale = a.weight(ch) / (var[ch] + a.eps).sqrt();
            (F::c(mean[ch]), F::c(scale), F::c(a.bias(ch)))
        })
        .collect();
    let relu = a.relu;
    p.fill_planes(&mut y, |i, ch, out| {
        let (m, s, b) = coef[ch];
        let range = i * p.plane..(i + 1) * p.plane;
        // As ReLU: x <= 0 gives 0, NaN stays NaN.
        let act = |o: F| if relu && o <= F::c(0.0) { F::c(0.0) } else { o };
        match residual {
            Some(r) => zip_slice(&x[range.clone()], &r[range], out, &|v, r| act((v - m) * s + b + r)),
            None => map_slice(&x[range], out, &|v| act((v - m) * s + b)),
        }
    });
    Ok(y)
}

/// The gradients of the batch normalization: `dx`, and the per-channel `dweight`
/// (`sum(g * xhat)`) and `dbias` (`sum(g)`). With `relu`, `g` is first zeroed where the
/// output `y` is not > 0 (ReLU's gradient, read from the output).
pub(super) struct Grads<F> {
    pub dx: Vec<F>,
    pub dweight: Vec<f64>,
    pub dbias: Vec<f64>,
}

/// ReLU's gradient when `relu`: `g` where the output `y` is > 0, else 0; `g` otherwise.
fn mask<F: Compute>(relu: bool) -> impl Fn(F, F) -> F + Copy + Send + Sync {
    move |g: F, y: F| if relu && (y <= F::c(0.0) || num_traits::Float::is_nan(y)) { F::c(0.0) } else { g }
}

/// The gradient reaching the residual input: `g` through ReLU's mask (read from `y`).
pub(super) fn masked_grad<F: Compute>(g: &[F], y: &[F], p: Planes) -> Result<Vec<F>> {
    let mut out = output_vec::<F>(g.len())?;
    let masked = mask(true);
    p.fill_planes(&mut out, |i, _, out| {
        let range = i * p.plane..(i + 1) * p.plane;
        zip_slice(&g[range.clone()], &y[range], out, &masked);
    });
    Ok(out)
}

/// The inputs of the backward: `x`, the output `y` (read only with ReLU) and its gradient `g`.
pub(super) struct BackwardInputs<'a, F> {
    pub x: &'a [F],
    pub y: &'a [F],
    pub g: &'a [F],
}

/// `dx = w * rstd * (g - mean(g) - xhat * mean(g * xhat))` per channel, from two sums per
/// channel and one elementwise pass.
pub(super) fn backward<F: Compute>(
    t: &BackwardInputs<F>,
    p: Planes,
    (mean, var): (&[f64], &[f64]),
    a: &Affine<F>,
) -> Result<Grads<F>> {
    let masked = mask(a.relu);
    let sums: Vec<(f64, f64)> = p.per_channel(3, |ch| {
        let m = F::c(mean[ch]);
        let planes = p.of_channel(t.g, ch).zip(p.of_channel(t.y, ch)).zip(p.of_channel(t.x, ch));
        let planes = planes.map(|((g, y), x)| [g, y, x]);
        channel_sums(planes, |g, y, x| {
            let g = masked(g, y);
            (g, g * (x - m))
        })
    });
    let count = p.count() as f64;
    let rstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + a.eps).sqrt()).collect();
    // dx = alpha * (g - shift) - (x - mean) * slope, per channel.
    let coef: Vec<(F, F, F, F)> = (0..p.c)
        .map(|ch| {
            let (sum_g, sum_gxc) = sums[ch];
            let alpha = a.weight(ch) * rstd[ch];
            let slope = alpha * sum_gxc * rstd[ch] * rstd[ch] / count;
            (F::c(alpha), F::c(sum_g / count), F::c(mean[ch]), F::c(slope))
        })
        .collect();
    let mut dx = output_vec::<F>(t.x.len())?;
    p.fill_planes(&mut dx, |i, ch, out| {
        let (alpha, shift, m, slope) = coef[ch];
        let range = i * p.plane..(i + 1) * p.plane;
        let (x, g, y) = (&t.x[range.clone()], &t.g[range.clone()], &t.y[range]);
        zip3_slice(x, g, y, out, &|x, g, y| alpha * (masked(g, y) - shift) - (x - m) * slope);
    });
    let dweight = sums.iter().zip(&rstd).map(|(&(_, s), r)| s * r).collect();
    let dbias = sums.iter().map(|&(s, _)| s).collect();
    Ok(Grads { dx, dweight, dbias })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks combined by Chan et al.'s update give the two-pass statistics of f64, for a
    /// channel whose mean (10^4) dwarfs its spread (variance about 0.08), over planes of
    /// a whole block and a partial one.
    #[test]
    fn one_pass_statistics_match_two_passes_in_f64() {
        let p = Planes { n: 3, c: 2, plane: BLOCK + 904 };
        let x: Vec<f32> = (0..p.n * p.c * p.plane).map(|i| 1e4 + ((i * 7919) % 1000) as f32 / 1000.0).collect();
        let (mean, var) = statistics(&x, p);
        for ch in 0..p.c {
            let values: Vec<f64> = p.of_channel(&x, ch).flatten().map(|&v| v as f64).collect();
            let exact_mean = values.iter().sum::<f64>() / values.len() as f64;
            let exact_var = values.iter().map(|v| (v - exact_mean).powi(2)).sum::<f64>() / values.len() as f64;
            assert!((mean[ch] - exact_mean).abs() <= 1e-7 * exact_mean, "{} against {exact_mean}", mean[ch]);
            assert!((var[ch] - exact_var).abs() <= 1e-5 * exact_var, "{} against {exact_var}", var[ch]);
        }
        let empty = Planes { n: 0, c: 2, plane: 4 };
        let (mean, var) = statistics::<f32>(&[], empty);
        assert!(mean.iter().chain(&var).all(|v| v.is_nan()), "no values: NaN, as 0 / 0");
    }
}

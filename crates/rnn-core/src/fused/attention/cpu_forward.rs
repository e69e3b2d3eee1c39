//! The forward on the CPU. One task per (batch, head, block of `BR` query rows), spread over
//! rayon's threads; each walks the key tiles its rows may see (causally hidden and padded
//! tiles are skipped, not masked), with an online softmax: per row a running max `m` and
//! sum `l`, the output rows accumulated in place and rescaled when `m` grows. At the end
//! `o = acc / l` and the saved log-sum-exp is `m + ln l` (`-inf`, and a zero row, where
//! every key is masked). Scratch per thread: two `BR x BC` tiles and two `BR` vectors.

use std::ops::Range;

use rayon::prelude::*;

use super::cpu::{tile_product_add, Compute, Mat, Problem, BC, BR};
use super::Dims;
use crate::cpu::parallel::zeroed_vec;
use crate::cpu::simd::{fold_lanes, map_slice};
use crate::Result;

/// Multiply-adds below which the forward runs on the calling thread.
const PAR_FLOPS: usize = 1 << 18;

/// Per-thread scratch: the score tile, the probability tile, the running max and sum.
struct Scratch<C> {
    s: Vec<C>,
    p: Vec<C>,
    m: Vec<C>,
    l: Vec<C>,
}

impl<C: Compute> Scratch<C> {
    fn new() -> Self {
        Scratch {
            s: vec![C::zero(); BR * BC],
            p: vec![C::zero(); BR * BC],
            m: vec![C::zero(); BR],
            l: vec![C::zero(); BR],
        }
    }
}

/// One task: head `bh`, query rows `rows`, their output rows and log-sum-exp.
struct Task<'a, C> {
    bh: usize,
    rows: Range<usize>,
    o: &'a mut [C],
    lse: &'a mut [C],
}

/// The output `[B, H, Nq, Dv]` and the log-sum-exp `[B, H, Nq]`, both contiguous.
pub(super) fn run<C: Compute>(p: &Problem<C>) -> Result<(Vec<C>, Vec<C>)> {
    let Dims { batch, heads, nq, nk, d, dv } = p.dims;
    let mut o = zeroed_vec::<C>(batch * heads * nq * dv)?;
    let mut lse = zeroed_vec::<C>(batch * heads * nq)?;
    let tasks = split_tasks(&mut o, &mut lse, batch * heads, nq, dv);
    let work = batch * heads * nq * nk * (d + dv);
    if work < PAR_FLOPS {
        let mut scratch = Scratch::new();
        tasks.into_iter().for_each(|t| block(p, t, &mut scratch));
    } else {
        tasks.into_par_iter().for_each_init(Scratch::new, |scratch, t| block(p, t, scratch));
    }
    Ok((o, lse))
}

/// The tasks over `heads` heads of `nq` rows each, with disjoint parts of `o` and `lse`.
fn split_tasks<'a, C>(
    mut o: &'a mut [C],
    mut lse: &'a mut [C],
    heads: usize,
    nq: usize,
    dv: usize,
) -> Vec<Task<'a, C>> {
    let mut tasks = Vec::with_capacity(heads * nq.div_ceil(BR));
    for bh in 0..heads {
        for start in (0..nq).step_by(BR) {
            let rows = start..(start + BR).min(nq);
            let (o_part, o_rest) = std::mem::take(&mut o).split_at_mut(rows.len() * dv);
            let (l_part, l_rest) = std::mem::take(&mut lse).split_at_mut(rows.len());
            (o, lse) = (o_rest, l_rest);
            tasks.push(Task { bh, rows, o: o_part, lse: l_part });
        }
    }
    tasks
}

/// The output rows and log-sum-exp of one task.
fn block<C: Compute>(p: &Problem<C>, t: Task<C>, scratch: &mut Scratch<C>) {
    let Dims { heads, nk, dv, .. } = p.dims;
    let Scratch { s, p: probs, m, l } = scratch;
    let br = t.rows.len();
    let (m, l) = (&mut m[..br], &mut l[..br]);
    m.fill(C::neg_infinity());
    l.fill(C::zero());
    let key_end = p.key_end(t.bh / heads, &t.rows);
    for start in (0..key_end).step_by(BC) {
        let cols = start..(start + BC).min(key_end);
        let bc = cols.len();
        p.scores(t.bh, &t.rows, &cols, s);
        for r in 0..br {
            let (srow, prow) = (&s[r * bc..][..bc], &mut probs[r * bc..][..bc]);
            let alpha = online_softmax_row(srow, prow, &mut m[r], &mut l[r]);
            if alpha != C::one() {
                t.o[r * dv..][..dv].iter_mut().for_each(|x| *x = *x * alpha);
            }
        }
        let v = &p.v[(t.bh * nk + cols.start) * dv..][..bc * dv];
        tile_product_add((br, dv, bc), t.o, Mat::rows(&probs[..br * bc], bc), Mat::rows(v, dv), C::one());
    }
    for r in 0..br {
        let o = &mut t.o[r * dv..][..dv];
        if l[r] == C::zero() {
            // Every key masked: a zero row (o was never added to), -inf log-sum-exp.
            t.lse[r] = C::neg_infinity();
        } else {
            let inv = C::one() / l[r];
            o.iter_mut().for_each(|x| *x = *x * inv);
            t.lse[r] = m[r] + l[r].ln();
        }
    }
}

/// Folds one row of scores into the running max `m` and sum `l`: writes
/// `p = exp(s - m_new)` and returns the factor `exp(m_old - m_new)` the row's accumulated
/// output must be scaled by. NaN scores give NaN probabilities (the max skips them, the exp
/// keeps them), so a NaN reaches the output as in PyTorch.
fn online_softmax_row<C: Compute>(s: &[C], p: &mut [C], m: &mut C, l: &mut C) -> C {
    let max = fold_lanes(s, C::neg_infinity(), |x| x, |a, b| if b > a { b } else { a });
    let m_new = if max > *m { max } else { *m };
    if m_new == C::neg_infinity() {
        // Every key so far masked: nothing to add (but a NaN score stays NaN).
        map_slice(s, p, &|x: C| if num_traits::Float::is_nan(x) { x } else { C::zero() });
        *l = *l + fold_lanes(p, C::zero(), |x| x, |a, b| a + b);
        return C::one();
    }
    map_slice(s, p, &|x: C| (x - m_new).vexp());
    let sum = fold_lanes(p, C::zero(), |x| x, |a, b| a + b);
    let alpha = (*m - m_new).exp();
    *l = *l * alpha + sum;
    *m = m_new;
    alpha
}

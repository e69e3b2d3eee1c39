//! The forward on the CPU. One task per (batch, head, group of up to [`BLOCKS`] blocks of
//! `BR` query rows), spread over rayon's threads. A task walks the key tiles its rows may see
//! (causally hidden and padded tiles are skipped, not masked, and tiles the causal diagonal
//! crosses are taken in strips: `Problem::pieces`), transposes each once
//! (`Kᵀ`, the score product's right operand) and runs every query block of the group over
//! it, with an online softmax: per row a running max `m` and sum `l`, the output rows
//! accumulated in place and rescaled when `m` grows. At the end `o = acc / l` and the saved
//! log-sum-exp is `m + ln l` (`-inf`, and a zero row, where every key is masked). Scratch per
//! thread: the transposed key tile, two `BR x bc` tiles (`bc`: [`key_tile_width`]) and two
//! vectors of the group's rows.

use std::ops::Range;

use rayon::prelude::*;

use super::cpu::{exp_sum, padded, row_max, tile_product_add, transpose_tile, Compute, Mat, Problem, BC, BR};
use super::Dims;
use crate::cpu::parallel::zeroed_vec;
use crate::cpu::simd::{fold_lanes, map_slice};
use crate::Result;

/// Multiply-adds below which the forward runs on the calling thread.
const PAR_FLOPS: usize = 1 << 18;

/// Query blocks per task where there are enough tasks for the threads: each transposed key
/// tile then serves four blocks.
const BLOCKS: usize = 4;

/// The forward's key tile where it is wide: twice the backward's. Each tile's
/// online-softmax bookkeeping (row maxima, rescaling the output rows, the `P V` product's
/// loads and stores of the output block) is then paid half as often.
///
/// Wide from [`WIDE_FROM_NK`] keys on with the AVX2 kernel, always with the AVX-512 one.
/// Measured, one binary alternating configurations:
/// - AVX2 kernel, 2-core EPYC (two rounds): +10% forward GFLOP/s at N = 4096 (both masks,
///   every round), no clear change at N = 1024, and at N = 256 an earlier trial lost 24%.
/// - AVX-512 kernel, 2-core Xeon (family 6 model 207, three rounds of B = 4, H = 8,
///   D = 64): best rounds of the forward +18% / +13% at N = 256 (plain / causal) and
///   +17% / +16% at N = 1024, every round of the wide tiles above every round of the narrow
///   ones; at N = 4096 wider tiles (256, 1024 keys) were no faster.
const BC_WIDE: usize = 2 * BC;
const WIDE_FROM_NK: usize = 2048;

/// The key tile width of the forward over `nk` keys.
fn key_tile_width(nk: usize) -> usize {
    if nk >= WIDE_FROM_NK || crate::cpu::runs_avx512_kernels() {
        BC_WIDE
    } else {
        BC
    }
}

/// Per-thread scratch: the transposed key tile, the score and probability tiles, the
/// running max and sum of the task's rows.
struct Scratch<C> {
    kt: Vec<C>,
    s: Vec<C>,
    p: Vec<C>,
    m: Vec<C>,
    l: Vec<C>,
}

impl<C: Compute> Scratch<C> {
    /// For key tiles of at most `bc` keys (a whole number of the kernel's column blocks).
    fn new(d: usize, bc: usize) -> Self {
        Scratch {
            kt: vec![C::zero(); d * bc],
            s: vec![C::zero(); BR * bc],
            p: vec![C::zero(); BR * bc],
            m: vec![C::zero(); BR * BLOCKS],
            l: vec![C::zero(); BR * BLOCKS],
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
    let blocks_per_head = nq.div_ceil(BR);
    let grouped = batch * heads * blocks_per_head.div_ceil(BLOCKS) >= 4 * rayon::current_num_threads();
    let task_rows = if grouped { BR * BLOCKS } else { BR };
    let tasks = split_tasks(&mut o, &mut lse, batch * heads, (nq, task_rows), dv);
    let work = batch * heads * nq * nk * (d + dv);
    // No wider than the padded keys: short sequences need no more scratch than one tile.
    let width = key_tile_width(nk).min(padded(nk));
    if work < PAR_FLOPS {
        let mut scratch = Scratch::new(d, width);
        tasks.into_iter().for_each(|t| group(p, t, &mut scratch));
    } else {
        tasks.into_par_iter().for_each_init(|| Scratch::new(d, width), |scratch, t| group(p, t, scratch));
    }
    Ok((o, lse))
}

/// The tasks over `heads` heads of `nq` rows each, `task_rows` rows a task, with disjoint
/// parts of `o` and `lse`.
fn split_tasks<'a, C>(
    mut o: &'a mut [C],
    mut lse: &'a mut [C],
    heads: usize,
    (nq, task_rows): (usize, usize),
    dv: usize,
) -> Vec<Task<'a, C>> {
    let mut tasks = Vec::with_capacity(heads * nq.div_ceil(task_rows));
    for bh in 0..heads {
        for start in (0..nq).step_by(task_rows) {
            let rows = start..(start + task_rows).min(nq);
            let (o_part, o_rest) = std::mem::take(&mut o).split_at_mut(rows.len() * dv);
            let (l_part, l_rest) = std::mem::take(&mut lse).split_at_mut(rows.len());
            (o, lse) = (o_rest, l_rest);
            tasks.push(Task { bh, rows, o: o_part, lse: l_part });
        }
    }
    tasks
}

/// The output rows and log-sum-exp of one task.
fn group<C: Compute>(p: &Problem<C>, t: Task<C>, scratch: &mut Scratch<C>) {
    let Dims { heads, d, dv, .. } = p.dims;
    let rows = t.rows.len();
    scratch.m[..rows].fill(C::neg_infinity());
    scratch.l[..rows].fill(C::zero());
    let b = t.bh / heads;
    let key_end = p.key_end(b, &t.rows);
    let bc = key_tile_width(p.dims.nk);
    for start in (0..key_end).step_by(bc) {
        let keys = start..(start + bc).min(key_end);
        let ld = padded(keys.len());
        transpose_tile(p.k.rows(t.bh, &keys), (keys.len(), d), &mut scratch.kt, ld);
        for first in (t.rows.start..t.rows.end).step_by(BR) {
            let block = first..(first + BR).min(t.rows.end);
            for (rows, cols) in p.pieces(b, &block, &keys) {
                let at = rows.start - t.rows.start;
                let o = &mut t.o[at * dv..][..rows.len() * dv];
                let stats = (&mut scratch.m[at..][..rows.len()], &mut scratch.l[at..][..rows.len()]);
                let tiles = (&scratch.kt[..], &mut scratch.s[..], &mut scratch.p[..], ld);
                key_tile(p, (t.bh, &rows, &cols), tiles, o, stats);
            }
        }
    }
    let (m, l) = (&scratch.m[..rows], &scratch.l[..rows]);
    for r in 0..rows {
        if l[r] == C::zero() {
            // Every key masked: a zero row (o was never added to), -inf log-sum-exp.
            t.lse[r] = C::neg_infinity();
        } else {
            let inv = C::one() / l[r];
            t.o[r * dv..][..dv].iter_mut().for_each(|x| *x = *x * inv);
            t.lse[r] = m[r] + l[r].ln();
        }
    }
}

/// Folds the keys `cols` (the first of a tile transposed in `kt`, row stride `ld`) into the
/// output rows `o` and the running max and sum of query rows `rows` of head `bh`.
fn key_tile<C: Compute>(
    p: &Problem<C>,
    (bh, rows, cols): (usize, &Range<usize>, &Range<usize>),
    (kt, s, probs, ld): (&[C], &mut [C], &mut [C], usize),
    o: &mut [C],
    (m, l): (&mut [C], &mut [C]),
) {
    let dv = p.dims.dv;
    let (br, bc) = (rows.len(), cols.len());
    p.scores(bh, rows, cols, kt, s, ld);
    for r in 0..br {
        let (srow, prow) = (&s[r * ld..][..bc], &mut probs[r * bc..][..bc]);
        let alpha = online_softmax_row(srow, prow, &mut m[r], &mut l[r]);
        if alpha != C::one() {
            o[r * dv..][..dv].iter_mut().for_each(|x| *x = *x * alpha);
        }
    }
    tile_product_add((br, dv, bc), o, Mat::rows(&probs[..br * bc], bc), p.v.rows(bh, cols), C::one());
}

/// Folds one row of scores into the running max `m` and sum `l`: writes
/// `p = exp(s - m_new)` and returns the factor `exp(m_old - m_new)` the row's accumulated
/// output must be scaled by. NaN scores give NaN probabilities (the max skips them, the exp
/// keeps them), so a NaN reaches the output as in PyTorch.
fn online_softmax_row<C: Compute>(s: &[C], p: &mut [C], m: &mut C, l: &mut C) -> C {
    let max = row_max(s);
    let m_new = if max > *m { max } else { *m };
    if m_new == C::neg_infinity() {
        // Every key so far masked: nothing to add (but a NaN score stays NaN).
        map_slice(s, p, &|x: C| if num_traits::Float::is_nan(x) { x } else { C::zero() });
        *l = *l + fold_lanes(p, C::zero(), |x| x, |a, b| a + b);
        return C::one();
    }
    let sum = exp_sum(s, m_new, p);
    let alpha = (*m - m_new).exp();
    *l = *l * alpha + sum;
    *m = m_new;
    alpha
}

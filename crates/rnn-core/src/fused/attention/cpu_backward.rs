//! The backward on the CPU (FlashAttention-2): `delta = rowsum(dO ∘ O)` first, then one
//! task per (batch, head, group of key tiles). For each key tile the task walks the query
//! tiles that can see it, recomputes the scores and `P = exp(S - lse)` from the saved
//! log-sum-exp, and accumulates `dV += Pᵀ dO`, `dS = P ∘ (dO Vᵀ - delta)`,
//! `dK += scale · dSᵀ Q` in the task's own rows of dk / dv, and `dQ += scale · dS K`.
//!
//! dQ sums over every key tile, so tasks that share a head would race on it. Where there
//! are at least as many heads (batch x heads) as threads, a head is one task and adds into
//! its dq rows directly: no extra memory, no extra work. With fewer heads than threads, a
//! head's key tiles are split into groups (balanced by the number of query rows that see
//! them, which causality makes uneven), each adding into a private `Nq x D` dQ that is
//! summed at the end: O(threads · N · D) extra memory, instead of the second pass over
//! query tiles (recomputing S and dP, 40% more multiply-adds) the alternative needs.

use std::ops::Range;

use rayon::prelude::*;

use super::cpu::{
    compute_slice, exp_sum, heads_input, padded, problem, tile_product, tile_product_add, transpose_tile, Compute, Heads,
    Mat, Problem, BC, BR,
};
use super::{AttentionBackward, Dims};
use crate::cpu::parallel::{output_vec, zeroed_vec};
use crate::cpu::simd::zip_slice;
use crate::cpu::CpuStorage;
use crate::{Layout, Result};

/// Multiply-adds below which the backward runs on the calling thread.
const PAR_FLOPS: usize = 1 << 18;

/// What every task reads: dO, the saved log-sum-exp, delta; and the bias gradient it
/// writes.
struct Saved<'a, C: Clone> {
    d_o: Heads<'a, C>,
    lse: &'a [C],
    delta: &'a [C],
    dbias: Option<SharedRows<C>>,
}

/// The `[B, H, Nq, Nk]` bias gradient, written by several tasks at once: each writes only
/// the columns of its own key tiles, so no element is written twice.
struct SharedRows<C> {
    ptr: *mut C,
    len: usize,
}

// SAFETY: tasks write disjoint elements (see `write`), and the buffer outlives them.
unsafe impl<C: Send> Sync for SharedRows<C> {}

impl<C: Copy> SharedRows<C> {
    /// Copies `src` to elements `at..at + src.len()`.
    ///
    /// SAFETY: no other task may access these elements at the same time.
    unsafe fn write(&self, at: usize, src: &[C]) {
        assert!(at + src.len() <= self.len, "bias gradient row out of bounds");
        // SAFETY: in bounds (asserted); exclusive by the caller's guarantee.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(at), src.len()) };
    }
}

/// Per-thread scratch: scores (then dS), probabilities, dP, and the key tile's `Kᵀ` and
/// `Vᵀ` (the right operands of the score and dP products, transposed once per key tile).
struct Scratch<C> {
    s: Vec<C>,
    p: Vec<C>,
    dp: Vec<C>,
    kt: Vec<C>,
    vt: Vec<C>,
}

impl<C: Compute> Scratch<C> {
    fn new(dims: &Dims) -> Self {
        let tile = || vec![C::zero(); BR * BC];
        Scratch { s: tile(), p: tile(), dp: tile(), kt: vec![C::zero(); dims.d * BC], vt: vec![C::zero(); dims.dv * BC] }
    }
}

/// One task: the keys `keys` of head `bh`, their rows of dk and dv, and the dQ it adds into
/// (the head's rows of dq, or `None` for a private one).
struct Task<'a, C> {
    bh: usize,
    keys: Range<usize>,
    dk: &'a mut [C],
    dv: &'a mut [C],
    dq: Option<&'a mut [C]>,
}

/// dq, dk, dv (and the bias gradient when asked), contiguous, in `C`.
pub(super) fn run<C: Compute>(op: &AttentionBackward, inputs: &[(&CpuStorage, &Layout)]) -> Result<Vec<Vec<C>>> {
    let p = problem::<C>(&op.fwd, inputs, (op.lengths_input(), op.bias_input()))?;
    let (o, d_o, lse) = (compute_slice::<C>(inputs[3])?, heads_input::<C>(inputs[4])?, compute_slice::<C>(inputs[5])?);
    let Dims { batch, heads, nq, nk, d, dv } = p.dims;
    let n_heads = batch * heads;
    let delta: Vec<C> = if dv == 0 {
        vec![C::zero(); n_heads * nq]
    } else {
        deltas(&o, &d_o, (n_heads, nq, dv))
    };
    let groups =
        if n_heads >= rayon::current_num_threads() { 1 } else { rayon::current_num_threads().div_ceil(n_heads.max(1)) };
    // Each task zeroes the rows of dk and dv it owns, and its head's dq rows when the head
    // is one task (`key_group`: in its core's cache, on every thread at once); dq takes the
    // sum of private parts otherwise, from zero.
    let mut dq = if groups == 1 { output_vec::<C>(n_heads * nq * d)? } else { zeroed_vec::<C>(n_heads * nq * d)? };
    let mut dk = output_vec::<C>(n_heads * nk * d)?;
    let mut dvs = output_vec::<C>(n_heads * nk * dv)?;
    let mut dbias = zeroed_vec::<C>(if op.bias_grad { n_heads * nq * nk } else { 0 })?;
    let shared = op.bias_grad.then_some(SharedRows { ptr: dbias.as_mut_ptr(), len: dbias.len() });
    let saved = Saved { d_o, lse: &lse, delta: &delta, dbias: shared };
    let tasks = split_tasks(&p, groups, &mut dq, &mut dk, &mut dvs);
    let work = n_heads * nq * nk * (2 * d + 2 * dv);
    let private: Vec<(usize, Vec<C>)> = if work < PAR_FLOPS {
        let mut scratch = Scratch::new(&p.dims);
        tasks.into_iter().map(|t| key_group(&p, &saved, t, &mut scratch)).collect::<Result<Vec<_>>>()?
    } else {
        let run = |scratch: &mut Scratch<C>, t| key_group(&p, &saved, t, scratch);
        tasks.into_par_iter().map_init(|| Scratch::new(&p.dims), run).collect::<Result<Vec<_>>>()?
    }
    .into_iter()
    .flatten()
    .collect();
    for (bh, part) in private {
        let rows = &mut dq[bh * nq * d..][..nq * d];
        rows.iter_mut().zip(&part).for_each(|(a, &b)| *a = *a + b);
    }
    let mut grads = vec![dq, dk, dvs];
    if op.bias_grad {
        grads.push(dbias);
    }
    Ok(grads)
}

/// `delta = rowsum(dO ∘ O)` for every row of every head; `o` contiguous, rows of `dv`.
fn deltas<C: Compute>(o: &[C], d_o: &Heads<C>, (n_heads, nq, dv): (usize, usize, usize)) -> Vec<C> {
    let mut delta = Vec::with_capacity(n_heads * nq);
    for bh in 0..n_heads {
        let g = d_o.rows(bh, &(0..nq));
        delta.extend((0..nq).map(|r| dot(&o[(bh * nq + r) * dv..][..dv], g.row(r, dv))));
    }
    delta
}

fn dot<C: Compute>(a: &[C], b: &[C]) -> C {
    a.iter().zip(b).fold(C::zero(), |acc, (&x, &y)| acc + x * y)
}

/// The tasks: each head's key tiles in `groups` groups of about equal work, with their
/// disjoint rows of dk and dv, and the head's dq rows when a head is one group.
fn split_tasks<'a, C: Compute>(
    p: &Problem<C>,
    groups: usize,
    dq: &'a mut [C],
    mut dk: &'a mut [C],
    mut dv: &'a mut [C],
) -> Vec<Task<'a, C>> {
    let Dims { batch, heads, nq, nk, d, dv: width_v } = p.dims;
    let mut dq_rows = dq.chunks_mut((nq * d).max(1));
    let mut tasks = Vec::new();
    for bh in 0..batch * heads {
        let bounds = group_bounds(p, groups, nk);
        let mut own_dq = if groups == 1 { dq_rows.next() } else { None };
        for keys in bounds.windows(2).map(|w| w[0]..w[1]) {
            let (k_part, k_rest) = std::mem::take(&mut dk).split_at_mut(keys.len() * d);
            let (v_part, v_rest) = std::mem::take(&mut dv).split_at_mut(keys.len() * width_v);
            (dk, dv) = (k_rest, v_rest);
            tasks.push(Task { bh, keys, dk: k_part, dv: v_part, dq: own_dq.take() });
        }
    }
    tasks
}

/// Key positions splitting `0..nk` into at most `groups` ranges of whole tiles with about
/// the same number of (query row, key tile) pairs each.
fn group_bounds<C: Compute>(p: &Problem<C>, groups: usize, nk: usize) -> Vec<usize> {
    let tiles = nk.div_ceil(BC);
    let rows_seeing = |t: usize| if p.causal { p.dims.nq.saturating_sub(t * BC) } else { p.dims.nq };
    let total: usize = (0..tiles).map(rows_seeing).sum();
    let mut bounds = vec![0];
    let mut acc = 0;
    for t in 0..tiles {
        acc += rows_seeing(t);
        let done = bounds.len();
        if done < groups && acc * groups >= total * done && t + 1 < tiles {
            bounds.push((t + 1) * BC);
        }
    }
    bounds.push(nk);
    bounds
}

/// The gradients of one task's keys (its rows of dk, dv and dq of any value on entry); its
/// private dQ when it has no dq rows of its own.
fn key_group<C: Compute>(
    p: &Problem<C>,
    saved: &Saved<C>,
    t: Task<C>,
    scratch: &mut Scratch<C>,
) -> Result<Option<(usize, Vec<C>)>> {
    let Dims { heads, nq, d, .. } = p.dims;
    let mut private = Vec::new();
    t.dk.fill(C::zero());
    t.dv.fill(C::zero());
    let dq = match t.dq {
        Some(rows) => {
            rows.fill(C::zero());
            rows
        }
        None => {
            private = zeroed_vec::<C>(nq * d)?;
            &mut private[..]
        }
    };
    let valid_end = t.keys.end.min(p.lengths[t.bh / heads]);
    for start in (t.keys.start..valid_end).step_by(BC) {
        let cols = start..(start + BC).min(valid_end);
        let at = cols.start - t.keys.start;
        let dk = &mut t.dk[at * d..][..cols.len() * d];
        let dv = &mut t.dv[at * p.dims.dv..][..cols.len() * p.dims.dv];
        key_tile(p, saved, t.bh, &cols, (dq, dk, dv), scratch);
    }
    Ok((!private.is_empty()).then_some((t.bh, private)))
}

/// Accumulates the gradients of key tile `cols` of head `bh` over every query tile that can
/// see it.
fn key_tile<C: Compute>(
    p: &Problem<C>,
    saved: &Saved<C>,
    bh: usize,
    cols: &Range<usize>,
    (dq, dk, dv): (&mut [C], &mut [C], &mut [C]),
    scratch: &mut Scratch<C>,
) {
    let Dims { heads, nq, d, dv: width_v, .. } = p.dims;
    let ld = padded(cols.len());
    let Scratch { s, p: probs, dp, kt, vt } = scratch;
    transpose_tile(p.k.rows(bh, cols), (cols.len(), d), kt, ld);
    transpose_tile(p.v.rows(bh, cols), (cols.len(), width_v), vt, ld);
    // Causal: rows before the tile's first key see none of it.
    let first_row = if p.causal { cols.start } else { 0 };
    for start in (first_row..nq).step_by(BR) {
        let block = start..(start + BR).min(nq);
        for (rows, keys) in p.pieces(bh / heads, &block, cols) {
            let (dk, dv) = (&mut dk[..keys.len() * d], &mut dv[..keys.len() * width_v]);
            let tiles = (&mut s[..], &mut probs[..], &mut dp[..]);
            piece(p, saved, (bh, &rows, &keys), (&kt[..], &vt[..], ld), (&mut *dq, dk, dv), tiles);
        }
    }
}

/// The part of [`key_tile`] for query rows `rows` and keys `cols` (the first keys of the
/// tile, whose `Kᵀ` / `Vᵀ` are `kt` / `vt` with row stride `ld`).
fn piece<C: Compute>(
    p: &Problem<C>,
    saved: &Saved<C>,
    (bh, rows, cols): (usize, &Range<usize>, &Range<usize>),
    (kt, vt, ld): (&[C], &[C], usize),
    (dq, dk, dv): (&mut [C], &mut [C], &mut [C]),
    (s, probs, dp): (&mut [C], &mut [C], &mut [C]),
) {
    let Dims { nq, d, dv: width_v, .. } = p.dims;
    let (br, bc) = (rows.len(), cols.len());
    let n = padded(bc);
    p.scores(bh, rows, cols, kt, s, ld);
    let row0 = bh * nq + rows.start;
    for r in 0..br {
        let (srow, prow) = (&s[r * ld..][..bc], &mut probs[r * ld..][..bc]);
        let lse = saved.lse[row0 + r];
        if lse == C::neg_infinity() {
            prow.fill(C::zero()); // a fully masked row
        } else {
            exp_sum(srow, lse, prow);
        }
    }
    let d_o = saved.d_o.rows(bh, rows);
    tile_product_add((bc, width_v, br), dv, Mat::cols(probs, ld), d_o, C::one());
    tile_product((br, n, width_v), (dp, ld), false, d_o, Mat::rows(vt, ld), C::one());
    // dS = P ∘ (dP - delta), into the score tile.
    for r in 0..br {
        let delta = saved.delta[row0 + r];
        let srow = &mut s[r * ld..][..bc];
        zip_slice(&probs[r * ld..][..bc], &dp[r * ld..][..bc], srow, &|pv: C, dpv: C| pv * (dpv - delta));
        if let Some(dbias) = &saved.dbias {
            // SAFETY: only the task owning key tile `cols` of head `bh` writes these columns.
            unsafe { dbias.write((row0 + r) * p.dims.nk + cols.start, srow) };
        }
    }
    tile_product_add((bc, d, br), dk, Mat::cols(s, ld), p.q.rows(bh, rows), p.scale);
    let dq_rows = &mut dq[rows.start * d..][..br * d];
    tile_product((br, d, bc), (dq_rows, d), true, Mat::rows(s, ld), p.k.rows(bh, cols), p.scale);
}

//! The forward on the CPU. One task per (batch, head, group of up to [`BLOCKS`] blocks of
//! `BR` query rows), spread over rayon's threads. A task transposes its query rows once
//! (`Qᵀ`) and walks the key tiles its rows may see (causally hidden and padded tiles are
//! skipped, not masked, and tiles the causal diagonal crosses are taken in strips:
//! `Problem::pieces`). Per tile and query block it computes the scores transposed,
//! `Sᵀ = K Qᵀ` (keys by rows, query rows by columns: the key rows are the product's left
//! operand as they are, and each query row's statistics are a column, updated by vertical
//! operations, see `cpu_columns.rs`), folds them into an online softmax (per row a running
//! max `m` and sum `l`, the output rows accumulated in place and rescaled when `m` grows),
//! and adds `P V` to the output rows (in pieces of [`PV_KEYS`] keys). At the end
//! `o = acc / l` and the saved log-sum-exp is `m + ln l` (`-inf`, and a zero row, where
//! every key is masked); without a gradient to take, the log-sum-exp is not kept. Scratch
//! per thread: the transposed query rows, one `bc x BR` tile (`bc`: [`key_tile_width`]) and
//! three vectors of the group's rows.

use std::ops::Range;

use rayon::prelude::*;
use smallvec::SmallVec;

use super::cpu::{padded, tile_product_add, transpose_tile, Compute, Mat, Problem, BC, BR};
use super::cpu_columns::{softmax_columns, ColumnStats};
use super::Dims;
use crate::cpu::parallel::output_vec;
use crate::Result;

/// Multiply-adds below which the forward runs on the calling thread.
const PAR_FLOPS: usize = 1 << 18;

/// Query blocks per task from [`GROUP_FROM_NK`] keys on, where there are enough tasks for
/// the threads: each key tile is then read from memory once for four blocks.
const BLOCKS: usize = 4;

/// Keys from which tasks take [`BLOCKS`] query blocks. Over fewer, a head's keys and values
/// (128 KiB at 256 keys, D = 64, f32) stay in cache from one task to the next, and the
/// group's transposed queries would only cost memory: at N = 256 (B = 4, H = 8, D = 64) the
/// forward's heap peak is 2.25 MB with one block a task against 2.34 MB with four (torch's
/// SDPA: 2.30 MB). Measured on the 2-core Xeon of family 6 model 106, five alternating
/// rounds, median GFLOP/s of the forward at N = 256: 128.1 against 120.4 (causal 83.9
/// against 86.2), within the rounds' spread.
const GROUP_FROM_NK: usize = 512;

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
///
/// (Both measured before the forward computed its scores transposed. Rechecked after it for
/// the AVX2 kernel, on the Xeon with a build that ran its AVX2 tier, five alternating
/// rounds: 128-key tiles below 2048 keys were no faster than 64.)
const BC_WIDE: usize = 2 * BC;
const WIDE_FROM_NK: usize = 2048;

/// Keys per `P V` product: a wide tile's `P V` runs as two products of [`BC`] keys each,
/// adding into the output rows in turn. Over 128 keys, the transposed probabilities
/// (32 KiB) and the value rows (32 KiB) that every block of output rows reads do not fit
/// in a 48 KiB L1 together; over 64 they take half that.
///
/// Measured on the 2-core Xeon of family 6 model 106 (AVX-512 kernel, B = 4, H = 8,
/// D = 64), this against one 128-key product alternating in one process, six to twelve
/// rounds, best round, GFLOP/s: forward at N = 1024 on one thread 105.0 -> 112.5, on two
/// 203.7 -> 218.2 (causal 170.5 -> 182.0), N = 4096 on two 210.9 -> 230.1, N = 256 on two
/// 104.3 -> 122.0 (causal 78.4 -> 79.8, within the rounds' spread). The AVX2 kernel (the
/// same Xeon with its AVX-512 tier switched off, N = 4096, two threads): 145.6 -> 150.6
/// (causal 139.8 -> 149.8), rounds overlapping.
const PV_KEYS: usize = BC;

/// The key tile width of the forward over `nk` keys.
fn key_tile_width(nk: usize) -> usize {
    if nk >= WIDE_FROM_NK || crate::cpu::runs_avx512_kernels() {
        BC_WIDE
    } else {
        BC
    }
}

/// Extra columns of the transposed query rows (see `group`).
const QT_SKEW: usize = 16;

/// Per-thread scratch: the task's transposed query rows, the transposed score tile, and
/// the running max and sum of the task's rows and their rescaling factors.
struct Scratch<C> {
    qt: Vec<C>,
    st: Vec<C>,
    m: Vec<C>,
    l: Vec<C>,
    alpha: Vec<C>,
}

impl<C: Compute> Scratch<C> {
    /// For tasks of at most `task_rows` query rows and key tiles of at most `bc` keys.
    fn new(d: usize, task_rows: usize, bc: usize) -> Self {
        let rows = padded(task_rows);
        Scratch {
            qt: vec![C::zero(); d * (rows + QT_SKEW)],
            st: vec![C::zero(); bc * BR],
            m: vec![C::zero(); rows],
            l: vec![C::zero(); rows],
            alpha: vec![C::zero(); rows],
        }
    }
}

/// Tasks listed on the stack, up to this many: one per head of the GPT shape of `rnn bench
/// attention` (B = 32, H = 4, N = 64), whose forward's heap peak is then its output and the
/// threads' scratch alone (a 7 KiB list was 0.6% of it).
const STACK_TASKS: usize = 128;

type Tasks<'a, C> = SmallVec<[Task<'a, C>; STACK_TASKS]>;

/// One task: head `bh`, query rows `rows`, their output rows and log-sum-exp (when kept).
struct Task<'a, C> {
    bh: usize,
    rows: Range<usize>,
    o: &'a mut [C],
    lse: Option<&'a mut [C]>,
}

/// The output `[B, H, Nq, Dv]` and, with `keep_lse` (a gradient will be taken), the
/// log-sum-exp `[B, H, Nq]`, both contiguous.
pub(super) fn run<C: Compute>(p: &Problem<C>, keep_lse: bool) -> Result<(Vec<C>, Option<Vec<C>>)> {
    let Dims { batch, heads, nq, nk, d, dv } = p.dims;
    // Neither is zeroed here: each task zeroes its own output rows as it starts (then in
    // its core's cache, and on every thread at once) and writes each of its log-sum-exps.
    let mut o = output_vec::<C>(batch * heads * nq * dv)?;
    let mut lse = if keep_lse { Some(output_vec::<C>(batch * heads * nq)?) } else { None };
    let blocks_per_head = nq.div_ceil(BR);
    let grouped = nk >= GROUP_FROM_NK && batch * heads * blocks_per_head.div_ceil(BLOCKS) >= 4 * rayon::current_num_threads();
    let task_rows = if grouped { BR * BLOCKS } else { BR };
    let mut tasks = split_tasks(&mut o, lse.as_deref_mut(), batch * heads, (nq, task_rows), dv);
    let work = batch * heads * nq * nk * (d + dv);
    // No wider than the padded keys, no more rows than the queries: short sequences need no
    // more scratch than one tile.
    let (width, rows) = (key_tile_width(nk).min(padded(nk)), task_rows.min(nq));
    if work < PAR_FLOPS {
        let mut scratch = Scratch::new(d, rows, width);
        tasks.iter_mut().for_each(|t| group(p, t, &mut scratch));
    } else {
        tasks.par_iter_mut().for_each_init(|| Scratch::new(d, rows, width), |scratch, t| group(p, t, scratch));
    }
    drop(tasks); // ends their borrows of `o` and `lse`
    Ok((o, lse))
}

/// The tasks over `heads` heads of `nq` rows each, `task_rows` rows a task, with disjoint
/// parts of `o` and `lse` (when kept).
fn split_tasks<'a, C>(
    mut o: &'a mut [C],
    mut lse: Option<&'a mut [C]>,
    heads: usize,
    (nq, task_rows): (usize, usize),
    dv: usize,
) -> Tasks<'a, C> {
    let mut tasks = Tasks::with_capacity(heads * nq.div_ceil(task_rows));
    for bh in 0..heads {
        for start in (0..nq).step_by(task_rows) {
            let rows = start..(start + task_rows).min(nq);
            let (o_part, o_rest) = std::mem::take(&mut o).split_at_mut(rows.len() * dv);
            let (l_part, l_rest) = lse.take().map(|all| all.split_at_mut(rows.len())).unzip();
            (o, lse) = (o_rest, l_rest);
            tasks.push(Task { bh, rows, o: o_part, lse: l_part });
        }
    }
    tasks
}

/// The output rows and log-sum-exp of one task (`t.o` and `t.lse` of any value on entry).
fn group<C: Compute>(p: &Problem<C>, t: &mut Task<C>, scratch: &mut Scratch<C>) {
    let Dims { heads, d, dv, .. } = p.dims;
    let rows = t.rows.len();
    t.o.fill(C::zero());
    // The queries' columns: padded to whole kernel blocks with zeros, whose scores no row
    // reads. A piece starts a whole number of kernel blocks (16 rows) into the task (query
    // blocks of BR rows, strips of 16), so its padded columns are the task's padding, never
    // another piece's rows, and end within these. The row stride is one cache line more: at
    // a power of two (1 KiB for 256 rows) a product's rows of `Qᵀ` fall into a few cache
    // sets and evict each other.
    let columns = padded(rows);
    let qld = columns + QT_SKEW;
    transpose_tile(p.q.rows(t.bh, &t.rows), (rows, d), &mut scratch.qt, qld);
    scratch.m[..columns].fill(C::neg_infinity());
    scratch.l[..columns].fill(C::zero());
    let b = t.bh / heads;
    let key_end = p.key_end(b, &t.rows);
    let bc = key_tile_width(p.dims.nk);
    for start in (0..key_end).step_by(bc) {
        let keys = start..(start + bc).min(key_end);
        for first in (t.rows.start..t.rows.end).step_by(BR) {
            let block = first..(first + BR).min(t.rows.end);
            for (rows, cols) in p.pieces(b, &block, &keys) {
                let at = rows.start - t.rows.start;
                debug_assert_eq!(at % padded(1), 0, "a piece's padded columns would overlap the next piece's rows");
                let width = at..at + padded(rows.len());
                let o = &mut t.o[at * dv..][..rows.len() * dv];
                let (m, l, alpha) = (&mut scratch.m[width.clone()], &mut scratch.l[width.clone()], &mut scratch.alpha[width]);
                let qt = Mat::rows(&scratch.qt[at..], qld);
                key_tile(p, (t.bh, &rows, &cols), (qt, &mut scratch.st), o, ColumnStats { m, l, alpha });
            }
        }
    }
    let (m, l) = (&scratch.m[..rows], &scratch.l[..rows]);
    for r in 0..rows {
        // Every key masked: a zero row (as the task zeroed it), -inf log-sum-exp.
        let mut lse = C::neg_infinity();
        if l[r] != C::zero() {
            let inv = C::one() / l[r];
            t.o[r * dv..][..dv].iter_mut().for_each(|x| *x = *x * inv);
            lse = m[r] + l[r].ln();
        }
        if let Some(saved) = t.lse.as_deref_mut() {
            saved[r] = lse;
        }
    }
}

/// Folds the keys `cols` into the output rows `o` and the running softmax of query rows
/// `rows` of head `bh` (their columns of `stats`), with `qt` the rows' transposed queries
/// and `st` the scratch for their transposed scores.
fn key_tile<C: Compute>(
    p: &Problem<C>,
    (bh, rows, cols): (usize, &Range<usize>, &Range<usize>),
    (qt, st): (Mat<C>, &mut [C]),
    o: &mut [C],
    ColumnStats { m, l, alpha }: ColumnStats<C>,
) {
    let dv = p.dims.dv;
    let (br, bc, ld) = (rows.len(), cols.len(), padded(rows.len()));
    let st = &mut st[..bc * ld];
    p.scores_t(bh, rows, cols, qt, st, ld);
    softmax_columns(st, ld, bc, ColumnStats { m, l, alpha: &mut *alpha });
    for (row, &a) in o.chunks_exact_mut(dv).zip(&alpha[..br]) {
        if a != C::one() {
            row.iter_mut().for_each(|x| *x = *x * a);
        }
    }
    // P is the transpose of the tile: query rows by its columns.
    for k0 in (0..bc).step_by(PV_KEYS) {
        let k1 = (k0 + PV_KEYS).min(bc);
        let keys = cols.start + k0..cols.start + k1;
        tile_product_add((br, dv, k1 - k0), o, Mat::cols(&st[k0 * ld..], ld), p.v.rows(bh, &keys), C::one());
    }
}

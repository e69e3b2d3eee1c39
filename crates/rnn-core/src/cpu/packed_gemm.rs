//! The packed GEMM behind f32 products on AVX2 CPUs (without AVX-512) and every bf16 / f16
//! product: f32 accumulation, operands of any strides. Blocking follows the usual scheme: a
//! `KC x NC` block of B is packed once and shared by the threads; the output is cut into
//! tasks of at most `MC` rows (and, when there are too few rows to keep every thread busy,
//! column ranges too); each task packs its rows of A (L2-sized) and sweeps register tiles
//! over them (the micro-kernels are in `matmul_half_kernels`).

use std::cell::RefCell;
use std::ops::Range;

use rayon::prelude::*;

use super::matmul_half_kernels::{GemmElem, MicroKernel};
use super::parallel::SharedOut;

/// Depth of one packed block (even: the bf16-pair kernel packs k two at a time).
const KC: usize = 256;
/// Rows of A packed per task: 96 x 256 f32 = 96 KiB, within L2.
const MC: usize = 96;
/// Columns of B packed per block (L3-sized).
const NC: usize = 1024;
/// Column ranges of a task are multiples of this: whole tiles of both NR (16 and 32).
const COL_UNIT: usize = 32;
/// The deepest product packed in one go (B for all its depth blocks, then one pass of the
/// tasks): 4096 x NC f32 is 16 MiB. Deeper products run in several such passes.
const K_PASS: usize = 16 * KC;
/// Products below this many multiply-adds per matrix run on the calling thread.
pub(super) const PAR_FLOPS: usize = 1 << 18;

/// One matrix operand: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a, E> {
    pub data: &'a [E],
    pub rs: usize,
    pub cs: usize,
}

impl<E: GemmElem> Mat<'_, E> {
    /// Elements `(i, j0..j0 + dst.len())` converted by `K` into `dst` (`gather` holds the
    /// elements of a strided row).
    fn row<K: MicroKernel<E>>(&self, (i, j0): (usize, usize), gather: &mut Vec<E>, dst: &mut [K::P]) {
        let first = i * self.rs + j0 * self.cs;
        if self.cs == 1 {
            K::convert(&self.data[first..first + dst.len()], dst);
        } else {
            gather.clear();
            gather.extend((0..dst.len()).map(|t| self.data[first + t * self.cs]));
            K::convert(gather, dst);
        }
    }

    /// The transpose: element `(j, i)` is this one's `(i, j)`.
    fn t(self) -> Self {
        Mat { data: self.data, rs: self.cs, cs: self.rs }
    }
}

/// Whether a product of this size uses threads inside one matrix (else the caller may
/// spread a batch over threads).
pub(super) fn runs_parallel((m, n, k): (usize, usize, usize)) -> bool {
    m * n * k >= PAR_FLOPS && (m >= 16 || n >= 2 * COL_UNIT) && rayon::current_num_threads() > 1
}

/// How the output is cut into tasks: row blocks of `mc` rows (whole register tiles), each
/// split into `col_parts` column ranges (whole `COL_UNIT`s).
struct Grid {
    m: usize,
    /// Register-tile rows (the kernel's MR).
    mr: usize,
    /// Row blocks: block r covers tile rows `r * panels / row_blocks..`, sizes within one
    /// tile row of each other.
    row_blocks: usize,
    col_parts: usize,
}

impl Grid {
    /// A multiple of the thread count, at least two per thread where the shape allows, of
    /// nearly equal size; rows first (a column split packs the same rows of A once per
    /// range), at most `MC` rows each.
    fn new(m: usize, mr: usize, nc_max: usize, par: bool) -> Grid {
        let panels = m.div_ceil(mr);
        let fewest = panels.div_ceil(MC / mr);
        if !par {
            return Grid { m, mr, row_blocks: fewest, col_parts: 1 };
        }
        let threads = rayon::current_num_threads().max(1);
        let wanted = fewest.max(2 * threads).next_multiple_of(threads);
        let row_blocks = wanted.min(panels);
        let col_parts = wanted.div_ceil(row_blocks).min(nc_max.div_ceil(COL_UNIT)).max(1);
        Grid { m, mr, row_blocks, col_parts }
    }

    /// The tasks of one `nc`-column block and task `t`'s rows and columns.
    fn tasks(&self, nc: usize) -> (usize, impl Fn(usize) -> (Range<usize>, Range<usize>) + Sync + '_) {
        let width = nc.div_ceil(COL_UNIT).div_ceil(self.col_parts) * COL_UNIT;
        let parts = nc.div_ceil(width);
        let panels = self.m.div_ceil(self.mr);
        let row = move |r: usize| (r * panels / self.row_blocks * self.mr).min(self.m);
        let task = move |t: usize| {
            let (r, c) = (t / parts, t % parts);
            (row(r)..row(r + 1), c * width..(c * width + width).min(nc))
        };
        (self.row_blocks * parts, task)
    }
}

/// The output as a pointer the tasks share: each writes only its own rectangle (see
/// `Grid::tasks`).
type Out = SharedOut<f32>;

thread_local! {
    /// Per-thread packing buffers (A panels; B blocks), reused from product to product.
    static A_PACK: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    static B_PACK: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `len` packed elements from `cache` (a fresh buffer when it is in use, as when
/// this thread runs another product while it waits inside one).
fn with_buffer<P: bytemuck::Pod, R>(
    cache: &'static std::thread::LocalKey<RefCell<Vec<u32>>>,
    len: usize,
    f: impl FnOnce(&mut [P]) -> R,
) -> R {
    let words = (len * size_of::<P>()).div_ceil(4);
    let run = |v: &mut Vec<u32>| {
        if v.len() < words {
            v.resize(words, 0);
        }
        f(&mut bytemuck::cast_slice_mut::<u32, P>(&mut v[..words])[..len])
    };
    cache.with(|c| match c.try_borrow_mut() {
        Ok(mut v) => run(&mut v),
        Err(_) => run(&mut Vec::new()),
    })
}

/// `c = a @ b`, or `c += a @ b` when `accumulate`, for a row-major `m x n` `c`. Per block
/// of NC columns (and K_PASS depth): B is packed for every KC-deep block in one parallel
/// pass, then the tasks (rows x columns, see `Grid`) run in a second, each sweeping all
/// depth blocks over its rectangle: two thread hand-offs per block, whatever the depth.
/// The caller checks that the operands address `m x k` and `k x n` elements and that the
/// CPU runs `K`.
pub(super) fn gemm<E: GemmElem, K: MicroKernel<E>>(
    a: Mat<E>,
    b: Mat<E>,
    (m, n, k): (usize, usize, usize),
    c: &mut [f32],
    par: bool,
    accumulate: bool,
) {
    assert!(c.len() >= m * n, "internal: gemm output of {} for {m} x {n}", c.len());
    if k == 0 || m * n == 0 {
        if !accumulate {
            c[..m * n].fill(0.0);
        }
        return;
    }
    if par && rayon::current_thread_index().is_none() {
        // Called from outside the thread pool: hand the whole product to the pool at once
        // (one wake-up and one wait), not each of its parallel passes.
        return rayon::scope(|_| gemm::<E, K>(a, b, (m, n, k), c, par, accumulate));
    }
    let grid = Grid::new(m, K::MR, n.min(NC), par);
    let out = SharedOut(c.as_mut_ptr());
    let panel = KC.div_ceil(K::KG) * K::NR * K::KG;
    let b_len = K_PASS.min(k).div_ceil(KC) * NC.min(n).div_ceil(K::NR) * panel;
    with_buffer::<K::P, _>(&B_PACK, b_len, |bp| {
        for j0 in (0..n).step_by(NC) {
            let nc = NC.min(n - j0);
            for p0 in (0..k).step_by(K_PASS) {
                let depth = (p0, K_PASS.min(k - p0));
                let bp = pack_b::<E, K>(bp, b, depth, (j0, nc), par);
                let (count, task) = grid.tasks(nc);
                let run = |t: usize| {
                    let (rows, cols) = task(t);
                    // SAFETY: the task's rectangle lies within the m x n output, and no
                    // other task writes it.
                    unsafe { rectangle::<E, K>(a, bp, (rows, cols), depth, (j0, nc, n), out, accumulate || p0 > 0) };
                };
                if par {
                    (0..count).into_par_iter().for_each(run);
                } else {
                    (0..count).for_each(run);
                }
            }
        }
    });
}

/// One task: rows `rows` of A over depth `p0..p0 + depth` times the packed B block's
/// columns `cols` into the output columns `j0 + cols` (an `nc`-wide block), row stride `n`;
/// written (or added, when `add`) at the first depth block, added at the others.
///
/// SAFETY: the rectangle lies within the output, no other thread writes it, and the CPU
/// runs `K`.
unsafe fn rectangle<E: GemmElem, K: MicroKernel<E>>(
    a: Mat<E>,
    bp: &[K::P],
    (rows, cols): (Range<usize>, Range<usize>),
    (p0, depth): (usize, usize),
    (j0, nc, n): (usize, usize, usize),
    out: Out,
    add: bool,
) {
    let b_block = nc.div_ceil(K::NR) * KC.div_ceil(K::KG) * K::NR * K::KG;
    for (kb, k0) in (0..depth).step_by(KC).enumerate() {
        let kc = KC.min(depth - k0);
        let a_len = rows.len().div_ceil(K::MR) * kc.div_ceil(K::KG) * K::MR * K::KG;
        with_buffer::<K::P, _>(&A_PACK, a_len, |ap| {
            K::pack_a(ap, a, (rows.start, rows.len()), (p0 + k0, kc));
            let b_kb = &bp[kb * b_block..][..b_block];
            // SAFETY: the caller's guarantee.
            unsafe { block::<K::P, E, K>((ap, b_kb), (rows.clone(), kc), (j0, cols.clone(), n), out, add || kb > 0) };
        });
    }
}

/// Writes (or adds, when `add`) the packed A rows `rows` (depth `kc`) times the packed B
/// block's columns `cols` (starting at a multiple of `COL_UNIT`) into the output columns
/// `j0 + cols`, row stride `n`.
///
/// SAFETY: `rows` x `j0 + cols` lies within the output, and the CPU runs `K`.
unsafe fn block<P, E: GemmElem, K: MicroKernel<E, P = P>>(
    (ap, bp): (&[P], &[P]),
    (rows, kc): (Range<usize>, usize),
    (j0, cols, n): (usize, Range<usize>, usize),
    out: Out,
    add: bool,
) {
    let kq = kc.div_ceil(K::KG);
    // B panels are laid out KC deep whatever `kc` is (see `pack_b`); A panels `kc` deep.
    let (a_panel, b_panel) = (kq * K::MR * K::KG, KC.div_ceil(K::KG) * K::NR * K::KG);
    let mut tile = [0f32; 256];
    // B micro-panel outer: it stays in L1 while the A panels stream past it.
    for jp in (cols.start / K::NR)..cols.end.div_ceil(K::NR) {
        let bpan = &bp[jp * b_panel..][..kq * K::NR * K::KG];
        let width = K::NR.min(cols.end - jp * K::NR);
        for (ip, apan) in ap.chunks_exact(a_panel).enumerate() {
            let height = K::MR.min(rows.len() - ip * K::MR);
            // SAFETY: the tile's rows and columns lie within the caller's rectangle.
            let c = unsafe { out.at((rows.start + ip * K::MR) * n + j0 + jp * K::NR) };
            if width == K::NR && height == K::MR {
                // SAFETY: the panels have the lengths `tile_into` reads; c addresses the tile.
                unsafe { K::tile_into(kq, apan, bpan, c, n, add) };
                continue;
            }
            // SAFETY: as above, into the local tile (MR x NR <= 256, asserted by the kernels).
            unsafe { K::tile(kq, apan, bpan, &mut tile) };
            for i in 0..height {
                // SAFETY: row i of the partial tile, `width` values, within the rectangle.
                let dst = unsafe { std::slice::from_raw_parts_mut(c.add(i * n), width) };
                let src = &tile[i * K::NR..][..width];
                if add {
                    dst.iter_mut().zip(src).for_each(|(d, t)| *d += t);
                } else {
                    dst.copy_from_slice(src);
                }
            }
        }
    }
}

/// Packs rows `i0..i0 + mr`, depth `k0..k0 + kc` of A into `MR`-row panels, zero-padded:
/// any strides, element by element (the default of `MicroKernel::pack_a`).
pub(super) fn pack_a<E: GemmElem, K: MicroKernel<E>>(
    out: &mut [K::P],
    a: Mat<E>,
    (i0, mr): (usize, usize),
    (k0, kc): (usize, usize),
) {
    let kq = kc.div_ceil(K::KG);
    let panel = kq * K::MR * K::KG;
    if mr % K::MR != 0 || kc % K::KG != 0 {
        out.fill(K::P::default());
    }
    let at = |i: usize, kk: usize| (i / K::MR) * panel + ((kk / K::KG) * K::MR + i % K::MR) * K::KG + kk % K::KG;
    let mut gather = Vec::new();
    if a.rs == 1 && a.cs != 1 {
        // Column-major (a transposed operand): each column's rows are contiguous.
        let mut run = vec![K::P::default(); mr];
        for kk in 0..kc {
            a.t().row::<K>((k0 + kk, i0), &mut gather, &mut run);
            run.iter().enumerate().for_each(|(i, &x)| out[at(i, kk)] = x);
        }
    } else {
        let mut run = vec![K::P::default(); kc];
        for i in 0..mr {
            a.row::<K>((i0 + i, k0), &mut gather, &mut run);
            run.iter().enumerate().for_each(|(kk, &x)| out[at(i, kk)] = x);
        }
    }
}

/// Packs depth `k0..k0 + kc`, columns `j0..j0 + cols` (`cols <= NR`) of B into one panel
/// `dst`, zero-padded: any strides (the default of `MicroKernel::pack_b_panel`).
pub(super) fn pack_b_panel<E: GemmElem, K: MicroKernel<E>>(
    dst: &mut [K::P],
    b: Mat<E>,
    (k0, kc): (usize, usize),
    (j0, cols): (usize, usize),
) {
    if cols < K::NR || kc % K::KG != 0 {
        dst.fill(K::P::default());
    }
    let at = |kk: usize, j: usize| ((kk / K::KG) * K::NR + j) * K::KG + kk % K::KG;
    let mut gather = Vec::new();
    if b.rs == 1 && b.cs != 1 {
        // Column-major (a transposed operand, as `x @ w.t()`): each column is contiguous.
        let mut run = [K::P::default(); KC];
        for j in 0..cols {
            b.t().row::<K>((j0 + j, k0), &mut gather, &mut run[..kc]);
            run[..kc].iter().enumerate().for_each(|(kk, &x)| dst[at(kk, j)] = x);
        }
    } else if K::KG == 1 && cols == K::NR && b.cs == 1 {
        // Row-major, whole panel: each depth step is one contiguous run of NR values (a
        // constant length: the conversion inlines to register moves).
        for (kk, row) in dst.chunks_exact_mut(K::NR).take(kc).enumerate() {
            let first = (k0 + kk) * b.rs + j0;
            K::convert(&b.data[first..first + K::NR], row);
        }
    } else {
        let mut run = [K::P::default(); 64];
        debug_assert!(K::NR <= run.len());
        for kk in 0..kc {
            b.row::<K>((k0 + kk, j0), &mut gather, &mut run[..cols]);
            run[..cols].iter().enumerate().for_each(|(j, &x)| dst[at(kk, j)] = x);
        }
    }
}

/// Packs depth `p0..p0 + depth`, columns `j0..j0 + nc` of B into `buf`: per KC-deep block,
/// `NR`-column panels, each laid out KC deep (the last block's tail unused), zero-padded;
/// all panels in parallel when `par`.
fn pack_b<'b, E: GemmElem, K: MicroKernel<E>>(
    buf: &'b mut [K::P],
    b: Mat<E>,
    (p0, depth): (usize, usize),
    (j0, nc): (usize, usize),
    par: bool,
) -> &'b [K::P] {
    let panel = KC.div_ceil(K::KG) * K::NR * K::KG;
    let per_block = nc.div_ceil(K::NR);
    let out = &mut buf[..depth.div_ceil(KC) * per_block * panel];
    let fill = |(idx, dst): (usize, &mut [K::P])| {
        let (k0, jp) = (p0 + (idx / per_block) * KC, idx % per_block);
        let kc = KC.min(p0 + depth - k0);
        K::pack_b_panel(dst, b, (k0, kc), (j0 + jp * K::NR, K::NR.min(nc - jp * K::NR)));
    };
    if par {
        out.par_chunks_mut(panel).enumerate().for_each(fill);
    } else {
        out.chunks_mut(panel).enumerate().for_each(fill);
    }
    out
}

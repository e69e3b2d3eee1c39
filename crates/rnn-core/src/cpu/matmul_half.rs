//! bf16 and f16 matmul: a packed GEMM that reads 16-bit operands, accumulates in f32 and
//! rounds each output once (as PyTorch does; the `gemm` crate's f16 kernel rounds its f16
//! output after every depth block instead). Blocking follows the usual scheme: a `KC x NC`
//! block of B is packed once and shared by the threads, each thread packs an `MC x KC`
//! block of A (L2-sized) and sweeps register tiles over it (see `matmul_bf16_kernels`).
//!
//! Three micro-kernels, picked at run time: AVX512-BF16 (`vdpbf16ps` on bf16 pairs, bf16
//! only), AVX2 + FMA (inputs widened to f32 while packing, f16 with F16C: no whole-operand
//! f32 copy), and portable loops.
//! Without AVX512-BF16 the multiply-adds run at f32 speed; bf16 then only saves memory
//! traffic (half the bytes read per operand).

use half::{bf16, f16};
use rayon::prelude::*;

pub(crate) use super::matmul_half_kernels::Half;
use super::matmul_half_kernels::{Avx2, Avx512Bf16, MicroKernel, Scalar};
use crate::Result;

/// Depth of one packed block (even: the bf16-pair kernel packs k two at a time).
const KC: usize = 256;
/// Rows of A packed per task: 96 x 256 f32 = 96 KiB, within L2.
const MC: usize = 96;
/// Columns of B packed per block (L3-sized).
const NC: usize = 1024;
/// The smallest row block a thread takes: whole tiles of both MR (6 and 8).
const MIN_ROWS: usize = 24;
/// Products below this many multiply-adds per matrix run on the calling thread.
const PAR_FLOPS: usize = 1 << 18;

/// The micro-kernel family a product runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Avx512Bf16,
    Avx2,
    Scalar,
}

impl Path {
    pub(crate) const ALL: [Path; 3] = [Path::Avx512Bf16, Path::Avx2, Path::Scalar];

    /// Whether this CPU can run the path.
    pub(crate) fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Path::Avx512Bf16 => {
                    super::matmul_half_kernels::HAS_AVX512BF16_KERNEL
                        && is_x86_feature_detected!("avx512f")
                        && is_x86_feature_detected!("avx512bf16")
                }
                Path::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
                Path::Scalar => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Path::Scalar
        }
    }

    /// The fastest path this CPU has, detected once.
    pub(crate) fn best() -> Path {
        static BEST: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| Path::ALL.into_iter().find(|p| p.available()).unwrap_or(Path::Scalar))
    }
}

/// One matrix operand: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a, E> {
    pub data: &'a [E],
    pub rs: usize,
    pub cs: usize,
}

impl<E: Half> Mat<'_, E> {
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
}

/// What the GEMM needs of its input type beyond `Half`: the bf16-pair kernel exists for bf16 only.
pub(crate) trait GemmInput: Half {
    /// Runs `gemm` with the AVX512-BF16 kernel; false when there is none for this type.
    fn gemm_pairs(a: Mat<Self>, b: Mat<Self>, dims: (usize, usize, usize), acc: &mut [f32], par: bool) -> bool;
}

impl GemmInput for bf16 {
    fn gemm_pairs(a: Mat<bf16>, b: Mat<bf16>, dims: (usize, usize, usize), acc: &mut [f32], par: bool) -> bool {
        gemm::<bf16, Avx512Bf16>(a, b, dims, acc, par);
        true
    }
}

impl GemmInput for f16 {
    fn gemm_pairs(_: Mat<f16>, _: Mat<f16>, _: (usize, usize, usize), _: &mut [f32], _: bool) -> bool {
        false
    }
}

/// `out = a @ b` for one `m x n` output (row-major), with `path`'s kernels.
///
/// The caller checks that `a` addresses `m x k` and `b` `k x n` elements. A path this CPU
/// lacks (or one without a kernel for `E`) falls back to the next one.
pub(crate) fn matmul<E: GemmInput>(
    path: Path,
    a: Mat<E>,
    b: Mat<E>,
    dims: (usize, usize, usize),
    out: &mut [E],
) -> Result<()> {
    let (m, n, _) = dims;
    let mut acc = super::parallel::zeroed_vec::<f32>(m * n)?;
    let par = runs_parallel(dims);
    let pairs_done = path == Path::Avx512Bf16 && path.available() && E::gemm_pairs(a, b, dims, &mut acc, par);
    if !pairs_done {
        if path != Path::Scalar && Path::Avx2.available() {
            gemm::<E, Avx2>(a, b, dims, &mut acc, par);
        } else {
            gemm::<E, Scalar>(a, b, dims, &mut acc, par);
        }
    }
    // Round once, nearest-even, NaN kept.
    E::narrow_slice(&acc, out);
    Ok(())
}

/// Whether a product of this size uses threads inside one matrix (else the caller may
/// spread a batch over threads).
fn runs_parallel((m, n, k): (usize, usize, usize)) -> bool {
    m * n * k >= PAR_FLOPS && m >= 2 * MIN_ROWS
}

/// Rows of A per task: `MC`, or fewer so that every thread gets work (a multiple of 24,
/// whole register tiles of every kernel).
fn rows_per_task(m: usize, par: bool) -> usize {
    if !par {
        return MC;
    }
    let threads = rayon::current_num_threads().max(1);
    m.div_ceil(2 * threads).next_multiple_of(MIN_ROWS).min(MC)
}

/// `acc += a @ b` blocked over (NC columns, KC depth, MC rows).
fn gemm<E: Half, K: MicroKernel<E>>(
    a: Mat<E>,
    b: Mat<E>,
    (m, n, k): (usize, usize, usize),
    acc: &mut [f32],
    par: bool,
) {
    let mut bp = Vec::new();
    let mc = rows_per_task(m, par);
    for j0 in (0..n).step_by(NC) {
        let nc = NC.min(n - j0);
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            pack_b::<E, K>(&mut bp, b, (k0, kc), (j0, nc), par);
            let rows = |(blk, c): (usize, &mut [f32])| {
                let ap = pack_a::<E, K>(a, (blk * mc, c.len() / n), (k0, kc));
                block::<E, K>(&ap, &bp, (c.len() / n, kc), (j0, nc, n), c);
            };
            if par {
                acc.par_chunks_mut(mc * n).enumerate().for_each(rows);
            } else {
                acc.chunks_mut(mc * n).enumerate().for_each(rows);
            }
        }
    }
}

/// Adds the packed `mr x kc` A block times the packed `kc x nc` B block into the rows `c`
/// (each `n` wide) at columns `j0..j0 + nc`.
fn block<E: Half, K: MicroKernel<E>>(
    ap: &[K::P],
    bp: &[K::P],
    (mr, kc): (usize, usize),
    (j0, nc, n): (usize, usize, usize),
    c: &mut [f32],
) {
    let kq = kc.div_ceil(K::KG);
    let (a_panel, b_panel) = (kq * K::MR * K::KG, kq * K::NR * K::KG);
    let mut tile = [0f32; 256];
    debug_assert!(K::MR * K::NR <= tile.len());
    // B micro-panel outer: it stays in L1 while the A panels stream past it.
    for (jp, bpan) in bp.chunks_exact(b_panel).enumerate().take(nc.div_ceil(K::NR)) {
        let cols = K::NR.min(nc - jp * K::NR);
        for (ip, apan) in ap.chunks_exact(a_panel).enumerate() {
            // SAFETY: the panels have exactly the lengths `tile` reads, the tile array
            // holds MR x NR, and `matmul` only picks a kernel this CPU runs.
            unsafe { K::tile(kq, apan, bpan, &mut tile) };
            let rows = K::MR.min(mr - ip * K::MR);
            for i in 0..rows {
                let dst = &mut c[(ip * K::MR + i) * n + j0 + jp * K::NR..][..cols];
                dst.iter_mut().zip(&tile[i * K::NR..]).for_each(|(d, t)| *d += t);
            }
        }
    }
}

/// Packs rows `i0..i0 + mr`, depth `k0..k0 + kc` of A into `MR`-row panels, zero-padded.
fn pack_a<E: Half, K: MicroKernel<E>>(a: Mat<E>, (i0, mr): (usize, usize), (k0, kc): (usize, usize)) -> Vec<K::P> {
    let kq = kc.div_ceil(K::KG);
    let panel = kq * K::MR * K::KG;
    let mut out = vec![K::P::default(); mr.div_ceil(K::MR) * panel];
    let (mut run, mut gather) = (vec![K::P::default(); kc], Vec::new());
    for i in 0..mr {
        a.row::<K>((i0 + i, k0), &mut gather, &mut run);
        let base = (i / K::MR) * panel + (i % K::MR) * K::KG;
        for (kk, &x) in run.iter().enumerate() {
            out[base + (kk / K::KG) * K::MR * K::KG + kk % K::KG] = x;
        }
    }
    out
}

/// Packs depth `k0..k0 + kc`, columns `j0..j0 + nc` of B into `NR`-column panels, zero-padded;
/// the panels in parallel when `par` (packed on one thread, B cost a third of a 256-wide
/// product's time).
fn pack_b<E: Half, K: MicroKernel<E>>(
    out: &mut Vec<K::P>,
    b: Mat<E>,
    (k0, kc): (usize, usize),
    (j0, nc): (usize, usize),
    par: bool,
) {
    let panel = kc.div_ceil(K::KG) * K::NR * K::KG;
    out.clear();
    out.resize(nc.div_ceil(K::NR) * panel, K::P::default());
    let fill = |(jp, dst): (usize, &mut [K::P])| {
        let cols = K::NR.min(nc - jp * K::NR);
        let (mut run, mut gather) = ([K::P::default(); 64], Vec::new());
        debug_assert!(K::NR <= run.len());
        for kk in 0..kc {
            b.row::<K>((k0 + kk, j0 + jp * K::NR), &mut gather, &mut run[..cols]);
            let base = (kk / K::KG) * K::NR * K::KG + kk % K::KG;
            for (j, &x) in run[..cols].iter().enumerate() {
                dst[base + j * K::KG] = x;
            }
        }
    };
    if par {
        out.par_chunks_mut(panel).enumerate().for_each(fill);
    } else {
        out.chunks_mut(panel).enumerate().for_each(fill);
    }
}

/// `[batch, m, k] x [batch, k, n]` given each matrix's first element: one product per
/// batch entry, spread over threads when each product alone runs single-threaded.
pub(crate) fn batched<E: GemmInput>(
    (a, b): (&[E], &[E]),
    (oa, ob): (&[usize], &[usize]),
    ((a_rs, a_cs), (b_rs, b_cs)): ((usize, usize), (usize, usize)),
    dims: (usize, usize, usize),
    out: &mut [E],
) -> Result<()> {
    let (m, n, k) = dims;
    if k == 0 {
        // Empty sums; an operand with no elements may also start past its (empty) storage.
        out.fill(E::default());
        return Ok(());
    }
    if m * n == 0 {
        return Ok(());
    }
    let one = |(i, dst): (usize, &mut [E])| {
        let ma = Mat { data: &a[oa[i]..], rs: a_rs, cs: a_cs };
        let mb = Mat { data: &b[ob[i]..], rs: b_rs, cs: b_cs };
        matmul(Path::best(), ma, mb, dims, dst)
    };
    if runs_parallel(dims) || m * n * k * oa.len() < PAR_FLOPS {
        out.chunks_mut(m * n).enumerate().try_for_each(one)
    } else {
        out.par_chunks_mut(m * n).enumerate().try_for_each(one)
    }
}

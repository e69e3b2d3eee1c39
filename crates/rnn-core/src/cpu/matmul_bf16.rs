//! bf16 matmul: a packed GEMM that reads bf16 operands, accumulates in f32 and rounds each
//! output to bf16 once (as PyTorch does). Blocking follows the usual scheme: a `KC x NC`
//! block of B is packed once and shared by the threads, each thread packs an `MC x KC`
//! block of A (L2-sized) and sweeps register tiles over it (see `matmul_bf16_kernels`).
//!
//! Three micro-kernels, picked at run time: AVX512-BF16 (`vdpbf16ps` on bf16 pairs), AVX2 +
//! FMA (bf16 widened to f32 while packing: no whole-operand f32 copy), and portable loops.
//! Without AVX512-BF16 the multiply-adds run at f32 speed; bf16 then only saves memory
//! traffic (half the bytes read per operand).

use half::bf16;
use rayon::prelude::*;

use super::matmul_bf16_kernels::{Avx2, Avx512Bf16, MicroKernel, Scalar};
use crate::Result;

/// Depth of one packed block (even: the bf16-pair kernel packs k two at a time).
const KC: usize = 256;
/// Rows of A packed per task: 96 x 256 f32 = 96 KiB, within L2.
const MC: usize = 96;
/// Columns of B packed per block (L3-sized).
const NC: usize = 1024;
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
                    super::matmul_bf16_kernels::HAS_AVX512BF16_KERNEL
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
pub(crate) struct Mat<'a> {
    pub data: &'a [bf16],
    pub rs: usize,
    pub cs: usize,
}

impl Mat<'_> {
    fn at(&self, i: usize, j: usize) -> bf16 {
        self.data[i * self.rs + j * self.cs]
    }
}

/// `out = a @ b` for one `m x n` output (row-major), with `path`'s kernels.
///
/// The caller checks that `a` addresses `m x k` and `b` `k x n` elements; `path` must be
/// `available()` (an unavailable one falls back to `Scalar`).
pub(crate) fn matmul(path: Path, a: Mat, b: Mat, (m, n, k): (usize, usize, usize), out: &mut [bf16]) -> Result<()> {
    let mut acc = super::parallel::zeroed_vec::<f32>(m * n)?;
    let par = runs_parallel((m, n, k));
    match path {
        Path::Avx512Bf16 if path.available() => gemm::<Avx512Bf16>(a, b, (m, n, k), &mut acc, par),
        Path::Avx2 if path.available() => gemm::<Avx2>(a, b, (m, n, k), &mut acc, par),
        _ => gemm::<Scalar>(a, b, (m, n, k), &mut acc, par),
    }
    // Round to bf16 once, nearest-even, NaN kept.
    out.iter_mut().zip(&acc).for_each(|(o, &x)| *o = bf16::from_f32(x));
    Ok(())
}

/// Whether a product of this size uses threads inside one matrix (else the caller may
/// spread a batch over threads).
pub(crate) fn runs_parallel((m, n, k): (usize, usize, usize)) -> bool {
    m * n * k >= PAR_FLOPS && m > MC
}

/// `acc += a @ b` blocked over (NC columns, KC depth, MC rows).
fn gemm<K: MicroKernel>(a: Mat, b: Mat, (_, n, k): (usize, usize, usize), acc: &mut [f32], par: bool) {
    let mut bp = Vec::new();
    for j0 in (0..n).step_by(NC) {
        let nc = NC.min(n - j0);
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            pack_b::<K>(&mut bp, b, (k0, kc), (j0, nc));
            let rows = |(blk, c): (usize, &mut [f32])| {
                let mr = c.len() / n;
                let ap = pack_a::<K>(a, (blk * MC, mr), (k0, kc));
                block::<K>(&ap, &bp, (mr, kc), (j0, nc, n), c);
            };
            if par {
                acc.par_chunks_mut(MC * n).enumerate().for_each(rows);
            } else {
                acc.chunks_mut(MC * n).enumerate().for_each(rows);
            }
        }
    }
}

/// Adds the packed `mr x kc` A block times the packed `kc x nc` B block into the rows `c`
/// (each `n` wide) at columns `j0..j0 + nc`.
fn block<K: MicroKernel>(
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
fn pack_a<K: MicroKernel>(a: Mat, (i0, mr): (usize, usize), (k0, kc): (usize, usize)) -> Vec<K::P> {
    let kq = kc.div_ceil(K::KG);
    let panel = kq * K::MR * K::KG;
    let mut out = vec![K::P::default(); mr.div_ceil(K::MR) * panel];
    for i in 0..mr {
        let base = (i / K::MR) * panel + (i % K::MR) * K::KG;
        for kk in 0..kc {
            out[base + (kk / K::KG) * K::MR * K::KG + kk % K::KG] = K::pack(a.at(i0 + i, k0 + kk));
        }
    }
    out
}

/// Packs depth `k0..k0 + kc`, columns `j0..j0 + nc` of B into `NR`-column panels, zero-padded.
fn pack_b<K: MicroKernel>(out: &mut Vec<K::P>, b: Mat, (k0, kc): (usize, usize), (j0, nc): (usize, usize)) {
    let kq = kc.div_ceil(K::KG);
    let panel = kq * K::NR * K::KG;
    out.clear();
    out.resize(nc.div_ceil(K::NR) * panel, K::P::default());
    for kk in 0..kc {
        let base = (kk / K::KG) * K::NR * K::KG + kk % K::KG;
        for j in 0..nc {
            out[(j / K::NR) * panel + base + (j % K::NR) * K::KG] = K::pack(b.at(k0 + kk, j0 + j));
        }
    }
}

/// `[batch, m, k] x [batch, k, n]` given each matrix's first element: one product per
/// batch entry, spread over threads when each product alone runs single-threaded.
pub(crate) fn batched(
    (a, b): (&[bf16], &[bf16]),
    (oa, ob): (&[usize], &[usize]),
    ((a_rs, a_cs), (b_rs, b_cs)): ((usize, usize), (usize, usize)),
    dims: (usize, usize, usize),
    out: &mut [bf16],
) -> Result<()> {
    let (m, n, k) = dims;
    let one = |(i, dst): (usize, &mut [bf16])| {
        let ma = Mat { data: &a[oa[i]..], rs: a_rs, cs: a_cs };
        let mb = Mat { data: &b[ob[i]..], rs: b_rs, cs: b_cs };
        matmul(Path::best(), ma, mb, dims, dst)
    };
    if m * n == 0 {
        return Ok(());
    }
    let single = runs_parallel(dims) || m * n * k * oa.len() < PAR_FLOPS;
    if single {
        out.chunks_mut(m * n).enumerate().try_for_each(one)
    } else {
        out.par_chunks_mut(m * n).enumerate().try_for_each(one)
    }
}

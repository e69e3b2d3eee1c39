//! bf16 and f16 matmul: the packed GEMM (`packed_gemm`) reads 16-bit operands, accumulates
//! in f32 and rounds each output once (as PyTorch does; the `gemm` crate's f16 kernel rounds
//! its f16 output after every depth block instead).
//!
//! Four micro-kernels, picked at run time: AVX512-BF16 (`vdpbf16ps` on bf16 pairs, bf16
//! only), AVX-512F and AVX2 + FMA (inputs widened to f32 while packing, f16 with F16C: no
//! whole-operand f32 copy), and portable loops.
//! Without AVX512-BF16 the multiply-adds run at f32 speed; bf16 then only saves memory
//! traffic (half the bytes read per operand).

use half::{bf16, f16};
use rayon::prelude::*;

pub(crate) use super::matmul_half_kernels::GemmElem;
use super::matmul_half_kernels::{Avx2, Avx512, Avx512Bf16, Scalar};
pub(crate) use super::packed_gemm::Mat;
use super::packed_gemm::{gemm, runs_parallel, PAR_FLOPS};
use crate::Result;

/// The micro-kernel family a product runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Avx512Bf16,
    /// f32 multiply-adds on 16 lanes.
    Avx512,
    Avx2,
    Scalar,
}

impl Path {
    pub(crate) const ALL: [Path; 4] = [Path::Avx512Bf16, Path::Avx512, Path::Avx2, Path::Scalar];

    /// Whether this CPU can run the path.
    pub(crate) fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Path::Avx512Bf16 => {
                    super::matmul_half_kernels::HAS_AVX512_KERNELS
                        && is_x86_feature_detected!("avx512f")
                        && is_x86_feature_detected!("avx512bf16")
                }
                Path::Avx512 => super::matmul_half_kernels::HAS_AVX512_KERNELS && is_x86_feature_detected!("avx512f"),
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

/// What the GEMM needs of its input type beyond `GemmElem`: the bf16-pair kernel exists for bf16 only.
pub(crate) trait GemmInput: GemmElem {
    /// `acc = a @ b` through `gemm` with the AVX512-BF16 kernel; false when there is none for
    /// this type.
    fn gemm_pairs(a: Mat<Self>, b: Mat<Self>, dims: (usize, usize, usize), acc: &mut [f32], par: bool) -> bool;
}

impl GemmInput for bf16 {
    fn gemm_pairs(a: Mat<bf16>, b: Mat<bf16>, dims: (usize, usize, usize), acc: &mut [f32], par: bool) -> bool {
        gemm::<bf16, Avx512Bf16>(a, b, dims, acc, par, false);
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
    let mut acc = super::parallel::output_vec::<f32>(m * n)?;
    product_f32(path, a, b, dims, &mut acc);
    // Round once, nearest-even, NaN kept.
    E::narrow_slice(&acc, out);
    Ok(())
}

/// `acc = a @ b` in f32 for one `m x n` output (row-major), with `path`'s kernels or the
/// next ones this CPU has (see [`matmul`]).
pub(crate) fn product_f32<E: GemmInput>(
    path: Path,
    a: Mat<E>,
    b: Mat<E>,
    dims: (usize, usize, usize),
    acc: &mut [f32],
) {
    let par = runs_parallel(dims);
    let pairs_done = path == Path::Avx512Bf16 && path.available() && E::gemm_pairs(a, b, dims, acc, par);
    if !pairs_done {
        widened_gemm(path, a, b, dims, acc, (par, false));
    }
}

/// `gemm` with the widening kernel (f32 multiply-adds) of `path`, or of the first path after
/// it this CPU has: AVX-512F, AVX2 + FMA, portable. `(par, add)` as `gemm` takes them.
pub(crate) fn widened_gemm<E: GemmElem>(
    path: Path,
    a: Mat<E>,
    b: Mat<E>,
    dims: (usize, usize, usize),
    acc: &mut [f32],
    (par, add): (bool, bool),
) {
    let wide = Path::ALL.into_iter().skip_while(|&p| p != path).find(|&p| p != Path::Avx512Bf16 && p.available());
    match wide {
        Some(Path::Avx512) => gemm::<E, Avx512>(a, b, dims, acc, par, add),
        Some(Path::Avx2) => gemm::<E, Avx2>(a, b, dims, acc, par, add),
        _ => gemm::<E, Scalar>(a, b, dims, acc, par, add),
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

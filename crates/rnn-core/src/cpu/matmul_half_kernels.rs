//! Register-tile micro-kernels of the packed GEMM (`packed_gemm`, for f32, bf16 and f16):
//! each multiplies one packed `MR x kc` panel of A by one packed `kc x NR` panel of B into
//! an f32 tile.
//!
//! Packed layout (written by `packed_gemm::pack_a` / `pack_b`): k runs in groups of `KG`
//! consecutive values; A panel element `(i, k)` sits at `((k / KG) * MR + i) * KG + k % KG`,
//! B panel element `(k, j)` at `((k / KG) * NR + j) * KG + k % KG`. The f32 kernels use
//! `KG = 1`; the AVX512-BF16 kernel keeps bf16 and pairs two k values per 32-bit lane, the
//! operand shape of `vdpbf16ps`.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use super::packed_gemm::Mat;
use super::simd::map_slice;

/// An input type of the packed GEMM: f32, or a 16-bit float widened to f32 while packing.
pub(crate) trait GemmElem: Copy + Default + Send + Sync + bytemuck::Zeroable + 'static {
    /// Widens `src` into `dst` (F16C for f16 where the CPU has it, through the `half` crate).
    fn widen(src: &[Self], dst: &mut [f32]);
    /// Rounds each value to nearest even, NaN kept (F16C for f16 where the CPU has it).
    fn narrow_slice(src: &[f32], dst: &mut [Self]);
}

impl GemmElem for bf16 {
    fn widen(src: &[bf16], dst: &mut [f32]) {
        map_slice(src, dst, &crate::num::bf16_to_f32);
    }
    fn narrow_slice(src: &[f32], dst: &mut [bf16]) {
        map_slice(src, dst, &crate::num::f32_to_bf16);
    }
}

impl GemmElem for f32 {
    // Inlined, so that a copy of a constant number of values (a packed row of NR) becomes a
    // few register moves instead of a `memmove` call.
    #[inline(always)]
    fn widen(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
    fn narrow_slice(src: &[f32], dst: &mut [f32]) {
        dst.copy_from_slice(src);
    }
}

impl GemmElem for f16 {
    fn widen(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow_slice(src: &[f32], dst: &mut [f16]) {
        dst.convert_from_f32_slice(src);
    }
}

/// One micro-kernel for inputs of type `E`: its tile shape, packed element and the
/// instruction set it needs.
pub(super) trait MicroKernel<E: GemmElem>: Sync + Sized {
    /// Element of the packed panels.
    type P: bytemuck::Pod + Default + Send + Sync;
    const MR: usize;
    const NR: usize;
    /// k values packed side by side per row / column (1, or 2 for dot-product pairs).
    const KG: usize;
    /// Converts a run of input values for packing.
    fn convert(src: &[E], dst: &mut [Self::P]);
    /// Writes `tile[i * NR + j] = sum_k a(i, k) * b(k, j)` over `kq` groups of k.
    ///
    /// # Safety
    /// `a` holds `kq * MR * KG`, `b` `kq * NR * KG` packed values, `tile` `MR * NR`, and
    /// the CPU has the kernel's instruction set (see `Path::available`).
    unsafe fn tile(kq: usize, a: &[Self::P], b: &[Self::P], tile: &mut [f32]);

    /// Packs rows `i0..i0 + mr`, depth `k0..k0 + kc` of A into `MR`-row panels (`out`),
    /// zero-padded. By default element by element; a kernel may copy runs directly.
    fn pack_a(out: &mut [Self::P], a: Mat<E>, rows: (usize, usize), depth: (usize, usize)) {
        super::packed_gemm::pack_a::<E, Self>(out, a, rows, depth)
    }

    /// Packs depth `k0..k0 + kc`, columns `j0..j0 + cols` (`cols <= NR`) of B into one
    /// panel `dst`, zero-padded. By default element by element.
    fn pack_b_panel(dst: &mut [Self::P], b: Mat<E>, depth: (usize, usize), cols: (usize, usize)) {
        super::packed_gemm::pack_b_panel::<E, Self>(dst, b, depth, cols)
    }

    /// A whole tile straight into `c` (row stride `ldc`): `c = a b`, or `c += a b` when
    /// `add`. By default through `tile`; a kernel may write its registers directly.
    ///
    /// # Safety
    /// As `tile`, and `c` addresses `MR` rows of `NR` writable values at stride `ldc`.
    unsafe fn tile_into(kq: usize, a: &[Self::P], b: &[Self::P], c: *mut f32, ldc: usize, add: bool) {
        let mut t = [0f32; 256];
        debug_assert!(Self::MR * Self::NR <= t.len());
        // SAFETY: the caller's guarantee; `t` holds MR x NR.
        unsafe { Self::tile(kq, a, b, &mut t) };
        for (i, row) in t.chunks_exact(Self::NR).take(Self::MR).enumerate() {
            // SAFETY: row i of the tile lies within the caller's `MR x NR` at stride `ldc`.
            let dst = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), Self::NR) };
            if add {
                dst.iter_mut().zip(row).for_each(|(d, t)| *d += t);
            } else {
                dst.copy_from_slice(row);
            }
        }
    }
}

/// Portable kernel: f32 panels, plain loops (the compiler vectorizes them for SSE2).
pub(super) struct Scalar;

impl<E: GemmElem> MicroKernel<E> for Scalar {
    type P = f32;
    const MR: usize = 6;
    const NR: usize = 16;
    const KG: usize = 1;

    #[inline(always)]
    fn convert(src: &[E], dst: &mut [f32]) {
        E::widen(src, dst)
    }

    unsafe fn tile(kq: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
        let mut acc = [[0f32; 16]; 6];
        for (ak, bk) in a.chunks_exact(6).zip(b.chunks_exact(16)).take(kq) {
            for (row, &x) in acc.iter_mut().zip(ak) {
                for (c, &y) in row.iter_mut().zip(bk) {
                    *c += x * y;
                }
            }
        }
        for (dst, row) in tile.chunks_exact_mut(16).zip(&acc) {
            dst.copy_from_slice(row);
        }
    }
}

/// AVX2 + FMA: f32 panels (bf16 widened while packing), a 6 x 16 tile in 12 registers.
pub(super) struct Avx2;

impl<E: GemmElem> MicroKernel<E> for Avx2 {
    type P = f32;
    const MR: usize = 6;
    const NR: usize = 16;
    const KG: usize = 1;

    #[inline(always)]
    fn convert(src: &[E], dst: &mut [f32]) {
        E::widen(src, dst)
    }

    unsafe fn tile(kq: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller guarantees the lengths and that the CPU has AVX2 and FMA.
        unsafe {
            avx2_tile(kq, a.as_ptr(), b.as_ptr(), tile.as_mut_ptr())
        };
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: the same contract; `Path::available` never offers AVX2 here.
        unsafe {
            <Scalar as MicroKernel<E>>::tile(kq, a, b, tile)
        };
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_into(kq: usize, a: &[f32], b: &[f32], c: *mut f32, ldc: usize, add: bool) {
        // SAFETY: the caller guarantees the lengths, `c`'s 6 x 16 values and AVX2 + FMA.
        unsafe { avx2_tile_into(kq, a.as_ptr(), b.as_ptr(), c, ldc, add) };
    }
}

/// The 6 x 16 tile's registers after `kq` steps (k unrolled by two: one loop branch per
/// 24 FMAs).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn avx2_acc(kq: usize, a: *const f32, b: *const f32) -> [[std::arch::x86_64::__m256; 2]; 6] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; 6];
    // A macro, not a closure: the body must be compiled with this function's AVX2 + FMA.
    macro_rules! step {
        ($q:expr) => {{
            let q = $q;
            // SAFETY: q < kq, so every read stays inside the panels the caller vouched for.
            unsafe {
                let (b0, b1) = (_mm256_loadu_ps(b.add(q * 16)), _mm256_loadu_ps(b.add(q * 16 + 8)));
                for (i, row) in acc.iter_mut().enumerate() {
                    let x = _mm256_broadcast_ss(&*a.add(q * 6 + i));
                    row[0] = _mm256_fmadd_ps(x, b0, row[0]);
                    row[1] = _mm256_fmadd_ps(x, b1, row[1]);
                }
            }
        }};
    }
    let mut q = 0;
    while q + 2 <= kq {
        step!(q);
        step!(q + 1);
        q += 2;
    }
    if q < kq {
        step!(q);
    }
    acc
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tile_into(kq: usize, a: *const f32, b: *const f32, c: *mut f32, ldc: usize, add: bool) {
    use std::arch::x86_64::*;
    // The tile's output rows are read (or written) after the loop: fetch them meanwhile.
    for i in 0..6 {
        _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add(i * ldc) as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add(i * ldc + 15) as *const i8);
    }
    // SAFETY: the caller's guarantee on the panels.
    let acc = unsafe { avx2_acc(kq, a, b) };
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: `c` addresses 6 rows of 16 values at stride `ldc`.
        unsafe {
            let (p0, p1) = (c.add(i * ldc), c.add(i * ldc + 8));
            let (mut v0, mut v1) = (row[0], row[1]);
            if add {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(p0));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(p1));
            }
            _mm256_storeu_ps(p0, v0);
            _mm256_storeu_ps(p1, v1);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tile(kq: usize, a: *const f32, b: *const f32, tile: *mut f32) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's guarantee on the panels.
    let acc = unsafe { avx2_acc(kq, a, b) };
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: the tile holds 6 x 16 f32.
        unsafe {
            _mm256_storeu_ps(tile.add(i * 16), row[0]);
            _mm256_storeu_ps(tile.add(i * 16 + 8), row[1]);
        }
    }
}

/// AVX-512F: f32 panels (16-bit inputs widened while packing), an 8 x 32 tile in 16
/// registers: twice the lanes of the AVX2 kernel.
pub(super) struct Avx512;

impl<E: GemmElem> MicroKernel<E> for Avx512 {
    type P = f32;
    const MR: usize = 8;
    const NR: usize = 32;
    const KG: usize = 1;

    #[inline(always)]
    fn convert(src: &[E], dst: &mut [f32]) {
        E::widen(src, dst)
    }

    unsafe fn tile(kq: usize, a: &[f32], b: &[f32], tile: &mut [f32]) {
        // SAFETY: the caller guarantees the lengths and that the CPU has AVX-512F.
        unsafe { avx512_tile_into(kq, a.as_ptr(), b.as_ptr(), (tile.as_mut_ptr(), 32), false) };
    }

    unsafe fn tile_into(kq: usize, a: &[f32], b: &[f32], c: *mut f32, ldc: usize, add: bool) {
        // SAFETY: the caller guarantees the lengths, `c`'s 8 x 32 values and AVX-512F.
        unsafe { avx512_tile_into(kq, a.as_ptr(), b.as_ptr(), (c, ldc), add) };
    }
}

/// AVX512-BF16: bf16 panels, `vdpbf16ps` multiplies two k values per lane and adds both
/// products into f32 accumulators; an 8 x 32 tile in 16 registers.
pub(super) struct Avx512Bf16;

impl MicroKernel<bf16> for Avx512Bf16 {
    type P = bf16;
    const MR: usize = 8;
    const NR: usize = 32;
    const KG: usize = 2;

    fn convert(src: &[bf16], dst: &mut [bf16]) {
        dst.copy_from_slice(src)
    }

    fn pack_a(out: &mut [bf16], a: Mat<bf16>, rows: (usize, usize), depth: (usize, usize)) {
        if !super::pack_pairs::a_panels(out, a, Self::MR, rows, depth) {
            super::packed_gemm::pack_a::<bf16, Self>(out, a, rows, depth)
        }
    }

    fn pack_b_panel(dst: &mut [bf16], b: Mat<bf16>, depth: (usize, usize), cols: (usize, usize)) {
        if !super::pack_pairs::b_panel(dst, b, Self::NR, depth, cols) {
            super::packed_gemm::pack_b_panel::<bf16, Self>(dst, b, depth, cols)
        }
    }

    unsafe fn tile(kq: usize, a: &[bf16], b: &[bf16], tile: &mut [f32]) {
        // SAFETY: the caller guarantees the lengths and that the CPU has AVX512-BF16.
        unsafe { avx512bf16_tile_into(kq, a.as_ptr(), b.as_ptr(), (tile.as_mut_ptr(), 32), false) };
    }

    unsafe fn tile_into(kq: usize, a: &[bf16], b: &[bf16], c: *mut f32, ldc: usize, add: bool) {
        // SAFETY: the caller guarantees the lengths, `c`'s 8 x 32 values and AVX512-BF16.
        unsafe { avx512bf16_tile_into(kq, a.as_ptr(), b.as_ptr(), (c, ldc), add) };
    }
}

/// Whether this build has the AVX-512 kernels (f32 and BF16): on x86-64, built by rustc
/// 1.89 or later (the first with the AVX-512 intrinsics; older compilers get the AVX2 path).
#[rustversion::since(1.89)]
pub(super) const HAS_AVX512_KERNELS: bool = cfg!(target_arch = "x86_64");
#[rustversion::before(1.89)]
pub(super) const HAS_AVX512_KERNELS: bool = false;

#[rustversion::before(1.89)]
unsafe fn avx512_tile_into(_: usize, _: *const f32, _: *const f32, _: (*mut f32, usize), _: bool) {
    unreachable!("Path::available offers AVX-512 only when HAS_AVX512_KERNELS");
}

#[cfg(not(target_arch = "x86_64"))]
#[rustversion::since(1.89)]
unsafe fn avx512_tile_into(_: usize, _: *const f32, _: *const f32, _: (*mut f32, usize), _: bool) {
    unreachable!("Path::available offers AVX-512 only when HAS_AVX512_KERNELS");
}

/// Writes the 8 x 32 tile `acc` to `c` (8 rows at stride `ldc`), or adds it when `add`.
///
/// SAFETY: AVX-512F present; `c` addresses 8 rows of 32 writable values at stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see HAS_AVX512_KERNELS
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn avx512_store(acc: &[[std::arch::x86_64::__m512; 2]; 8], (c, ldc): (*mut f32, usize), add: bool) {
    use std::arch::x86_64::{_mm512_add_ps, _mm512_loadu_ps, _mm512_storeu_ps};
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: the caller's guarantee: row i of `c` holds 32 values.
        unsafe {
            let (p0, p1) = (c.add(i * ldc), c.add(i * ldc + 16));
            let (mut v0, mut v1) = (row[0], row[1]);
            if add {
                v0 = _mm512_add_ps(v0, _mm512_loadu_ps(p0));
                v1 = _mm512_add_ps(v1, _mm512_loadu_ps(p1));
            }
            _mm512_storeu_ps(p0, v0);
            _mm512_storeu_ps(p1, v1);
        }
    }
}

/// The 8 x 32 f32 tile `a b` written to (or, when `add`, added to) `c`, 8 rows at stride
/// `ldc`.
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see HAS_AVX512_KERNELS
#[target_feature(enable = "avx512f")]
unsafe fn avx512_tile_into(kq: usize, a: *const f32, b: *const f32, (c, ldc): (*mut f32, usize), add: bool) {
    use std::arch::x86_64::{_mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps};
    let mut acc = [[_mm512_setzero_ps(); 2]; 8];
    for q in 0..kq {
        // SAFETY: q < kq: depth step q of the B panel is 32 floats, of the A panel 8.
        unsafe {
            let (b0, b1) = (_mm512_loadu_ps(b.add(q * 32)), _mm512_loadu_ps(b.add(q * 32 + 16)));
            for (i, row) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*a.add(q * 8 + i));
                row[0] = _mm512_fmadd_ps(x, b0, row[0]);
                row[1] = _mm512_fmadd_ps(x, b1, row[1]);
            }
        }
    }
    // SAFETY: the caller's guarantee on `c`.
    unsafe { avx512_store(&acc, (c, ldc), add) };
}

#[rustversion::before(1.89)]
unsafe fn avx512bf16_tile_into(_: usize, _: *const bf16, _: *const bf16, _: (*mut f32, usize), _: bool) {
    unreachable!("Path::available offers AVX512-BF16 only when HAS_AVX512_KERNELS");
}

#[cfg(not(target_arch = "x86_64"))]
#[rustversion::since(1.89)]
unsafe fn avx512bf16_tile_into(_: usize, _: *const bf16, _: *const bf16, _: (*mut f32, usize), _: bool) {
    unreachable!("Path::available offers AVX512-BF16 only when HAS_AVX512_KERNELS");
}

/// The 8 x 32 tile `a b` written to (or, when `add`, added to) `c`, 8 rows at stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see HAS_AVX512_KERNELS
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn avx512bf16_tile_into(kq: usize, a: *const bf16, b: *const bf16, (c, ldc): (*mut f32, usize), add: bool) {
    use std::arch::x86_64::{__m512, __m512bh, __m512i, _mm512_dpbf16_ps, _mm512_loadu_ps};
    use std::arch::x86_64::{_mm512_set1_epi32, _mm512_setzero_ps};
    let mut acc = [[_mm512_setzero_ps(); 2]; 8];
    for q in 0..kq {
        // SAFETY: q < kq: group q of the B panel is 64 bf16 (32 columns x 2 k), of the A
        // panel 16 bf16 (8 rows x 2 k); a 512-bit register is 32 bf16, the layout of the
        // `__m512bh` operands (pairs of k side by side in each 32-bit lane).
        unsafe {
            let load = |p: *const bf16| std::mem::transmute::<__m512, __m512bh>(_mm512_loadu_ps(p as *const f32));
            let (b0, b1) = (load(b.add(q * 64)), load(b.add(q * 64 + 32)));
            for (i, row) in acc.iter_mut().enumerate() {
                let pair = (a.add((q * 8 + i) * 2) as *const i32).read_unaligned();
                let x = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(pair));
                row[0] = _mm512_dpbf16_ps(row[0], x, b0);
                row[1] = _mm512_dpbf16_ps(row[1], x, b1);
            }
        }
    }
    // SAFETY: the caller's guarantee on `c`.
    unsafe { avx512_store(&acc, (c, ldc), add) };
}

//! Transposes of 32-bit words (f32 tiles, bf16 pairs) in `8 x 8` blocks of AVX2 register
//! shuffles: the attention kernel's `Qᵀ` / `Kᵀ` / `Vᵀ` tiles and the bf16 GEMM's packed panels.
//! Shuffles move bits, so any word (NaN payloads included) comes out as it went in.

/// `dst[x * ld + j] = src[j * rs + x]` for `j < rows`, `x < width`: the transpose of a
/// `rows x width` tile (row stride `rs`) into a `width x rows` one (row stride `ld`).
/// Plain loops where the CPU lacks AVX2.
///
/// Panics if a slice is too short for its tile.
pub(crate) fn words(src: &[u32], rs: usize, (rows, width): (usize, usize), dst: &mut [u32], ld: usize) {
    if rows == 0 || width == 0 {
        return;
    }
    assert!((rows - 1) * rs + width <= src.len() && (width - 1) * ld + rows <= dst.len(), "transpose out of bounds");
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked); both tiles lie inside their slices (asserted).
        unsafe { avx2::transpose(src.as_ptr(), rs, (rows, width), dst.as_mut_ptr(), ld) };
        return;
    }
    for j in 0..rows {
        for x in 0..width {
            dst[x * ld + j] = src[j * rs + x];
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// See [`super::words`]. SAFETY: AVX2 present; `src` covers `rows` rows of `width` at
    /// stride `rs`, `dst` `width` rows of `rows` at stride `ld`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose(
        src: *const u32,
        rs: usize,
        (rows, width): (usize, usize),
        dst: *mut u32,
        ld: usize,
    ) {
        let (rows8, width8) = (rows / 8 * 8, width / 8 * 8);
        for j in (0..rows8).step_by(8) {
            for x in (0..width8).step_by(8) {
                // SAFETY: the 8 x 8 block at (j, x) lies inside both tiles.
                unsafe { block8(src.add(j * rs + x), rs, dst.add(x * ld + j), ld) };
            }
        }
        // The edges: the columns past the last whole block, then the rows past it.
        let scalar = |js: std::ops::Range<usize>, xs: std::ops::Range<usize>| {
            for j in js {
                for x in xs.clone() {
                    // SAFETY: (j, x) lies inside both tiles.
                    unsafe { *dst.add(x * ld + j) = *src.add(j * rs + x) };
                }
            }
        };
        scalar(0..rows8, width8..width);
        scalar(rows8..rows, 0..width);
    }

    /// One `8 x 8` block: eight rows in, eight columns out as rows.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn block8(src: *const u32, rs: usize, dst: *mut u32, ld: usize) {
        // SAFETY: 8 rows of 8 words at `src` (stride rs) and at `dst` (stride ld).
        unsafe {
            let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * rs) as *const f32));
            // Interleave pairs of rows, then pairs of pairs, then swap 128-bit halves.
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            let out = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            for (i, o) in out.into_iter().enumerate() {
                _mm256_storeu_ps(dst.add(i * ld) as *mut f32, o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::words;

    /// The transpose against the definition, on tiles with whole and partial 8 x 8 blocks,
    /// of words that are NaN, infinite or subnormal as f32: every bit pattern comes through.
    #[test]
    fn transpose_matches_definition() {
        for (rows, width, rs, ld) in [(8, 8, 8, 8), (64, 32, 96, 64), (13, 21, 37, 16), (3, 5, 5, 3), (17, 9, 9, 32)] {
            let word = |i: usize| (i as u32).wrapping_mul(0x9E37_79B9) | if i % 3 == 0 { 0x7F80_0001 } else { 0 };
            let src: Vec<u32> = (0..(rows - 1) * rs + width).map(word).collect();
            let mut dst = vec![u32::MAX; (width - 1) * ld + rows];
            words(&src, rs, (rows, width), &mut dst, ld);
            for j in 0..rows {
                for x in 0..width {
                    assert_eq!(dst[x * ld + j], src[j * rs + x], "{rows}x{width}: ({j}, {x})");
                }
            }
        }
    }
}

//! Packing for the AVX512-BF16 kernel, whose panels hold k in pairs: A panel element
//! `(i, k)` at `((k / 2) * MR + i) * 2 + k % 2`, B panel element `(k, j)` at
//! `((k / 2) * NR + j) * 2 + k % 2` (see `matmul_half_kernels`). A pair is one 32-bit
//! word, so for row- and column-major operands (every layout a training step makes) a panel
//! is a transpose of words (`transpose::words`; a pair at a time where the words are not
//! 4-byte aligned) or two contiguous runs interleaved; other strides return false for the
//! element-wise packers. Both zero-fill what the operand does not cover (rows or columns
//! past its edge, the second half of an odd depth's last pair).

use half::bf16;

use super::packed_gemm::Mat;

const ZERO: bf16 = bf16::ZERO;

/// Packs rows `i0..i0 + mr`, depth `k0..k0 + kc` of `a` into `out`, panels of `panel_rows`
/// rows. False (nothing written) when `a` is neither row- nor column-major.
pub(super) fn a_panels(
    out: &mut [bf16],
    a: Mat<bf16>,
    panel_rows: usize,
    (i0, mr): (usize, usize),
    (k0, kc): (usize, usize),
) -> bool {
    let kq = kc.div_ceil(2);
    let panel = kq * panel_rows * 2;
    let out = &mut out[..mr.div_ceil(panel_rows) * panel];
    if mr % panel_rows != 0 || kc % 2 != 0 {
        out.fill(ZERO);
    }
    if a.cs == 1 {
        // Row-major: each panel is the transpose of its rows' depth runs, in pairs.
        for (p, dst) in out.chunks_exact_mut(panel).enumerate() {
            let rows = panel_rows.min(mr - p * panel_rows);
            transpose_pairs(a.data, ((i0 + p * panel_rows) * a.rs + k0, a.rs), (rows, kc), dst, panel_rows);
        }
        return true;
    }
    if a.rs == 1 {
        // Column-major: depths k and k + 1 are two contiguous runs over the rows.
        for q in 0..kq {
            let (lo, hi) = column_pair(a.data, (k0 + 2 * q, kc - 2 * q), a.cs, (i0, mr));
            for (p, dst) in out.chunks_exact_mut(panel).enumerate() {
                let rows = p * panel_rows..(p * panel_rows + panel_rows).min(mr);
                let hi = hi.map(|h| &h[rows.clone()]);
                interleave(&lo[rows], hi, &mut dst[q * panel_rows * 2..]);
            }
        }
        return true;
    }
    false
}

/// Packs depth `k0..k0 + kc`, columns `j0..j0 + cols` of `b` into the panel `dst`, `panel_cols`
/// columns wide. False (nothing written) when `b` is neither row- nor column-major.
pub(super) fn b_panel(
    dst: &mut [bf16],
    b: Mat<bf16>,
    panel_cols: usize,
    (k0, kc): (usize, usize),
    (j0, cols): (usize, usize),
) -> bool {
    if b.rs != 1 && b.cs != 1 {
        return false;
    }
    let dst = &mut dst[..kc.div_ceil(2) * panel_cols * 2];
    if cols < panel_cols || kc % 2 != 0 {
        dst.fill(ZERO);
    }
    if b.cs == 1 {
        // Row-major: depths k and k + 1 are two contiguous runs over the columns.
        for (q, group) in dst.chunks_exact_mut(panel_cols * 2).enumerate() {
            let (lo, hi) = column_pair(b.data, (k0 + 2 * q, kc - 2 * q), b.rs, (j0, cols));
            interleave(lo, hi, group);
        }
    } else {
        // Column-major (`x @ w.t()`): the panel is the transpose of its columns' depth runs.
        transpose_pairs(b.data, (j0 * b.cs + k0, b.cs), (cols, kc), dst, panel_cols);
    }
    true
}

/// The runs `data[k * stride + first..][..len]` for depth `k` and `k + 1`, the second `None`
/// when `left` (the depth still to pack) is 1.
fn column_pair(
    data: &[bf16],
    (k, left): (usize, usize),
    stride: usize,
    (first, len): (usize, usize),
) -> (&[bf16], Option<&[bf16]>) {
    let run = |k: usize| &data[k * stride + first..][..len];
    (run(k), (left > 1).then(|| run(k + 1)))
}

/// `dst[t * 2] = lo[t]`, `dst[t * 2 + 1] = hi[t]` (0 without `hi`).
fn interleave(lo: &[bf16], hi: Option<&[bf16]>, dst: &mut [bf16]) {
    let dst = &mut dst[..lo.len() * 2];
    match hi {
        Some(hi) => {
            for ((pair, &l), &h) in dst.chunks_exact_mut(2).zip(lo).zip(hi) {
                pair[0] = l;
                pair[1] = h;
            }
        }
        None => {
            for (pair, &l) in dst.chunks_exact_mut(2).zip(lo) {
                pair[0] = l;
            }
        }
    }
}

/// `dst[(q * ld + r) * 2 + h] = run_r[2q + h]` for the `rows` runs `run_r` of `len` values
/// at `data[first + r * stride..]`: their pairs as 32-bit words through `transpose::words`
/// where both sides are 4-byte aligned (an even stride and start, as a training step's
/// operands have), else a pair at a time. An odd run's last value goes alone.
fn transpose_pairs(
    data: &[bf16],
    (first, stride): (usize, usize),
    (rows, len): (usize, usize),
    dst: &mut [bf16],
    ld: usize,
) {
    if rows == 0 || len == 0 {
        return;
    }
    let pairs = len / 2;
    let fast = stride % 2 == 0 && pairs > 0 && transpose_words(data, (first, stride), (rows, pairs), dst, ld);
    for r in 0..rows {
        let run = &data[first + r * stride..][..len];
        if !fast {
            scatter_pairs(run, &mut dst[r * 2..], ld * 2);
        } else if len % 2 == 1 {
            dst[(pairs * ld + r) * 2] = run[len - 1];
        }
    }
}

/// The whole pairs of [`transpose_pairs`] as 32-bit words; false (nothing written) where
/// either side is not 4-byte aligned.
fn transpose_words(
    data: &[bf16],
    (first, stride): (usize, usize),
    (rows, pairs): (usize, usize),
    dst: &mut [bf16],
    ld: usize,
) -> bool {
    let src = &data[first..first + (rows - 1) * stride + 2 * pairs];
    let out = &mut dst[..((pairs - 1) * ld + rows) * 2];
    match (bytemuck::try_cast_slice::<bf16, u32>(src), bytemuck::try_cast_slice_mut::<bf16, u32>(out)) {
        (Ok(src), Ok(out)) => {
            super::transpose::words(src, stride / 2, (rows, pairs), out, ld);
            true
        }
        _ => false,
    }
}

/// Pair `q` of `run` (elements `2q`, `2q + 1`) to `dst[q * step..][..2]`; an odd run's last
/// element alone (its partner stays as the caller zeroed it).
fn scatter_pairs(run: &[bf16], dst: &mut [bf16], step: usize) {
    let pairs = run.chunks_exact(2);
    let last = pairs.remainder().first().copied();
    let count = pairs.len();
    for (q, pair) in pairs.enumerate() {
        dst[q * step..q * step + 2].copy_from_slice(pair);
    }
    if let Some(x) = last {
        dst[count * step] = x;
    }
}

//! The forward of an f32 convolution from broadcasts, on AVX-512, for any kernel, stride,
//! padding and dilation with a multiple of 16 output channels per group: the forward twin
//! of `conv_wgrad.rs` (same padded planes, window starts and tap offsets).
//!
//! `out[o, p] = bias[o] + sum over (c, t) of w[o, c, t] * x[c, start(p) + offset(t)]`. With
//! the weight laid out `[group, c, t, o]`, a register holds 16 output channels' weights of
//! one (channel, tap) pair; a register tile of 6 positions x 64 outputs adds them times
//! each position's broadcast input value. Every position computed is a real
//! one (no gap columns), whatever the plane's width: the padded walk of `conv_direct.rs`
//! wastes 20% of an 8x8 plane's positions. The tiles write `[position, out_c]`, which one
//! transpose per image turns into the output's `[out_c, position]`.
//!
//! Each output is the sum of the same products as the unfolded path's (padding zeros
//! included), so inf and NaN propagate as there.

use super::conv::ConvShape;
use super::conv_wgrad::Windows;

/// Output channels per register.
const LANES: usize = 16;
/// Output channels per register tile: 4 registers, so that each (channel, tap) pair's 4
/// weight loads and 6 broadcasts feed 24 FMAs.
const TILE_OUT: usize = 4 * LANES;
/// Output positions per register tile.
const TILE_POSITIONS: usize = 6;

/// One convolution's broadcast forward: its windows and its weight laid out
/// `[groups, in_c / groups, taps, out_c / groups]`.
pub(super) struct BroadcastConv {
    windows: Windows,
    weight: Vec<f32>,
    /// Where each (input channel, tap) pair of a group reads, from the group's first plane.
    pair_at: Vec<usize>,
}

/// One thread's buffers: the padded input and the `[position, out_c]` output of an image.
#[derive(Default)]
pub(super) struct Buffers {
    x: Vec<f32>,
    out: Vec<f32>,
}

impl BroadcastConv {
    /// The layout for `s` and its weight `w` (`[out_c, in_c / groups, kh, kw]`) where this
    /// path applies ([`Windows::new`]) and was measured to pay: a kernel of more than one
    /// tap and 64s of output channels per group (tiles of 4 registers x 6 positions). Per
    /// forward of 128 images on a 2-core Xeon against the previous paths
    /// (bench/results/2026-11-29-conv-rows-2core-intel-r-xeon-r-processor.md): 64 outputs
    /// ran 1.22x (64 -> 64 at 8x8, against the padded walk of `conv_direct.rs`, and 1.24x
    /// as its input gradient) and 1.3x (32 -> 64, 3x3 stride 2, against the unfolded
    /// product) as fast; 16 and 32 outputs (tiles of 1 and 2 registers, whose broadcasts
    /// outnumber their weight loads) ran 0.3-1.0x; a 1x1 kernel 0.6-1.0x. `conv.rs` asks
    /// `conv_direct.rs` first where that walks rows as they are.
    pub(super) fn new(s: &ConvShape, w: Option<&[f32]>) -> Option<Self> {
        if s.window.taps() == 1 || (s.out_c / s.groups.max(1)) % TILE_OUT != 0 {
            return None;
        }
        let windows = Windows::new(s, w.is_some())?;
        let w = w?;
        let (og, cg, taps) = (s.out_c / s.groups, s.in_c / s.groups, s.window.taps());
        let mut weight = Vec::with_capacity(w.len());
        for g in 0..s.groups {
            for k in 0..cg * taps {
                weight.extend((0..og).map(|o| w[(g * og + o) * cg * taps + k]));
            }
        }
        let pair_at = (0..cg * taps).map(|k| windows.pair_at(k)).collect();
        Some(BroadcastConv { windows, weight, pair_at })
    }

    /// `out = conv(xi, w) + bias` for one image (`[out_c, ho * wo]`).
    pub(super) fn convolve(&self, s: &ConvShape, xi: &[f32], bias: Option<&[f32]>, out: &mut [f32], buf: &mut Buffers) {
        let (win, l) = (&self.windows, self.windows.starts.len());
        assert!(xi.len() == s.image_len() && out.len() == s.out_c * l);
        win.pad_input(s, xi, &mut buf.x);
        // Every element is written by the tiles: no need to clear it.
        buf.out.resize(l * s.out_c, 0.0);
        for g in 0..s.groups {
            for o in (0..s.out_c / s.groups).step_by(TILE_OUT) {
                self.add_tiles(s, g, o, bias, buf);
            }
        }
        let (src, dst): (&[u32], &mut [u32]) = (bytemuck::cast_slice(&buf.out), bytemuck::cast_slice_mut(out));
        super::transpose::words(src, s.out_c, (l, s.out_c), dst, l);
    }

    /// Outputs `g * og + o ..` (a tile's 64) of every position of group `g`, in tiles of
    /// positions, into `buf.out`.
    fn add_tiles(&self, s: &ConvShape, g: usize, o: usize, bias: Option<&[f32]>, buf: &mut Buffers) {
        let (og, cg, taps) = (s.out_c / s.groups, s.in_c / s.groups, s.window.taps());
        let first = g * og + o;
        let init: [f32; TILE_OUT] = std::array::from_fn(|i| bias.map_or(0.0, |b| b[first + i]));
        let geo = TileGeometry {
            x: &buf.x[g * cg * self.windows.plane..][..cg * self.windows.plane],
            pair_at: &self.pair_at,
            weight: &self.weight[g * cg * taps * og + o..],
            og,
        };
        let out = &mut buf.out[first..];
        for p0 in (0..self.windows.starts.len()).step_by(TILE_POSITIONS) {
            let starts = &self.windows.starts[p0..];
            let n = TILE_POSITIONS.min(starts.len());
            let dst = &mut out[p0 * s.out_c..];
            // SAFETY: `Windows::new` checked AVX-512 and that every window lies inside its
            // padded plane; the weight rows hold `og` outputs from `o`, with `o + 64 <= og`;
            // `dst` holds `n` rows of `out_c` from output `first`.
            unsafe { tile_kernel(&geo, starts, n, &init, (dst, s.out_c)) };
        }
    }
}

/// What a register tile reads: the group's padded planes `x`, where each (channel, tap)
/// pair reads them, and its weight rows (a row of `og` per pair, from the tile's first
/// output).
struct TileGeometry<'a> {
    x: &'a [f32],
    pair_at: &'a [usize],
    weight: &'a [f32],
    og: usize,
}

/// Outputs of the first `n` of a tile's positions (window starts `starts`) for its 64
/// output channels, starting from `init`, into rows of `ld` of `dst`.
///
/// SAFETY: the CPU must have AVX-512 (F); every element `pair_at[k] + start` of the
/// positions' windows must lie in `x`; `weight` must hold `(pairs - 1) * og + 64`
/// elements (`pairs = pair_at.len()`) and `dst` `(n - 1) * ld + 64`, with `1 <= n <=
/// TILE_POSITIONS`, `n <= starts.len()`.
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see `Windows::new`
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn tile_kernel(
    geo: &TileGeometry,
    starts: &[usize],
    n: usize,
    init: &[f32; TILE_OUT],
    (dst, ld): (&mut [f32], usize),
) {
    use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps};
    const VECS: usize = TILE_OUT / LANES;
    // SAFETY: `init` holds the tile's registers of outputs.
    let first: [__m512; VECS] = std::array::from_fn(|v| unsafe { _mm512_loadu_ps(init.as_ptr().add(v * LANES)) });
    let mut acc: [[__m512; VECS]; TILE_POSITIONS] = [first; TILE_POSITIONS];
    // Unused positions of a tail repeat the last one.
    let at: [usize; TILE_POSITIONS] = std::array::from_fn(|i| starts[i.min(n - 1)]);
    let mut wv: [__m512; VECS] = first;
    for (k, &pair_at) in geo.pair_at.iter().enumerate() {
        let base = geo.x.as_ptr().wrapping_add(pair_at);
        for (v, r) in wv.iter_mut().enumerate() {
            // SAFETY: weight row `k`, by the caller's bound.
            *r = unsafe { _mm512_loadu_ps(geo.weight.as_ptr().add(k * geo.og + v * LANES)) };
        }
        for (row, &start) in acc.iter_mut().zip(&at) {
            // SAFETY: inside the padded planes, by the caller's bound.
            let xb = _mm512_set1_ps(unsafe { *base.add(start) });
            for (a, &w) in row.iter_mut().zip(&wv) {
                *a = _mm512_fmadd_ps(w, xb, *a);
            }
        }
    }
    for (i, row) in acc.iter().enumerate().take(n) {
        for (v, &a) in row.iter().enumerate() {
            // SAFETY: row `i < n` of `dst`, by the caller's bound.
            unsafe { _mm512_storeu_ps(dst.as_mut_ptr().add(i * ld + v * LANES), a) };
        }
    }
}

/// Never called without the AVX-512 kernels (`Windows::new` checks for them).
#[rustversion::attr(since(1.89), cfg(not(target_arch = "x86_64")))]
unsafe fn tile_kernel(_: &TileGeometry, _: &[usize], _: usize, _: &[f32; TILE_OUT], _: (&mut [f32], usize)) {
    unreachable!("the broadcast convolution runs on AVX-512 only")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Window2d;

    fn shape(in_c: usize, out_c: usize, groups: usize, k: usize) -> ConvShape {
        let window = Window2d { kernel: (k, k), stride: (1, 1), padding: (1, 1), dilation: (1, 1) };
        ConvShape { batch: 2, in_c, out_c, groups, hw: (8, 8), out_hw: (11 - k, 11 - k), window }
    }

    /// `tests/conv_pool.rs`'s configs with 64s of output channels run this path on AVX-512
    /// CPUs, so that its comparison with the composition covers it.
    #[test]
    fn which_convolutions_take_broadcasts() {
        let avx512 = super::super::runs_avx512_kernels();
        let weight = vec![0.0; 64 * 32 * 9];
        for taken in [shape(32, 64, 1, 3), shape(8, 128, 2, 3)] {
            assert_eq!(BroadcastConv::new(&taken, Some(&weight)).is_some(), avx512, "{taken:?}");
            assert!(BroadcastConv::new(&taken, None).is_none(), "f64 keeps the product");
        }
        for kept in [shape(32, 32, 1, 3), shape(32, 64, 1, 1), shape(32, 96, 1, 3)] {
            assert!(BroadcastConv::new(&kept, Some(&weight)).is_none(), "{kept:?}");
        }
    }

    /// The weight as `[group, input channel, tap, output]`.
    #[test]
    fn weight_by_pair_then_output() {
        let s = shape(2, 128, 2, 2);
        let w: Vec<f32> = (0..128 * 4).map(|v| v as f32).collect();
        let Some(b) = BroadcastConv::new(&s, Some(&w)) else { return };
        // Group 1, input channel 0, tap 3, output 5 of the group: w[64 + 5][0][3].
        assert_eq!(b.weight[64 * 4 + 3 * 64 + 5], w[(64 + 5) * 4 + 3]);
        assert_eq!(b.pair_at, [0, 1, 10, 11]);
    }
}

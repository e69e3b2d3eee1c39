//! `unfold2d` (im2col) and its adjoint `fold2d`, one `[H, W]` plane at a time. Every kernel
//! offset `(i, j)` maps a window row to one input row, and a run of window columns to input
//! columns `stride` apart: the runs are copied (or added) whole, as contiguous slices when the
//! stride is 1, and only the ends of each run that fall in the padding are filled.

use rayon::prelude::*;

use std::mem::MaybeUninit;

use super::parallel::PAR_WORK;
use super::simd::zip_assign;
use super::unary::contiguous_slice;
use super::CpuStorage;
use crate::error::try_vec;
use crate::num::Elem;
use crate::window::Window2d;
use crate::{Error, Layout, Result, WithDType};

/// Sizes of one plane: input `h x w`, `ho x wo` windows of `window`.
pub(super) struct Plane<'a> {
    pub h: usize,
    pub w: usize,
    pub ho: usize,
    pub wo: usize,
    pub window: &'a Window2d,
}

/// The positions `o` in `0..out_len` whose input index `o * stride + offset - pad` lies in
/// `0..in_len`: one range, since the index grows with `o`.
fn valid_range(out_len: usize, in_len: usize, stride: usize, offset: usize, pad: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(offset).div_ceil(stride);
    let hi = (pad + in_len).saturating_sub(offset).div_ceil(stride).min(out_len);
    (lo.min(hi), hi)
}

impl Plane<'_> {
    /// Calls `f(tap, oh, input_row, lo..hi, first_col)` for each kernel offset `tap = i * kw + j`
    /// and window row `oh` whose input row lies inside the input; window columns `lo..hi` map
    /// to input columns `first_col, first_col + sw, ..` of that row. Rows in the padding are
    /// passed with `input_row = None`; `first_col` is meaningful only when `lo < hi`.
    pub(super) fn for_each_run(&self, mut f: impl FnMut(usize, usize, Option<usize>, (usize, usize), usize)) {
        let Window2d { kernel: k, stride: s, padding: p, dilation: d } = *self.window;
        for i in 0..k.0 {
            let rows = valid_range(self.ho, self.h, s.0, i * d.0, p.0);
            for j in 0..k.1 {
                let cols = valid_range(self.wo, self.w, s.1, j * d.1, p.1);
                // Only computed for a non-empty run: then it is a column inside the input (and
                // cannot overflow, unlike a position past the last window with a huge stride).
                let first_col = if cols.0 < cols.1 { cols.0 * s.1 + j * d.1 - p.1 } else { 0 };
                for oh in 0..self.ho {
                    let row = (rows.0..rows.1).contains(&oh).then(|| oh * s.0 + i * d.0 - p.0);
                    f(i * k.1 + j, oh, row, cols, first_col);
                }
            }
        }
    }

    /// Writes the windows of one input plane (`h * w`) into `dst` (`kh * kw * ho * wo`),
    /// every element of it: each (kernel offset, window row) is one row of `wo`, filled with
    /// `pad` or copied, whole.
    pub(super) fn unfold<T: Copy>(&self, src: &[T], dst: &mut [MaybeUninit<T>], pad: T) {
        if self.is_shift() {
            self.unfold_shifted(src, dst, pad)
        } else {
            self.unfold_rows(src, dst, pad)
        }
    }

    /// `unfold` one window row at a time (any geometry).
    fn unfold_rows<T: Copy>(&self, src: &[T], dst: &mut [MaybeUninit<T>], pad: T) {
        let (w, wo, sw) = (self.w, self.wo, self.window.stride.1);
        let positions = self.ho * wo;
        let fill = |out: &mut [MaybeUninit<T>]| fill_with(out, pad);
        self.for_each_run(|tap, oh, row, (lo, hi), first| {
            let out = &mut dst[tap * positions + oh * wo..][..wo];
            let Some(r) = row.filter(|_| lo < hi) else {
                fill(out);
                return;
            };
            fill(&mut out[..lo]);
            fill(&mut out[hi..]);
            let input = &src[r * w..][..w];
            if sw == 1 {
                for (o, &x) in out[lo..hi].iter_mut().zip(&input[first..first + (hi - lo)]) {
                    o.write(x);
                }
            } else if sw == 2 {
                // Pairs of a fixed width rather than `step_by`: LLVM loads whole vectors and
                // shuffles the even elements out, instead of one scalar load per element.
                let n = hi - lo;
                let input = &input[first..][..2 * n - 1];
                for (o, pair) in out[lo..hi - 1].iter_mut().zip(input.chunks_exact(2)) {
                    o.write(pair[0]);
                }
                out[hi - 1].write(input[2 * n - 2]);
            } else {
                for (o, &x) in out[lo..hi].iter_mut().zip(input[first..].iter().step_by(sw)) {
                    o.write(x);
                }
            }
        });
    }

    /// Whether every kernel offset is a plain shift of the plane: stride 1 both ways and
    /// windows as wide as the input (a "same" convolution, as 3x3 with padding 1). Window
    /// element `(oh, ow)` of offset `(i, j)` then reads input element `oh * w + ow + shift`
    /// with one `shift` per offset, so its valid rows are one contiguous run of the input.
    fn is_shift(&self) -> bool {
        self.window.stride == (1, 1) && self.wo == self.w
    }

    /// Calls `f(tap, rows, cols, shift)` for each kernel offset of a shift plane
    /// ([`Self::is_shift`]): window rows `rows` and columns `cols` read the input, at
    /// `index + shift`; every other window element is padding.
    fn for_each_shift(&self, mut f: impl FnMut(usize, (usize, usize), (usize, usize), isize)) {
        let Window2d { kernel: k, padding: p, dilation: d, .. } = *self.window;
        for i in 0..k.0 {
            let rows = valid_range(self.ho, self.h, 1, i * d.0, p.0);
            for j in 0..k.1 {
                let cols = valid_range(self.wo, self.w, 1, j * d.1, p.1);
                let (down, right) = ((i * d.0) as isize - p.0 as isize, (j * d.1) as isize - p.1 as isize);
                f(i * k.1 + j, rows, cols, down * self.w as isize + right);
            }
        }
    }

    /// `unfold` of a shift plane: per offset, one copy of the run from its first valid
    /// element to its last, then the padding columns of each row and the padding rows.
    fn unfold_shifted<T: Copy>(&self, src: &[T], dst: &mut [MaybeUninit<T>], pad: T) {
        let (wo, positions) = (self.wo, self.ho * self.wo);
        let fill = |out: &mut [MaybeUninit<T>]| fill_with(out, pad);
        self.for_each_shift(|tap, (r0, r1), (lo, hi), shift| {
            let out = &mut dst[tap * positions..][..positions];
            if r0 >= r1 || lo >= hi {
                return fill(out);
            }
            let (start, end) = (r0 * wo + lo, (r1 - 1) * wo + hi);
            // The run's first and last elements are valid input elements (row r0 / r1 - 1,
            // columns lo / hi - 1), so the run lies inside `src`.
            let from = &src[start.wrapping_add_signed(shift)..][..end - start];
            for (o, &x) in out[start..end].iter_mut().zip(from) {
                o.write(x);
            }
            fill(&mut out[..start]);
            fill(&mut out[end..]);
            // Between the rows of the run, the columns outside lo..hi read the neighbouring
            // input row: padding instead.
            for row in r0..r1 - 1 {
                fill(&mut out[row * wo + hi..(row + 1) * wo + lo]);
            }
        });
    }

    /// `fold` for a `src` the caller no longer needs: on shift planes its padding elements
    /// are zeroed, and then each offset's run is added with one contiguous loop.
    pub(super) fn fold_scratch<T: Elem>(&self, src: &mut [T], dst: &mut [T]) {
        if !self.is_shift() {
            return self.fold(src, dst);
        }
        let (wo, positions) = (self.wo, self.ho * self.wo);
        self.for_each_shift(|tap, (r0, r1), (lo, hi), shift| {
            if r0 >= r1 || lo >= hi {
                return;
            }
            let values = &mut src[tap * positions..][..positions];
            for row in r0..r1 - 1 {
                values[row * wo + hi..(row + 1) * wo + lo].fill(T::from_f64(0.0));
            }
            let (start, end) = (r0 * wo + lo, (r1 - 1) * wo + hi);
            let out = &mut dst[start.wrapping_add_signed(shift)..][..end - start];
            // A run of about a plane: the SIMD tier of this CPU pays for its call.
            zip_assign(out, &values[start..end], &|o: T, v: T| o.add(v));
        });
    }

    /// Adds the window elements `src` (`kh * kw * ho * wo`) into the plane `dst` (`h * w`).
    pub(super) fn fold<T: Elem>(&self, src: &[T], dst: &mut [T]) {
        let (w, wo, sw) = (self.w, self.wo, self.window.stride.1);
        let positions = self.ho * wo;
        self.for_each_run(|tap, oh, row, (lo, hi), first| {
            let Some(r) = row.filter(|_| lo < hi) else { return };
            let values = &src[tap * positions + oh * wo..][lo..hi];
            let out = &mut dst[r * w..][..w];
            if sw == 1 {
                for (o, &v) in out[first..first + (hi - lo)].iter_mut().zip(values) {
                    *o = o.add(v);
                }
            } else {
                for (o, &v) in out[first..].iter_mut().step_by(sw).zip(values) {
                    *o = o.add(v);
                }
            }
        });
    }
}

/// Writes `pad` to every element of `out`.
fn fill_with<T: Copy>(out: &mut [MaybeUninit<T>], pad: T) {
    out.iter_mut().for_each(|o| {
        o.write(pad);
    })
}

/// A vector of `planes` planes of `plane_len` elements, plane `i` written by
/// `write(i, plane, scratch)`, which must write every element of it; each task gets a
/// `scratch` from `init`. The output is not zeroed first (that would write it twice).
///
/// Runs on the thread pool from a quarter of `PAR_WORK` elements moved (`work`): the runs
/// copied are short rows, so a window op costs more per element than an add; measured on
/// 2 cores, the unfolds of a small CNN (0.8M-3.6M elements) take half the time in parallel.
pub(super) fn build_planes<T, S>(
    (planes, plane_len): (usize, usize),
    work: usize,
    init: impl Fn() -> S + Sync + Send,
    write: impl Fn(usize, &mut [MaybeUninit<T>], &mut S) + Sync + Send,
) -> Result<Vec<T>>
where
    T: Send,
{
    let n = planes * plane_len;
    let mut out = try_vec::<T>(n)?;
    let spare = &mut out.spare_capacity_mut()[..n];
    if n > 0 && work < PAR_WORK / 4 {
        let mut scratch = init();
        spare.chunks_mut(plane_len).enumerate().for_each(|(i, plane)| write(i, plane, &mut scratch));
    } else if n > 0 {
        spare.par_chunks_mut(plane_len).enumerate().for_each_init(init, |scratch, (i, plane)| write(i, plane, scratch));
    }
    // SAFETY: `try_vec` reserved room for `n` elements; the planes of `chunks_mut` cover
    // elements 0..n, and `write` wrote each element of its plane (`Plane::unfold` writes
    // every row of its output in full; `fold_typed` copies a whole plane). A panic in
    // `write` would skip this line.
    unsafe { out.set_len(n) };
    Ok(out)
}

fn unfold_typed<T: WithDType>(x: &[T], plane: &Plane, planes: usize, pad: f64) -> Result<Vec<T>> {
    let (in_len, out_len) = (plane.h * plane.w, plane.window.taps() * plane.ho * plane.wo);
    let pad = T::from_f64(pad);
    // An empty input plane (H or W is 0, the padding is not) has no valid rows: all padding.
    let write = |i: usize, dst: &mut [MaybeUninit<T>], _: &mut ()| plane.unfold(&x[i * in_len..][..in_len], dst, pad);
    build_planes((planes, out_len), planes * out_len, || (), write)
}

fn fold_typed<T: Elem>(cols: &[T], plane: &Plane, planes: usize) -> Result<Vec<T>> {
    let (in_len, out_len) = (plane.window.taps() * plane.ho * plane.wo, plane.h * plane.w);
    // Sums go to a zeroed scratch plane, in cache, which is then copied out.
    let scratch = || vec![T::from_f64(0.0); out_len];
    let write = |i: usize, dst: &mut [MaybeUninit<T>], sums: &mut Vec<T>| {
        sums.fill(T::from_f64(0.0));
        plane.fold(&cols[i * in_len..][..in_len], sums);
        for (o, &v) in dst.iter_mut().zip(sums.iter()) {
            o.write(v);
        }
    };
    build_planes((planes, out_len), planes * in_len, scratch, write)
}

impl CpuStorage {
    /// `[N, C, H, W]` seen through `l` -> `[N, C, kh * kw, Ho * Wo]`, padding reading `pad`.
    pub fn unfold2d(&self, l: &Layout, window: &Window2d, pad: f64) -> Result<CpuStorage> {
        let &[_, _, h, w] = l.dims() else {
            return Err(Error::invalid("unfold2d", format!("expected a [N, C, H, W] layout, got {l:?}")));
        };
        let (ho, wo) = window.output_size("unfold2d", (h, w))?;
        let plane = Plane { h, w, ho, wo, window };
        let planes = l.dims()[0] * l.dims()[1];
        Ok(cpu_map_same!(self, v => unfold_typed(&contiguous_slice(v, l)?, &plane, planes, pad)?))
    }

    /// `[N, C, kh * kw, Ho * Wo]` seen through `l` -> `[N, C, H, W]`, summing every window
    /// element into the input position it was taken from.
    pub fn fold2d(&self, l: &Layout, (h, w): (usize, usize), window: &Window2d) -> Result<CpuStorage> {
        let (ho, wo) = window.output_size("fold2d", (h, w))?;
        let &[n, c, taps, positions] = l.dims() else {
            return Err(Error::invalid("fold2d", format!("expected a [N, C, kh * kw, L] layout, got {l:?}")));
        };
        if taps != window.taps() || positions != ho * wo {
            return Err(Error::invalid("fold2d", format!("layout {l:?} does not match {window:?} over {h}x{w}")));
        }
        let plane = Plane { h, w, ho, wo, window };
        Ok(cpu_map_same!(self, v => fold_typed(&contiguous_slice(v, l)?, &plane, n * c)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unfolded(plane: &Plane, src: &[f32], shifted: bool) -> Vec<f32> {
        let mut dst = vec![MaybeUninit::new(f32::NAN); plane.window.taps() * plane.ho * plane.wo];
        match shifted {
            true => plane.unfold_shifted(src, &mut dst, -7.0),
            false => plane.unfold_rows(src, &mut dst, -7.0),
        }
        // SAFETY: both paths write every element (checked below: the pad value is not NaN
        // and the inputs are not NaN, so a NaN left over would show).
        dst.into_iter().map(|x| unsafe { x.assume_init() }).collect()
    }

    /// Window element `(tap, oh, ow)` straight from the definition.
    fn element(plane: &Plane, src: &[f32], tap: usize, (oh, ow): (usize, usize), pad: f32) -> f32 {
        let Window2d { kernel, stride, padding, dilation } = *plane.window;
        let (i, j) = (tap / kernel.1, tap % kernel.1);
        let r = (oh * stride.0 + i * dilation.0).checked_sub(padding.0).filter(|&r| r < plane.h);
        let c = (ow * stride.1 + j * dilation.1).checked_sub(padding.1).filter(|&c| c < plane.w);
        match (r, c) {
            (Some(r), Some(c)) => src[r * plane.w + c],
            _ => pad,
        }
    }

    /// Both unfold paths against the definition, over strides 1-3 (the stride-2 copy has a
    /// path of its own), padding, dilation and planes narrower than the kernel.
    #[test]
    fn unfold_matches_definition() {
        for stride in [(1, 1), (2, 2), (1, 2), (3, 3), (2, 1)] {
            for (kernel, padding, dilation) in
                [((3, 3), (1, 1), (1, 1)), ((1, 1), (0, 0), (1, 1)), ((3, 2), (2, 1), (2, 1))]
            {
                for (h, w) in [(1, 1), (4, 5), (8, 8), (9, 7)] {
                    let window = Window2d { kernel, stride, padding, dilation };
                    let Ok((ho, wo)) = window.output_size("test", (h, w)) else { continue };
                    let plane = Plane { h, w, ho, wo, window: &window };
                    let src: Vec<f32> = (0..h * w).map(|i| i as f32 + 1.0).collect();
                    let got = unfolded(&plane, &src, plane.is_shift());
                    let positions = ho * wo;
                    for (k, &g) in got.iter().enumerate() {
                        let (tap, oh, ow) = (k / positions, k % positions / wo, k % wo);
                        let want = element(&plane, &src, tap, (oh, ow), -7.0);
                        assert_eq!(g, want, "{window:?} {h}x{w}: tap {tap} at ({oh}, {ow})");
                    }
                }
            }
        }
    }

    /// The one-run-per-offset paths of shift planes against the row-by-row paths, on planes
    /// with rows and columns in the padding, dilation, more padding than the kernel reaches,
    /// and 1-wide planes.
    #[test]
    fn shift_paths_match_row_paths() {
        let geometries = [
            ((3, 3), (1, 1), (1, 1)),
            ((3, 3), (2, 2), (2, 2)),
            ((5, 5), (2, 2), (1, 1)),
            ((1, 1), (0, 0), (1, 1)),
            ((3, 1), (0, 0), (1, 1)),
            ((1, 3), (3, 1), (1, 1)),
            ((3, 5), (1, 2), (3, 1)),
        ];
        for (kernel, padding, dilation) in geometries {
            for (h, w) in [(1, 1), (2, 3), (5, 4), (8, 8), (7, 9)] {
                let window = Window2d { kernel, stride: (1, 1), padding, dilation };
                let Ok((ho, wo)) = window.output_size("test", (h, w)) else { continue };
                let plane = Plane { h, w, ho, wo, window: &window };
                if !plane.is_shift() {
                    continue;
                }
                let src: Vec<f32> = (0..h * w).map(|i| i as f32 + 1.0).collect();
                let got = unfolded(&plane, &src, true);
                assert!(got.iter().all(|x| !x.is_nan()), "{window:?} {h}x{w}: element not written");
                assert_eq!(got, unfolded(&plane, &src, false), "{window:?} {h}x{w}");
                let cols: Vec<f32> = (0..got.len()).map(|i| (i % 13) as f32 - 6.0).collect();
                let (mut want, mut sums) = (vec![0.5; h * w], vec![0.5; h * w]);
                plane.fold(&cols, &mut want);
                plane.fold_scratch(&mut cols.clone(), &mut sums);
                assert_eq!(sums, want, "fold {window:?} {h}x{w}");
            }
        }
    }
}

//! `unfold2d` (im2col) and its adjoint `fold2d`, one `[H, W]` plane at a time. Every kernel
//! offset `(i, j)` maps a window row to one input row, and a run of window columns to input
//! columns `stride` apart: the runs are copied (or added) whole, as contiguous slices when the
//! stride is 1, and only the ends of each run that fall in the padding are filled.
//!
//! Most planes take a faster path: when the windows tile the input exactly (output width =
//! input width / stride, as a "same" 3x3 or a stride-2 downsampling convolution), the input
//! splits into `stride.0 x stride.1` phase planes (the rows and columns of one remainder
//! each), and every kernel offset reads one phase plane shifted by a fixed amount: one
//! contiguous run per offset instead of one strided gather per window row.

use rayon::prelude::*;

use std::mem::MaybeUninit;

use super::parallel::par_work;
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
    /// `pad` or copied, whole. `phases` is scratch for strided planes (reused across calls).
    pub(super) fn unfold<T: Copy>(&self, src: &[T], dst: &mut [MaybeUninit<T>], pad: T, phases: &mut Vec<T>) {
        if !self.is_shift() {
            return self.unfold_rows(src, dst, pad);
        }
        if self.window.stride == (1, 1) {
            return self.unfold_shifted(src, dst, pad);
        }
        self.split_phases(src, phases, pad);
        self.unfold_shifted(phases, dst, pad)
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

    /// Whether every kernel offset is a plain shift of one phase plane: the input's rows and
    /// columns split evenly by the stride, and the windows are as many per row as a phase
    /// plane is wide (stride 1: as wide as the input, a "same" convolution like 3x3 with
    /// padding 1; stride 2: half as wide, as 3x3 with padding 1 on an even plane). Window
    /// element `(oh, ow)` of offset `(i, j)` then reads element `oh * wo + ow + shift` of one
    /// phase plane, with one `shift` per offset, so its valid rows are one contiguous run of
    /// that phase plane. Only planes whose windows read every phase are split: a 1x1 window
    /// of stride 2 reads a quarter of the input, which the row path gathers for less than
    /// splitting it all.
    fn is_shift(&self) -> bool {
        let Window2d { kernel: k, stride: s, padding: p, dilation: d } = *self.window;
        let reads_every_phase = |k: usize, s: usize, p: usize, d: usize| {
            (0..s).all(|phase| (0..k).any(|i| phase_of(i * d, p, s).0 == phase))
        };
        let tiles = self.h % s.0 == 0 && self.w % s.1 == 0 && self.wo == self.w / s.1;
        tiles && reads_every_phase(k.0, s.0, p.0, d.0) && reads_every_phase(k.1, s.1, p.1, d.1)
    }

    /// Rows and columns of each phase plane of a shift plane.
    fn phase_size(&self) -> (usize, usize) {
        (self.h / self.window.stride.0, self.w / self.window.stride.1)
    }

    /// Calls `f(tap, rows, cols, phase, shift)` for each kernel offset of a shift plane
    /// ([`Self::is_shift`]): window rows `rows` and columns `cols` read phase plane `phase`
    /// (`row_phase * sw + col_phase`; the input itself at stride 1), at `index + shift`;
    /// every other window element is padding.
    fn for_each_shift(&self, mut f: impl FnMut(usize, (usize, usize), (usize, usize), usize, isize)) {
        let Window2d { kernel: k, stride: s, padding: p, dilation: d } = *self.window;
        let (hp, wp) = self.phase_size();
        for i in 0..k.0 {
            let (row_phase, down) = phase_of(i * d.0, p.0, s.0);
            let rows = shifted_range(self.ho, hp, down);
            for j in 0..k.1 {
                let (col_phase, right) = phase_of(j * d.1, p.1, s.1);
                let cols = shifted_range(self.wo, wp, right);
                f(i * k.1 + j, rows, cols, row_phase * s.1 + col_phase, down * wp as isize + right);
            }
        }
    }

    /// Where input row `r` goes in the phase planes: the range of the `sw` planes of its row
    /// phase, one after another, and the offset of its row inside each of them.
    fn phase_row(&self, r: usize) -> (std::ops::Range<usize>, usize) {
        let ((sh, sw), (hp, wp)) = (self.window.stride, self.phase_size());
        let first = r % sh * sw * hp * wp;
        (first..first + sw * hp * wp, r / sh * wp)
    }

    /// Splits the input plane into its phase planes, one after another in `phases`: phase
    /// `(r, c)` holds the input elements `(y * sh + r, x * sw + c)`. Every element of
    /// `phases` is written, so `filler` only sizes it.
    fn split_phases<T: Copy>(&self, src: &[T], phases: &mut Vec<T>, filler: T) {
        let (sw, (hp, wp)) = (self.window.stride.1, self.phase_size());
        phases.resize(self.h * self.w, filler);
        for (r, row) in src.chunks_exact(self.w.max(1)).take(self.h).enumerate() {
            let (block, at) = self.phase_row(r);
            let block = &mut phases[block];
            if sw == 2 {
                let (even, odd) = block.split_at_mut(hp * wp);
                // Pairs of a fixed width: LLVM splits whole vectors with shuffles.
                let pairs = even[at..][..wp].iter_mut().zip(&mut odd[at..][..wp]).zip(row.chunks_exact(2));
                pairs.for_each(|((e, o), pair)| (*e, *o) = (pair[0], pair[1]));
                continue;
            }
            for (c, phase) in block.chunks_exact_mut(hp * wp).enumerate() {
                phase[at..][..wp].iter_mut().zip(row[c..].iter().step_by(sw)).for_each(|(o, &x)| *o = x);
            }
        }
    }

    /// Adds the phase planes `phases` into the input plane `dst` (the adjoint of
    /// [`Self::split_phases`]).
    fn add_phases<T: Elem>(&self, phases: &[T], dst: &mut [T]) {
        let (sw, (hp, wp)) = (self.window.stride.1, self.phase_size());
        for (r, row) in dst.chunks_exact_mut(self.w.max(1)).take(self.h).enumerate() {
            let (block, at) = self.phase_row(r);
            let block = &phases[block];
            if sw == 2 {
                let (even, odd) = block.split_at(hp * wp);
                let pairs = even[at..][..wp].iter().zip(&odd[at..][..wp]).zip(row.chunks_exact_mut(2));
                pairs.for_each(|((&e, &o), pair)| (pair[0], pair[1]) = (pair[0].add(e), pair[1].add(o)));
                continue;
            }
            for (c, phase) in block.chunks_exact(hp * wp).enumerate() {
                row[c..].iter_mut().step_by(sw).zip(&phase[at..][..wp]).for_each(|(o, &v)| *o = o.add(v));
            }
        }
    }

    /// `unfold` of a shift plane, from its phase planes `src` (the input itself at stride
    /// 1): per offset, one copy of the run from its first valid element to its last, then
    /// the padding columns of each row and the padding rows.
    fn unfold_shifted<T: Copy>(&self, src: &[T], dst: &mut [MaybeUninit<T>], pad: T) {
        let (wo, positions, (hp, wp)) = (self.wo, self.ho * self.wo, self.phase_size());
        let fill = |out: &mut [MaybeUninit<T>]| fill_with(out, pad);
        self.for_each_shift(|tap, (r0, r1), (lo, hi), phase, shift| {
            let out = &mut dst[tap * positions..][..positions];
            if r0 >= r1 || lo >= hi {
                return fill(out);
            }
            let (start, end) = (r0 * wo + lo, (r1 - 1) * wo + hi);
            // The run's first and last elements are valid phase plane elements (row r0 /
            // r1 - 1, columns lo / hi - 1; the plane's rows are `wo` long), so the run lies
            // inside the plane.
            let from = &src[phase * hp * wp..][..hp * wp][start.wrapping_add_signed(shift)..][..end - start];
            for (o, &x) in out[start..end].iter_mut().zip(from) {
                o.write(x);
            }
            fill(&mut out[..start]);
            fill(&mut out[end..]);
            // Between the rows of the run, the columns outside lo..hi read the neighbouring
            // input row: padding instead.
            row_gaps(out, (r0, r1), (lo, hi), wo, |gap| fill(gap));
        });
    }

    /// `fold` for a `src` the caller no longer needs: on shift planes its padding elements
    /// are zeroed, and then each offset's run is added with one contiguous loop (into the
    /// phase planes, in `phases`, for a strided plane; they are added to `dst` at the end).
    pub(super) fn fold_scratch<T: Elem>(&self, src: &mut [T], dst: &mut [T], phases: &mut Vec<T>) {
        if !self.is_shift() {
            return self.fold(src, dst);
        }
        if self.window.stride == (1, 1) {
            return self.add_shifted(src, dst);
        }
        phases.clear();
        phases.resize(self.h * self.w, T::from_f64(0.0));
        self.add_shifted(src, phases);
        self.add_phases(phases, dst);
    }

    /// The adjoint of [`Self::unfold_shifted`]: adds the window elements `src` into the
    /// phase planes `dst`, zeroing `src`'s padding elements first.
    fn add_shifted<T: Elem>(&self, src: &mut [T], dst: &mut [T]) {
        let (wo, positions, (hp, wp)) = (self.wo, self.ho * self.wo, self.phase_size());
        self.for_each_shift(|tap, (r0, r1), (lo, hi), phase, shift| {
            if r0 >= r1 || lo >= hi {
                return;
            }
            let values = &mut src[tap * positions..][..positions];
            row_gaps(values, (r0, r1), (lo, hi), wo, |gap| gap.fill(T::from_f64(0.0)));
            let (start, end) = (r0 * wo + lo, (r1 - 1) * wo + hi);
            let out = &mut dst[phase * hp * wp..][..hp * wp][start.wrapping_add_signed(shift)..][..end - start];
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

/// Calls `f` on the gap between each pair of consecutive rows of `r0..r1` of a shift run in
/// `out` (rows of `wo`): columns `hi..wo` of one row and `0..lo` of the next, which read the
/// neighbouring input row and so are padding. One chunk per row rather than an index
/// computation per row: the gaps are only one or two elements long in a 3x3 convolution.
fn row_gaps<E>(out: &mut [E], (r0, r1): (usize, usize), (lo, hi): (usize, usize), wo: usize, f: impl Fn(&mut [E])) {
    let gap = wo - (hi - lo);
    if gap == 0 || r1 - r0 < 2 {
        return;
    }
    let rows = out[r0 * wo + hi..(r1 - 1) * wo + hi].chunks_exact_mut(wo);
    if gap == 1 {
        rows.for_each(|row| f(&mut row[..1]));
    } else {
        rows.for_each(|row| f(&mut row[..gap]));
    }
}

/// Writes `pad` to every element of `out`.
fn fill_with<T: Copy>(out: &mut [MaybeUninit<T>], pad: T) {
    out.iter_mut().for_each(|o| {
        o.write(pad);
    })
}

/// The phase (`offset - pad` modulo `stride`) and the shift in phase-plane rows (the same
/// divided by `stride`, rounded down) of a kernel offset `offset` along one axis.
fn phase_of(offset: usize, pad: usize, stride: usize) -> (usize, isize) {
    let (offset, stride) = (offset as isize - pad as isize, stride as isize);
    (offset.rem_euclid(stride) as usize, offset.div_euclid(stride))
}

/// The positions `o` in `0..out_len` whose `o + shift` lies in `0..in_len`.
fn shifted_range(out_len: usize, in_len: usize, shift: isize) -> (usize, usize) {
    let lo = shift.min(0).unsigned_abs();
    let hi = (in_len as isize - shift).clamp(0, out_len as isize) as usize;
    (lo.min(hi), hi)
}

/// A vector of `planes` planes of `plane_len` elements, plane `i` written by
/// `write(i, plane, scratch)`, which must write every element of it; each task gets a
/// `scratch` from `init`. The output is not zeroed first (that would write it twice).
///
/// Runs on the thread pool from a quarter of `par_work()` elements moved (`work`): the runs
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
    if n > 0 && work < par_work() / 4 {
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
    let write = |i: usize, dst: &mut [MaybeUninit<T>], phases: &mut Vec<T>| {
        plane.unfold(&x[i * in_len..][..in_len], dst, pad, phases)
    };
    build_planes((planes, out_len), planes * out_len, Vec::new, write)
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
        // Scratch left dirty, as by an earlier plane.
        let mut phases = vec![f32::NAN; 5];
        match shifted {
            true => plane.unfold(src, &mut dst, -7.0, &mut phases),
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

    /// The one-run-per-offset paths of shift planes against the row-by-row paths, at strides
    /// 1-3 (phase planes), on planes with rows and columns in the padding, dilation, more
    /// padding than the kernel reaches, and 1-wide planes.
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
            ((2, 2), (0, 0), (1, 1)),
        ];
        let planes = [(1, 1), (2, 3), (5, 4), (8, 8), (7, 9), (6, 6), (4, 8), (9, 6), (6, 12), (2, 2)];
        let strides = [(1, 1), (2, 2), (1, 2), (2, 1), (3, 3), (3, 2)];
        let mut strided = 0;
        let mut phases = vec![f32::NAN; 3];
        for ((kernel, padding, dilation), (h, w), stride) in combinations(&geometries, &planes, &strides) {
            let window = Window2d { kernel, stride, padding, dilation };
            let Ok((ho, wo)) = window.output_size("test", (h, w)) else { continue };
            let plane = Plane { h, w, ho, wo, window: &window };
            if !plane.is_shift() {
                continue;
            }
            strided += usize::from(stride != (1, 1));
            let src: Vec<f32> = (0..h * w).map(|i| i as f32 + 1.0).collect();
            let got = unfolded(&plane, &src, true);
            assert!(got.iter().all(|x| !x.is_nan()), "{window:?} {h}x{w}: element not written");
            assert_eq!(got, unfolded(&plane, &src, false), "{window:?} {h}x{w}");
            let cols: Vec<f32> = (0..got.len()).map(|i| (i % 13) as f32 - 6.0).collect();
            let (mut want, mut sums) = (vec![0.5; h * w], vec![0.5; h * w]);
            plane.fold(&cols, &mut want);
            phases.iter_mut().for_each(|p| *p = f32::NAN);
            plane.fold_scratch(&mut cols.clone(), &mut sums, &mut phases);
            assert_eq!(sums, want, "fold {window:?} {h}x{w}");
        }
        // The stride 2 convolutions of a ResNet (3x3 padding 1, 1x1) and the others above.
        assert!(strided >= 40, "only {strided} strided shift planes");
    }

    /// Every combination of one item of each list.
    fn combinations<A: Copy, B: Copy, C: Copy>(a: &[A], b: &[B], c: &[C]) -> Vec<(A, B, C)> {
        a.iter().flat_map(|&x| b.iter().flat_map(move |&y| c.iter().map(move |&z| (x, y, z)))).collect()
    }
}

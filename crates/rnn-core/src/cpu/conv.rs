//! The fused 2-D convolution on the CPU (`Tensor::conv2d`), one image at a time: its windows
//! are unfolded (im2col) into a per-thread scratch buffer, multiplied by the weight through
//! packed gemm straight into the image's `[out, Ho * Wo]` output (which already holds the
//! bias), and the ReLU is applied while that output is in cache. The backward masks the
//! output gradient by the ReLU on the fly and sums the bias gradient straight from it. It
//! unfolds each image again for the weight gradient, except on AVX-512 CPUs for f32: there
//! layers with 16s of output channels per group take it from broadcasts of the padded
//! image (`conv_wgrad.rs`), and wide 3x3 stride-1 layers with other channel counts from
//! register tiles over its rows (`conv_direct.rs`). The input
//! gradient of a stride-1 convolution is the convolution of the output gradient with the
//! flipped weight; that of a strided one is folded (col2im) from the gradient of the
//! unfolded image, one image at a time while it is hot. Threads split the batch; every
//! buffer of the loop is per thread and reused from image to image.

use std::mem::MaybeUninit;

use gemm::Parallelism;
use rayon::prelude::*;

use super::conv_bcast_fwd::{self, BroadcastConv};
use super::conv_direct::{DirectConv, Padded};
use super::conv_wgrad::{self, BroadcastWeightGrad};
use super::matmul::{gemm_one, Operand};
use super::parallel::{output_vec, zeroed_vec};
use super::simd::fold_lanes;
use super::window::Plane;
use crate::num::{as_f32, as_f32_mut, Float};
use crate::{Result, Window2d};

/// The sizes of one convolution: `[batch, in_c, h, w]` input, `[out_c, in_c / groups, kh,
/// kw]` weight, `[batch, out_c, ho, wo]` output.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvShape {
    pub batch: usize,
    pub in_c: usize,
    pub out_c: usize,
    pub groups: usize,
    pub hw: (usize, usize),
    pub out_hw: (usize, usize),
    pub window: Window2d,
}

impl ConvShape {
    fn plane(&self) -> Plane<'_> {
        Plane { h: self.hw.0, w: self.hw.1, ho: self.out_hw.0, wo: self.out_hw.1, window: &self.window }
    }

    /// Output positions of one image, `Ho * Wo`: the columns of every product.
    fn positions(&self) -> usize {
        self.out_hw.0 * self.out_hw.1
    }

    /// Rows of one group's unfolded input, `in_c / groups * kh * kw`: the inner dim of the
    /// forward product.
    fn group_k(&self) -> usize {
        self.in_c / self.groups * self.window.taps()
    }

    /// Output channels of one group.
    fn group_out(&self) -> usize {
        self.out_c / self.groups
    }

    pub(super) fn image_len(&self) -> usize {
        self.in_c * self.hw.0 * self.hw.1
    }

    /// Whether the backward sums the weight gradient transposed (`[groups, kg, og]`), as
    /// `cols @ gzᵀ` per image: the orientation `product` would pick for `gz @ colsᵀ`, minus
    /// its write-back of every image's product; [`Self::untranspose_weight_grad`] turns the
    /// sums around once at the end.
    fn weight_grad_transposed(&self) -> bool {
        runs_transposed((self.group_out(), self.group_k()), self.positions() as isize, super::simd::has_avx512())
    }

    /// The weight gradient `[out_c, in_c / groups, kh, kw]` from its transposed sums.
    fn untranspose_weight_grad<T: Copy>(&self, sums: &[T]) -> Vec<T> {
        let (og, kg) = (self.group_out(), self.group_k());
        let mut w = Vec::with_capacity(sums.len());
        for group in sums.chunks_exact((og * kg).max(1)) {
            w.extend((0..og * kg).map(|i| group[i % kg * og + i / kg]));
        }
        w
    }

    fn cols_len(&self) -> usize {
        self.in_c * self.window.taps() * self.positions()
    }

    /// Unfolds image `xi` (`[in_c, h, w]`) into `cols`, `[in_c * kh * kw, Ho * Wo]`, reusing
    /// its allocation (and that of `phases`, the scratch of strided planes).
    fn unfold_image<T: Float>(&self, xi: &[T], cols: &mut Vec<T>, phases: &mut Vec<T>) {
        let (plane, hw, n) = (self.plane(), self.hw.0 * self.hw.1, self.cols_len());
        let per_channel = self.window.taps() * self.positions();
        cols.clear();
        cols.reserve(n);
        let spare: &mut [MaybeUninit<T>] = &mut cols.spare_capacity_mut()[..n];
        for (c, dst) in spare.chunks_mut(per_channel).enumerate() {
            plane.unfold(&xi[c * hw..][..hw], dst, T::zero(), phases);
        }
        // SAFETY: `reserve` made room for `n` elements and `Plane::unfold` wrote every element
        // of each channel's chunk; the chunks cover 0..n.
        unsafe { cols.set_len(n) };
    }

    /// `out = conv(xi, w) + bias` for one image: from its padded planes by `conv`'s direct
    /// or broadcast kernels (`conv_direct.rs`, `conv_bcast_fwd.rs`), else its windows
    /// unfolded into `bufs.cols`, then one product per group onto the bias.
    fn convolve_image<T: Float + 'static>(
        &self,
        (xi, w, bias): (&[T], &[T], Option<&[T]>),
        out: &mut [T],
        conv: &ImageConv,
        bufs: &mut ImageBuffers<T>,
    ) {
        if let (Some(x32), Some(w32), Some(out32)) = (as_f32(xi), as_f32(w), as_f32_mut(out)) {
            match conv {
                ImageConv::Direct(d) => {
                    return d.convolve(self, x32, w32, bias.and_then(as_f32), out32, &mut bufs.padded)
                }
                ImageConv::Broadcast(b) => return b.convolve(self, x32, bias.and_then(as_f32), out32, &mut bufs.bcast),
                ImageConv::Product => {}
            }
        }
        let (l, kg, og) = (self.positions(), self.group_k(), self.group_out());
        if let Some(b) = bias {
            out.chunks_mut(l).zip(b).for_each(|(row, &v)| row.fill(v));
        }
        self.unfold_image(xi, &mut bufs.cols, &mut bufs.phases);
        for g in 0..self.groups {
            let (wg, cg) = (&w[g * og * kg..][..og * kg], &bufs.cols[g * kg * l..][..kg * l]);
            let (a, b) = (rows(wg, kg), rows(cg, l));
            // SAFETY: `wg` is `og x kg` and `cg` `kg x l`, row-major; `out` holds out_c x l.
            unsafe { product(&mut out[g * og * l..], (og, l, kg), a, b, bias.is_some(), &mut bufs.product) };
        }
    }

    /// The input gradient of a stride-1 convolution as a convolution of the output gradient
    /// (`[out_c, ho, wo]` per image, giving `[in_c, h, w]`) with the flipped weight
    /// ([`Self::flipped_weight`]), padded by the dilated kernel span minus the padding:
    /// `dx[c, y, x] = sum w[o, c, i, j] g[o, y + p - i d, x + p - j d]`. It runs the forward's
    /// product, whose unfolded operand is the deep one, instead of a 16-deep product into
    /// `kh * kw` times the input's size and its fold. `None` for strided convolutions, and
    /// where the padding exceeds the span (windows past the input's edge).
    fn input_grad_shape(&self) -> Option<ConvShape> {
        let w = &self.window;
        if w.stride != (1, 1) {
            return None;
        }
        let pad = |k: usize, d: usize, p: usize| d.checked_mul(k.checked_sub(1)?)?.checked_sub(p);
        let padding = (pad(w.kernel.0, w.dilation.0, w.padding.0)?, pad(w.kernel.1, w.dilation.1, w.padding.1)?);
        let window = Window2d { padding, ..*w };
        Some(ConvShape { in_c: self.out_c, out_c: self.in_c, hw: self.out_hw, out_hw: self.hw, window, ..*self })
    }

    /// The weight of [`Self::input_grad_shape`], `[in_c, out_c / groups, kh, kw]`: within each
    /// group, input and output channels swapped and the kernel turned by 180 degrees.
    fn flipped_weight<T: Copy>(&self, w: &[T]) -> Vec<T> {
        let (og, cg, taps) = (self.group_out(), self.in_c / self.groups, self.window.taps());
        let mut flipped = Vec::with_capacity(w.len());
        for g in 0..self.groups {
            for c in 0..cg {
                for o in 0..og {
                    let kernel = &w[((g * og + o) * cg + c) * taps..][..taps];
                    flipped.extend(kernel.iter().rev());
                }
            }
        }
        flipped
    }
}

/// One thread's buffers for [`ConvShape::convolve_image`], reused from image to image: the
/// unfolded image, a transposed product's output (see `product`) and the phase planes of
/// strided convolutions (see `Plane::unfold`).
struct ImageBuffers<T> {
    cols: Vec<T>,
    product: Vec<T>,
    phases: Vec<T>,
    /// The padded image and output of the direct convolution.
    padded: Padded,
    /// Those of the broadcast convolution.
    bcast: conv_bcast_fwd::Buffers,
}

impl<T> ImageBuffers<T> {
    fn new() -> Self {
        ImageBuffers {
            cols: Vec::new(),
            product: Vec::new(),
            phases: Vec::new(),
            padded: Padded::default(),
            bcast: conv_bcast_fwd::Buffers::default(),
        }
    }
}

/// How [`ConvShape::convolve_image`] convolves the images of one call.
enum ImageConv {
    Direct(DirectConv),
    Broadcast(BroadcastConv),
    Product,
}

impl ImageConv {
    /// The kernels for `s` with weight `w`: the direct ones where they walk rows as they
    /// are ([`DirectConv::for_forward`]), else the broadcast ones ([`BroadcastConv::new`]),
    /// else the direct ones by padded rows; the unfolded product where none applies.
    fn new<T: 'static>(s: &ConvShape, w: &[T]) -> Self {
        let direct = DirectConv::for_forward(s, as_f32(w).is_some());
        if !direct.as_ref().is_some_and(DirectConv::by_rows) {
            if let Some(b) = BroadcastConv::new(s, as_f32(w)) {
                return ImageConv::Broadcast(b);
            }
        }
        direct.map_or(ImageConv::Product, ImageConv::Direct)
    }
}

/// The row-major `rows x cols` matrix at the start of `s`, as a product operand.
fn rows<T>(s: &[T], cols: usize) -> Operand<T> {
    Operand(s.as_ptr(), cols as isize, 1)
}

/// The transpose of the row-major matrix at the start of `s` with `cols` columns.
fn transposed_of<T>(s: &[T], cols: usize) -> Operand<T> {
    Operand(s.as_ptr(), 1, cols as isize)
}

/// `dst = a @ b` (or `dst += a @ b` when `accumulate`) for a row-major `m x n` `dst`, on the
/// calling thread (the batch is what is split over threads). Some products run as the
/// transposed product `bᵀ aᵀ` into the row-major `scratch`, then are written back
/// transposed (see [`runs_transposed`]).
///
/// SAFETY: `a` and `b` must address `m x k` and `k x n` valid elements with their strides,
/// and `dst` must hold at least `m * n` elements.
unsafe fn product<T: Float + 'static>(
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: Operand<T>,
    b: Operand<T>,
    accumulate: bool,
    scratch: &mut Vec<T>,
) {
    let transposed = runs_transposed((m, n), b.2, super::simd::has_avx512());
    // SAFETY: the caller's guarantee.
    unsafe { product_as(dst, (m, n, k), a, b, accumulate, scratch, transposed) }
}

/// [`product`] in the orientation given: `transposed` runs it as `bᵀ aᵀ`.
///
/// SAFETY: as [`product`].
unsafe fn product_as<T: Float + 'static>(
    dst: &mut [T],
    (m, n, k): (usize, usize, usize),
    a: Operand<T>,
    b: Operand<T>,
    accumulate: bool,
    scratch: &mut Vec<T>,
    transposed: bool,
) {
    debug_assert!(dst.len() >= m * n);
    let units = (T::zero(), T::one());
    if !transposed {
        // SAFETY: the caller's guarantee.
        return unsafe { gemm_one(dst, (m, n, k), a, b, units, Parallelism::None, accumulate) };
    }
    if scratch.len() < m * n {
        scratch.resize(m * n, T::zero());
    }
    let t = &mut scratch[..m * n];
    let transpose = |o: Operand<T>| Operand(o.0, o.2, o.1);
    // SAFETY: bᵀ is n x k and aᵀ k x m over the same elements as b and a; t holds n x m.
    unsafe { gemm_one(t, (n, m, k), transpose(b), transpose(a), units, Parallelism::None, false) };
    // In blocks of `TRANSPOSE_BLOCK` positions, whose `m` values each stay in L1 while the
    // block's rows of `dst` are written.
    for first in (0..n).step_by(TRANSPOSE_BLOCK) {
        let count = TRANSPOSE_BLOCK.min(n - first);
        let block = &t[first * m..][..count * m];
        for (i, row) in dst.chunks_exact_mut(n).take(m).enumerate() {
            let row = &mut row[first..][..count];
            let column = block.iter().skip(i).step_by(m);
            if accumulate {
                row.iter_mut().zip(column).for_each(|(d, &v)| *d = *d + v);
            } else {
                row.iter_mut().zip(column).for_each(|(d, &v)| *d = v);
            }
        }
    }
}

/// Whether `product` runs `a @ b` (`m x n`) as `bᵀ aᵀ`, only ever for outputs of at most 64
/// rows (a few channels: the copy back is small). The `gemm` crate packs, as the left
/// operand of its kernels, `bᵀ` for a row-major output and `aᵀ` for the transposed one
/// (per image, GFLOP/s measured on the ResNet-8 shapes, figures in
/// bench/results/2026-11-28-train-2core-amd-epyc.md):
/// - With AVX-512 (16-lane kernels), the orientation where that operand is contiguous along
///   the output's rows wins: the forward (`b` = unfolded columns, rows contiguous) runs
///   direct, 16 x 1024 x 144 at 225 GFLOP/s against 79 transposed; the weight gradient
///   (`b` = columnsᵀ, neither operand contiguous that way) runs transposed, 121 against 21.
/// - With AVX2 (8-lane kernels), outputs far wider than tall (`n >= 4 m`) ran 1.1-2.6x
///   faster transposed on an AVX2-only EPYC (forward 45 -> 75 GFLOP/s, weight gradient 27 -> 71;
///   bench/results/2026-11-25-train-2core-amd-epyc.md); taller outputs measured no gain.
fn runs_transposed((m, n): (usize, usize), b_column_stride: isize, avx512: bool) -> bool {
    if m == 0 || m > 64 {
        return false;
    }
    if avx512 {
        return b_column_stride != 1;
    }
    n >= 4 * m
}

/// Positions per block of the transposed write-back in `product`.
const TRANSPOSE_BLOCK: usize = 32;

/// ReLU in place, NaN kept (as `Tensor::relu`).
fn relu_in_place<T: Float>(v: &mut [T]) {
    for x in v {
        *x = if *x < T::zero() { T::zero() } else { *x };
    }
}

/// The forward: `act(conv(x, w) + b)` as a contiguous `[batch, out_c, ho, wo]` vector, `x`
/// and `w` contiguous.
pub(crate) fn conv2d_forward<T: Float + 'static>(
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    s: &ConvShape,
    relu: bool,
) -> Result<Vec<T>> {
    let image_out = s.out_c * s.positions();
    let kg = s.group_k();
    // The product writes every element (onto the bias, when there is one); with no input
    // channels there is no product, and the output is the bias or zero.
    let len = s.batch * image_out;
    let mut y = if kg > 0 { output_vec::<T>(len)? } else { zeroed_vec::<T>(len)? };
    if y.is_empty() {
        return Ok(y);
    }
    let conv = ImageConv::new(s, w);
    let image = |i: usize, out: &mut [T], bufs: &mut ImageBuffers<T>| {
        s.convolve_image((&x[i * s.image_len()..][..s.image_len()], w, bias), out, &conv, bufs);
        if relu {
            relu_in_place(out);
        }
    };
    let buffers = ImageBuffers::new;
    y.par_chunks_mut(image_out).enumerate().for_each_init(buffers, |bufs, (i, out)| image(i, out, bufs));
    Ok(y)
}

/// The gradients of one convolution; `x` and `b` only where asked for.
pub(crate) struct ConvGrads<T> {
    pub x: Option<Vec<T>>,
    pub w: Vec<T>,
    pub b: Option<Vec<T>>,
}

/// One thread's buffers in the backward: those of an image's products, the gradient of
/// the unfolded image, the masked output gradient, and the running sums of the weight and
/// bias gradients.
struct Scratch<T> {
    bufs: ImageBuffers<T>,
    /// The padded operands of the direct weight gradient.
    padded: Padded,
    /// Those of the broadcast weight gradient.
    broadcast: conv_wgrad::Buffers,
    grad_cols: Vec<T>,
    masked: Vec<T>,
    w: Vec<T>,
    b: Vec<T>,
}

impl<T: Float> Scratch<T> {
    fn new(s: &ConvShape, w_len: usize) -> Self {
        Scratch {
            bufs: ImageBuffers::new(),
            padded: Padded::default(),
            broadcast: conv_wgrad::Buffers::default(),
            grad_cols: Vec::new(),
            masked: Vec::new(),
            w: vec![T::zero(); w_len],
            b: vec![T::zero(); s.out_c],
        }
    }

    /// Adds the images still pending in the direct weight gradient's block to the sums.
    fn flush(&mut self, s: &ConvShape, wg: &WeightGrad) {
        if let (Some(d), Some(sums)) = (&wg.direct, as_f32_mut(&mut self.w)) {
            d.flush(s, sums, &mut self.padded);
        }
    }

    /// The sums of two threads (each flushed).
    fn merge(mut self, other: Self) -> Self {
        self.w.iter_mut().zip(&other.w).for_each(|(a, &b)| *a = *a + b);
        self.b.iter_mut().zip(&other.b).for_each(|(a, &b)| *a = *a + b);
        self
    }
}

/// The inputs of the backward: forward inputs, the output `y` (for the ReLU mask, when the
/// layer has one) and its gradient `g`, all contiguous.
pub(crate) struct ConvBackward<'a, T> {
    pub x: &'a [T],
    pub w: &'a [T],
    pub y: Option<&'a [T]>,
    pub g: &'a [T],
    pub shape: ConvShape,
}

/// How the backward computes the weight gradient, on AVX-512 for f32: from broadcasts of
/// the padded input (16s of output channels per group, see `conv_wgrad.rs`; sums
/// transposed), or from the direct tiles (wide 3x3 stride-1 layers, see `conv_direct.rs`;
/// with padded rows, images with a non-finite input take the product, whose sums then stay
/// in the plain orientation). Otherwise as one product per image with the unfolded input,
/// its sums transposed or not (see [`ConvShape::weight_grad_transposed`]).
struct WeightGrad {
    direct: Option<DirectConv>,
    broadcast: Option<BroadcastWeightGrad>,
    transposed: bool,
}

/// How the backward computes the input gradient: as a convolution of the output gradient
/// with the flipped weight (stride 1, see [`ConvShape::input_grad_shape`]), or by folding
/// the gradient of the unfolded input.
enum InputGrad<T> {
    Convolution(ConvShape, Vec<T>, Box<ImageConv>),
    Fold,
}

impl<T: Float + 'static> ConvBackward<'_, T> {
    /// The weight gradient, and the input and bias gradients when `need_x` / `need_b`.
    pub(crate) fn run(&self, need_x: bool, need_b: bool) -> Result<ConvGrads<T>> {
        let s = &self.shape;
        let is_f32 = as_f32(self.x).is_some();
        let broadcast = BroadcastWeightGrad::new(s, is_f32);
        let direct = if broadcast.is_some() { None } else { DirectConv::for_weight_grad(s, is_f32) };
        let transposed = broadcast.is_some() || (direct.is_none() && s.weight_grad_transposed());
        let weight_grad = WeightGrad { direct, broadcast, transposed };
        // A weight with inf or NaN would meet the padding's zeros in the convolution (NaN),
        // where the fold adds only the products inside the input.
        let input_grad = match s.input_grad_shape() {
            Some(gs) if need_x && self.w.iter().all(|v| v.is_finite()) => {
                let flipped = s.flipped_weight(self.w);
                let conv = Box::new(ImageConv::new(&gs, &flipped));
                InputGrad::Convolution(gs, flipped, conv)
            }
            _ => InputGrad::Fold,
        };
        // A convolution writes every element of the input gradient (unless it is 0 deep);
        // the fold adds into zeros.
        let overwritten = matches!(&input_grad, InputGrad::Convolution(gs, ..) if gs.group_k() > 0);
        let len = s.batch * s.image_len();
        let mut gx = match (need_x, overwritten) {
            (false, _) => None,
            (true, true) => Some(output_vec::<T>(len)?),
            (true, false) => Some(zeroed_vec::<T>(len)?),
        };
        let images: Vec<Option<&mut [T]>> = match gx.as_mut() {
            Some(v) if s.image_len() > 0 => v.chunks_mut(s.image_len()).map(Some).collect(),
            _ => (0..s.batch).map(|_| None).collect(),
        };
        let threads = rayon::current_num_threads().max(1);
        let sums = images
            .into_par_iter()
            .enumerate()
            .with_min_len(s.batch.div_ceil(4 * threads).max(1))
            .fold(
                || Scratch::new(s, self.w.len()),
                |mut sc, (i, gxi)| {
                    self.image(i, gxi, (&weight_grad, &input_grad), &mut sc);
                    sc
                },
            )
            .map(|mut sc| {
                sc.flush(s, &weight_grad);
                sc
            })
            .reduce_with(Scratch::merge);
        let (w, b) = match sums {
            Some(sc) if weight_grad.transposed => (s.untranspose_weight_grad(&sc.w), sc.b),
            Some(sc) => (sc.w, sc.b),
            None => (vec![T::zero(); self.w.len()], vec![T::zero(); s.out_c]),
        };
        Ok(ConvGrads { x: gx, w, b: need_b.then_some(b) })
    }

    /// Adds image `i`'s share of the weight and bias gradients to `sc` and writes its input
    /// gradient to `gxi` when given (zeroed, for the fold).
    fn image(&self, i: usize, gxi: Option<&mut [T]>, (wg, ig): (&WeightGrad, &InputGrad<T>), sc: &mut Scratch<T>) {
        let s = &self.shape;
        let gz = self.masked_grad(i, &mut sc.masked);
        for (row, b) in gz.chunks(s.positions().max(1)).zip(sc.b.iter_mut()) {
            *b = *b + fold_lanes(row, T::zero(), |v| v, |a, c| a + c);
        }
        let xi = &self.x[i * s.image_len()..][..s.image_len()];
        let direct = match (&wg.direct, &wg.broadcast, as_f32(xi), as_f32(gz), as_f32_mut(&mut sc.w)) {
            (Some(d), _, Some(xi), Some(gz), Some(sums)) => d.push(s, xi, gz, sums, &mut sc.padded),
            (_, Some(b), Some(xi), Some(gz), Some(sums)) => {
                b.add_image(s, xi, gz, sums, &mut sc.broadcast);
                true
            }
            _ => false,
        };
        if !direct {
            self.weight_grad_by_product(xi, gz, wg.transposed, &mut sc.w, &mut sc.bufs);
        }
        let Some(gxi) = gxi else { return };
        match ig {
            InputGrad::Convolution(gs, flipped, conv) => {
                gs.convolve_image((gz, flipped, None), gxi, conv, &mut sc.bufs)
            }
            InputGrad::Fold => self.fold_input_grad(gz, gxi, &mut sc.grad_cols, &mut sc.bufs),
        }
    }

    /// Adds the weight gradient of image `xi` (`gz` its output gradient) to `sums` as one
    /// product per group with its unfolded windows, `[groups, kg, og]` when `transposed`.
    fn weight_grad_by_product(&self, xi: &[T], gz: &[T], transposed: bool, sums: &mut [T], bufs: &mut ImageBuffers<T>) {
        let s = &self.shape;
        let (l, kg, og) = (s.positions(), s.group_k(), s.group_out());
        s.unfold_image(xi, &mut bufs.cols, &mut bufs.phases);
        for g in 0..s.groups {
            let (gzg, cg) = (&gz[g * og * l..][..og * l], &bufs.cols[g * kg * l..][..kg * l]);
            let sums = &mut sums[g * og * kg..];
            if transposed {
                // SAFETY: gw_gᵀ (kg x og) += cols_g (kg x l) @ gz_gᵀ (l x og), all in bounds.
                unsafe {
                    product_as(sums, (kg, og, l), rows(cg, l), transposed_of(gzg, l), true, &mut bufs.product, false)
                };
            } else {
                // SAFETY: gw_g (og x kg) += gz_g (og x l) @ cols_gᵀ (l x kg), all in bounds.
                unsafe { product(sums, (og, kg, l), rows(gzg, l), transposed_of(cg, l), true, &mut bufs.product) };
            }
        }
    }

    /// The input gradient of one image by the fold: the gradient of its unfolded windows,
    /// `wᵀ @ gz` per group, added back (col2im) into the zeroed `gxi`.
    fn fold_input_grad(&self, gz: &[T], gxi: &mut [T], grad_cols: &mut Vec<T>, bufs: &mut ImageBuffers<T>) {
        let s = &self.shape;
        let (l, kg, og) = (s.positions(), s.group_k(), s.group_out());
        grad_cols.resize(s.cols_len(), T::zero());
        for g in 0..s.groups {
            let (wg, gzg) = (&self.w[g * og * kg..][..og * kg], &gz[g * og * l..][..og * l]);
            let dst = &mut grad_cols[g * kg * l..];
            // SAFETY: grad_cols_g (kg x l) = w_gᵀ (kg x og) @ gz_g (og x l), all in bounds.
            unsafe { product(dst, (kg, l, og), transposed_of(wg, kg), rows(gzg, l), false, &mut bufs.product) };
        }
        let (plane, hw, per_channel) = (s.plane(), s.hw.0 * s.hw.1, s.window.taps() * l);
        for (c, dst) in gxi.chunks_mut(hw.max(1)).enumerate().take(s.in_c) {
            plane.fold_scratch(&mut grad_cols[c * per_channel..][..per_channel], dst, &mut bufs.phases);
        }
    }

    /// Image `i`'s output gradient, through the ReLU when the layer has one (zero where the
    /// output is <= 0, as `relu`'s backward), in `buf`.
    fn masked_grad<'b>(&'b self, i: usize, buf: &'b mut Vec<T>) -> &'b [T] {
        let len = self.shape.out_c * self.shape.positions();
        let g = &self.g[i * len..][..len];
        let Some(y) = self.y else { return g };
        buf.clear();
        buf.extend(g.iter().zip(&y[i * len..][..len]).map(|(&g, &y)| if y <= T::zero() { T::zero() } else { g }));
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both orientations of `product_as` against a plain triple loop, with the operand
    /// strides of the forward, the weight gradient and the input gradient, overwriting and
    /// accumulating: every CPU runs both, whichever `runs_transposed` picks on it.
    #[test]
    fn both_orientations_match_the_plain_product() {
        let dims = (16, 70, 9);
        for transposed in [false, true] {
            // SAFETY: the checker passes operands and an output of these dimensions.
            super::super::matmul::check_against_plain_product(dims, |dst, a, b, accumulate| unsafe {
                product_as(dst, dims, a, b, accumulate, &mut Vec::new(), transposed)
            });
        }
    }

    /// Transposed weight-gradient sums, `[groups, kg, og]`, back to `[groups, og, kg]`.
    #[test]
    fn weight_grad_sums_turn_around_per_group() {
        let window = Window2d { kernel: (1, 1), stride: (1, 1), padding: (0, 0), dilation: (1, 1) };
        let s = ConvShape { batch: 1, in_c: 6, out_c: 4, groups: 2, hw: (1, 1), out_hw: (1, 1), window };
        // Group g, input channel k, output channel o holds 100 g + 10 o + k.
        let (og, kg) = (2, 3);
        let sums: Vec<f32> = (0..2)
            .flat_map(|g| (0..kg).flat_map(move |k| (0..og).map(move |o| (100 * g + 10 * o + k) as f32)))
            .collect();
        let want: Vec<f32> = (0..2)
            .flat_map(|g| (0..og).flat_map(move |o| (0..kg).map(move |k| (100 * g + 10 * o + k) as f32)))
            .collect();
        assert_eq!(s.untranspose_weight_grad(&sums), want);
    }

    #[test]
    fn the_orientation_rule() {
        // AVX-512: by the right operand's column stride; AVX2: wide outputs transposed.
        assert!(!runs_transposed((16, 1024), 1, true));
        assert!(runs_transposed((16, 144), 1024, true));
        assert!(runs_transposed((16, 1024), 1, false));
        assert!(!runs_transposed((16, 32), 1, false));
        // Outputs of more than 64 rows never transpose.
        assert!(!runs_transposed((144, 1024), 7, true) && !runs_transposed((144, 4096), 1, false));
    }
}

//! Sliding 2-D windows (im2col): `unfold2d` copies every window of a `[N, C, H, W]` tensor
//! out into `[N, C, kh * kw, Ho * Wo]`, and `fold2d`, its adjoint, sums such window elements
//! back into the positions they came from. Convolution is `unfold2d` and a matmul; pooling is
//! `unfold2d` and a reduction over dim 2.
//!
//! Backward: the gradient of `unfold2d` is `fold2d` of the output gradient, and the gradient
//! of `fold2d` is `unfold2d` (padding 0) of the output gradient; each is the other's adjoint,
//! `<unfold(x), y> = <x, fold(y)>`.

use crate::backprop::Op;
use crate::{Error, Layout, Result, Shape, Tensor};

/// Geometry of a 2-D sliding window over the last two dims of a `[N, C, H, W]` tensor; each
/// pair is (height, width). Window `(oh, ow)`, kernel offset `(i, j)` reads the input at
/// row `oh * stride.0 + i * dilation.0 - padding.0` and the matching column, or the padding
/// when that lies outside the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window2d {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    /// Added on both sides of each spatial dim.
    pub padding: (usize, usize),
    /// Spacing between the kernel's elements (1: adjacent).
    pub dilation: (usize, usize),
}

impl Window2d {
    /// Rejects zero kernels, strides and dilations, naming `op` in the error.
    pub fn validate(&self, op: &'static str) -> Result<()> {
        let zero = |(a, b): (usize, usize)| a == 0 || b == 0;
        if zero(self.kernel) || zero(self.stride) || zero(self.dilation) {
            let msg = format!(
                "kernel {:?}, stride {:?} and dilation {:?} must all be > 0",
                self.kernel, self.stride, self.dilation
            );
            return Err(Error::invalid(op, msg));
        }
        Ok(())
    }

    /// The number of window positions `(Ho, Wo)` over an `h x w` input, as PyTorch computes
    /// it (floor mode). An error naming `op` when the window is invalid, the dilated kernel
    /// is larger than the padded input, or a size overflows.
    pub fn output_size(&self, op: &'static str, (h, w): (usize, usize)) -> Result<(usize, usize)> {
        self.validate(op)?;
        let overflow = || Error::invalid(op, format!("{self:?} overflows for an input of {h}x{w}"));
        let along = |size: usize, k: usize, s: usize, p: usize, d: usize| -> Result<usize> {
            let span = d.checked_mul(k - 1).and_then(|x| x.checked_add(1)).ok_or_else(overflow)?;
            let padded = p.checked_mul(2).and_then(|x| x.checked_add(size)).ok_or_else(overflow)?;
            if span > padded {
                let msg = format!(
                    "the kernel {:?} (dilation {:?}) is larger than the padded input (input {h}x{w}, padding {:?})",
                    self.kernel, self.dilation, self.padding
                );
                return Err(Error::invalid(op, msg));
            }
            Ok((padded - span) / s + 1)
        };
        let (k, s, p, d) = (self.kernel, self.stride, self.padding, self.dilation);
        Ok((along(h, k.0, s.0, p.0, d.0)?, along(w, k.1, s.1, p.1, d.1)?))
    }

    /// `kh * kw`, the number of elements in one window.
    pub fn taps(&self) -> usize {
        self.kernel.0.saturating_mul(self.kernel.1)
    }

    /// The unfolded shape `[N, C, kh * kw, Ho * Wo]` of a `[N, C, H, W]` tensor, with every
    /// size checked.
    fn unfolded_shape(&self, op: &'static str, dims: &[usize]) -> Result<Shape> {
        let &[n, c, h, w] = dims else {
            return Err(Error::RankMismatch { op, expected: 4, got: dims.len(), shape: dims.into() });
        };
        let (ho, wo) = self.output_size(op, (h, w))?;
        let cols = self.kernel.0.checked_mul(self.kernel.1);
        let positions = ho.checked_mul(wo);
        let (Some(cols), Some(positions)) = (cols, positions) else {
            return Err(Error::invalid(op, format!("{self:?} overflows for an input of {h}x{w}")));
        };
        let shape = Shape::from(vec![n, c, cols, positions]);
        shape.checked_elem_count(op)?;
        Ok(shape)
    }
}

impl Tensor {
    /// Unfolds (im2col) a `[N, C, H, W]` tensor into its sliding windows:
    /// `[N, C, kh * kw, Ho * Wo]`, where element `[n, c, i * kw + j, oh * Wo + ow]` is the
    /// input under kernel offset `(i, j)` of window `(oh, ow)` (see `Window2d`), and
    /// positions in the padding read `pad_value` (0 for convolutions, -inf for max pooling).
    ///
    /// The layout is `[N, C * kh * kw, Ho * Wo]` in memory, the right-hand operand of a
    /// convolution's matmul, and reducing dim 2 pools each window over contiguous rows.
    pub fn unfold2d(
        &self,
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
        dilation: (usize, usize),
        pad_value: f64,
    ) -> Result<Tensor> {
        self.unfold2d_window(&Window2d { kernel, stride, padding, dilation }, pad_value)
    }

    /// `unfold2d` with the geometry in one value.
    pub fn unfold2d_window(&self, window: &Window2d, pad_value: f64) -> Result<Tensor> {
        let shape = window.unfolded_shape("unfold2d", self.dims())?;
        let storage = self.storage().unfold2d(self.layout(), window, pad_value)?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(shape), Some(Op::Unfold2d(self.clone(), *window))))
    }

    /// The adjoint of `unfold2d`: `self` is `[N, C, kh * kw, Ho * Wo]` (window elements, as
    /// `unfold2d` lays them out for an `out_hw` input), and the result `[N, C, H, W]` holds at
    /// each position the sum of the window elements taken from it. Elements that fall in the
    /// padding are dropped. With non-overlapping windows this undoes `unfold2d`.
    pub fn fold2d(
        &self,
        out_hw: (usize, usize),
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
        dilation: (usize, usize),
    ) -> Result<Tensor> {
        self.fold2d_window(out_hw, &Window2d { kernel, stride, padding, dilation })
    }

    /// `fold2d` with the geometry in one value.
    pub fn fold2d_window(&self, (h, w): (usize, usize), window: &Window2d) -> Result<Tensor> {
        self.expect_rank("fold2d", 4)?;
        let (n, c) = (self.dims()[0], self.dims()[1]);
        let out = Shape::from(vec![n, c, h, w]);
        out.checked_elem_count("fold2d")?;
        let expected = window.unfolded_shape("fold2d", out.dims())?;
        if self.shape() != &expected {
            let msg =
                format!("{window:?} over a {h}x{w} input gives windows of shape {expected:?}, got {:?}", self.shape());
            return Err(Error::invalid("fold2d", msg));
        }
        let storage = self.storage().fold2d(self.layout(), (h, w), window)?;
        Ok(Tensor::from_parts(storage, Layout::contiguous(out), Some(Op::Fold2d(self.clone(), *window))))
    }
}

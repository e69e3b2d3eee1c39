//! 2-D max and average pooling over `[N, C, H, W]` inputs: the input is unfolded into its
//! windows (`Tensor::unfold2d`, as in `Conv2d`), then reduced over the window dim.

use rnn_core::{Result, Tensor, Window2d};

use super::conv::unfold2d;
use crate::init::bad_config;
use crate::Module;

/// Options of a pooling layer besides its kernel; the defaults are PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dConfig {
    /// `None` means the kernel size (non-overlapping windows).
    pub stride: Option<(usize, usize)>,
    /// Added on both sides of each spatial dim; at most half the kernel, as in PyTorch.
    pub padding: (usize, usize),
    /// Spacing of the window's elements; only `MaxPool2d` accepts a value other than 1.
    pub dilation: (usize, usize),
}

impl Default for Pool2dConfig {
    fn default() -> Self {
        Pool2dConfig { stride: None, padding: (0, 0), dilation: (1, 1) }
    }
}

/// The window of a pool, validated as PyTorch does (padding at most half the kernel, so no
/// window lies entirely in the padding).
fn pool_window(layer: &'static str, kernel: (usize, usize), config: &Pool2dConfig) -> Result<Window2d> {
    let window = Window2d {
        kernel,
        stride: config.stride.unwrap_or(kernel),
        padding: config.padding,
        dilation: config.dilation,
    };
    window.validate(layer)?;
    let (k, p) = (kernel, config.padding);
    if p.0 > k.0 / 2 || p.1 > k.1 / 2 {
        let msg = format!("padding {p:?} must be at most half of the kernel {k:?}");
        return Err(bad_config(layer, msg));
    }
    Ok(window)
}

/// Reduces each window of `x` with `reduce`, which takes the unfolded input
/// `[N, C, kh * kw, Ho * Wo]` and reduces dim 2: rows of `Ho * Wo` contiguous elements.
fn pool(
    layer: &'static str,
    x: &Tensor,
    window: &Window2d,
    pad_value: f64,
    reduce: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (cols, (ho, wo)) = unfold2d(layer, x, window, pad_value)?;
    let (n, c) = (cols.dims()[0], cols.dims()[1]);
    reduce(&cols)?.reshape((n, c, ho, wo))
}

/// Max over each window; padded positions count as -inf. The gradient of a window goes to
/// its max; when several of its elements tie for the max, only the first of them in scan
/// order (row by row) receives it, as in PyTorch, and an element that is the max of several
/// overlapping windows receives the sum of their gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2d {
    window: Window2d,
}

impl MaxPool2d {
    /// Non-overlapping `kernel` windows (stride = kernel), no padding.
    pub fn new(kernel: (usize, usize)) -> Result<Self> {
        Self::with_config(kernel, Pool2dConfig::default())
    }

    pub fn with_config(kernel: (usize, usize), config: Pool2dConfig) -> Result<Self> {
        Ok(MaxPool2d { window: pool_window("MaxPool2d", kernel, &config)? })
    }
}

impl Module for MaxPool2d {
    /// `[N, C, H, W] -> [N, C, Ho, Wo]`.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        pool("MaxPool2d", xs, &self.window, f64::NEG_INFINITY, first_max)
    }
}

/// The max of each window (dim 2 of the unfolded input), read at the window's argmax: the
/// backward of that gather routes the gradient to the one element the argmax names (the
/// first max, or the first NaN), where the backward of `max` would give it to every tie.
fn first_max(windows: &Tensor) -> Result<Tensor> {
    let at = windows.argmax_keepdim(2)?;
    windows.gather(&at, 2)?.squeeze(2)
}

/// Mean over each window. Padded positions count as zeros in the mean (PyTorch's default
/// `count_include_pad=True`): every window divides by `kh * kw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2d {
    window: Window2d,
}

impl AvgPool2d {
    /// Non-overlapping `kernel` windows (stride = kernel), no padding.
    pub fn new(kernel: (usize, usize)) -> Result<Self> {
        Self::with_config(kernel, Pool2dConfig::default())
    }

    /// `config.dilation` must be (1, 1): PyTorch's AvgPool2d has no dilation either.
    pub fn with_config(kernel: (usize, usize), config: Pool2dConfig) -> Result<Self> {
        if config.dilation != (1, 1) {
            let msg = format!("dilation {:?} is not supported, only (1, 1)", config.dilation);
            return Err(bad_config("AvgPool2d", msg));
        }
        Ok(AvgPool2d { window: pool_window("AvgPool2d", kernel, &config)? })
    }
}

impl Module for AvgPool2d {
    /// `[N, C, H, W] -> [N, C, Ho, Wo]`.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        pool("AvgPool2d", xs, &self.window, 0.0, |windows| windows.mean(2))
    }
}

/// The window accessors both pools share.
macro_rules! window_getters {
    ($($pool:ident),*) => {$(
        impl $pool {
            pub fn kernel(&self) -> (usize, usize) {
                self.window.kernel
            }

            pub fn stride(&self) -> (usize, usize) {
                self.window.stride
            }

            pub fn padding(&self) -> (usize, usize) {
                self.window.padding
            }
        }
    )*};
}
window_getters!(MaxPool2d, AvgPool2d);

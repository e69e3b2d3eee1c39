//! 2-D max and average pooling over `[N, C, H, W]` inputs, through the fused
//! `Tensor::max_pool2d` / `Tensor::avg_pool2d` (direct kernels on the CPU, `unfold2d` and a
//! reduction over the window dim elsewhere).

use rnn_core::{Result, Tensor, Window2d};

use super::conv::expect_nchw;
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
        expect_nchw("MaxPool2d", xs)?;
        self.window.output_size("MaxPool2d", (xs.dims()[2], xs.dims()[3]))?;
        xs.max_pool2d(&self.window)
    }
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
        expect_nchw("AvgPool2d", xs)?;
        self.window.output_size("AvgPool2d", (xs.dims()[2], xs.dims()[3]))?;
        xs.avg_pool2d(&self.window)
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

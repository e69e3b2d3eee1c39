//! 2-D convolution, and the sliding-window unfold (im2col) it shares with the pooling layers.
//!
//! Everything is written in tensor ops, so autograd and every device come for free: the input
//! is unfolded into its windows (strided views of the padded input, copied out by one `cat`),
//! and the convolution is then a single batched matmul with the weight, groups being a batch
//! dim of that matmul.

use rnn_core::{Error, Result, Tensor};

use crate::init::bad_config;
use crate::{Init, Module, VarBuilder};

/// Sliding-window geometry: kernel, stride, padding and dilation as (height, width).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window2d {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
}

impl Window2d {
    /// Rejects zero kernels, strides and dilations.
    pub(crate) fn validate(&self, layer: &'static str) -> Result<()> {
        let zero = |(a, b): (usize, usize)| a == 0 || b == 0;
        if zero(self.kernel) || zero(self.stride) || zero(self.dilation) {
            let msg = format!(
                "kernel {:?}, stride {:?} and dilation {:?} must all be > 0",
                self.kernel, self.stride, self.dilation
            );
            return Err(bad_config(layer, msg));
        }
        Ok(())
    }

    /// Output (height, width) for an `h x w` input, as PyTorch computes it (floor mode); an
    /// error when the dilated kernel is larger than the padded input, or sizes overflow.
    pub(crate) fn output_size(&self, layer: &'static str, (h, w): (usize, usize)) -> Result<(usize, usize)> {
        let (k, s, p, d) = (self.kernel, self.stride, self.padding, self.dilation);
        let too_large = || Error::invalid(layer, format!("{self:?} overflows for an input of {h}x{w}"));
        let along = |size: usize, k: usize, s: usize, p: usize, d: usize| -> Result<usize> {
            let span = d.checked_mul(k - 1).and_then(|x| x.checked_add(1)).ok_or_else(too_large)?;
            let padded = p.checked_mul(2).and_then(|x| x.checked_add(size)).ok_or_else(too_large)?;
            // The padded size is later rounded up to a multiple of the stride: keep room for it.
            padded.checked_add(s).ok_or_else(too_large)?;
            if span > padded {
                let msg = format!(
                    "the kernel {k:?} (dilation {d:?}) is larger than the padded input (input {h}x{w}, padding {p:?})",
                    k = self.kernel,
                    d = self.dilation,
                    p = self.padding,
                );
                return Err(Error::invalid(layer, msg));
            }
            Ok((padded - span) / s + 1)
        };
        Ok((along(h, k.0, s.0, p.0, d.0)?, along(w, k.1, s.1, p.1, d.1)?))
    }

    fn is_identity(&self) -> bool {
        self.kernel == (1, 1) && self.stride == (1, 1) && self.padding == (0, 0)
    }
}

/// Checks that `x` is a float `[N, C, H, W]` tensor.
pub(crate) fn expect_nchw(layer: &'static str, x: &Tensor) -> Result<()> {
    if x.rank() != 4 {
        return Err(Error::RankMismatch { op: layer, expected: 4, got: x.rank(), shape: x.shape().clone() });
    }
    if !x.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op: layer,
            dtype: x.dtype(),
            hint: ": the input must be a float tensor",
        });
    }
    Ok(())
}

/// `x` padded with `pad_value` and split by stride phase: `[N, C, Hq, sh, Wq, sw]`, where
/// padded row `r` is at `(r / sh, r % sh)` (same for columns). The padded size is rounded up
/// to a multiple of the stride; the rows added for that are never inside a window. A window
/// row `oh * sh + r` is then `(oh + r / sh, r % sh)`: every kernel offset is a plain narrow.
fn phase_split(x: &Tensor, window: &Window2d, pad_value: f64) -> Result<Tensor> {
    let (n, c, h, w) = (x.dims()[0], x.dims()[1], x.dims()[2], x.dims()[3]);
    let (p, s) = (window.padding, window.stride);
    let (hq, wq) = ((h + 2 * p.0).div_ceil(s.0), (w + 2 * p.1).div_ceil(s.1));
    let (extra_h, extra_w) = (hq * s.0 - h - 2 * p.0, wq * s.1 - w - 2 * p.1);
    let padded = pad2d(x, (p.0, p.0 + extra_h, p.1, p.1 + extra_w), pad_value)?;
    padded.reshape(vec![n, c, hq, s.0, wq, s.1])
}

/// Checks `x` and `window`; returns the output (height, width).
fn checked_output_size(layer: &'static str, x: &Tensor, window: &Window2d) -> Result<(usize, usize)> {
    expect_nchw(layer, x)?;
    window.validate(layer)?;
    window.output_size(layer, (x.dims()[2], x.dims()[3]))
}

/// Unfolds (im2col) a `[N, C, H, W]` tensor into its sliding windows: returns
/// `[N, C, kh * kw, Ho * Wo]`, where `[n, c, i * kw + j, oh * Wo + ow]` is the input element
/// under kernel offset `(i, j)` of the window at output position `(oh, ow)`, and padded
/// positions read `pad_value`. Also returns `(Ho, Wo)`.
///
/// Each kernel offset is a strided view of the padded input (narrows of `phase_split`), and
/// one `cat` copies them out. Measured on 2 cores for 3x3 windows of a [128, 16, 14, 14]
/// input, forward + backward: 14 ms, against 45 ms for one `index_select` of precomputed
/// window positions, whose backward is a `scatter_add` with an index per element.
pub(crate) fn unfold2d(
    layer: &'static str,
    x: &Tensor,
    window: &Window2d,
    pad_value: f64,
) -> Result<(Tensor, (usize, usize))> {
    let (ho, wo) = checked_output_size(layer, x, window)?;
    let (n, c) = (x.dims()[0], x.dims()[1]);
    let (k, s, d) = (window.kernel, window.stride, window.dilation);
    if window.is_identity() {
        return Ok((x.reshape((n, c, 1, ho * wo))?, (ho, wo)));
    }
    let phases = phase_split(x, window, pad_value)?;
    let mut taps = Vec::with_capacity(k.0 * k.1);
    for i in 0..k.0 {
        // Shared by the row's taps, so that autograd sums their gradients at this size.
        let rows = phases.narrow(2, i * d.0 / s.0, ho)?.narrow(3, i * d.0 % s.0, 1)?;
        for j in 0..k.1 {
            let tap = rows.narrow(4, j * d.1 / s.1, wo)?.narrow(5, j * d.1 % s.1, 1)?;
            taps.push(tap.squeeze(5)?.squeeze(3)?.unsqueeze(2)?);
        }
    }
    Ok((Tensor::cat(&taps, 2)?.reshape((n, c, k.0 * k.1, ho * wo))?, (ho, wo)))
}

/// For windows that tile the input (stride = kernel, no dilation): a view
/// `[N, C, Ho, kh, Wo, kw]` of the padded input, without any copy; `None` for other windows.
pub(crate) fn tiles2d(layer: &'static str, x: &Tensor, window: &Window2d, pad_value: f64) -> Result<Option<Tensor>> {
    let (ho, wo) = checked_output_size(layer, x, window)?;
    if window.stride != window.kernel || window.dilation != (1, 1) {
        return Ok(None);
    }
    Ok(Some(phase_split(x, window, pad_value)?.narrow(2, 0, ho)?.narrow(4, 0, wo)?))
}

/// Pads the last two dims of `x` (rank >= 2) with `value`: `top` and `bottom` rows,
/// `left` and `right` columns, like `torch.nn.functional.pad(x, (left, right, top, bottom))`.
pub fn pad2d(x: &Tensor, (top, bottom, left, right): (usize, usize, usize, usize), value: f64) -> Result<Tensor> {
    if x.rank() < 2 {
        return Err(Error::RankMismatch { op: "pad2d", expected: 2, got: x.rank(), shape: x.shape().clone() });
    }
    let band = |x: &Tensor, dim: usize, before: usize, after: usize| -> Result<Tensor> {
        if before == 0 && after == 0 {
            return Ok(x.clone());
        }
        let filled = |len: usize| {
            let mut shape = x.dims().to_vec();
            shape[dim] = len;
            Tensor::full(value, shape, x.dtype(), x.device())
        };
        let mut parts = Vec::with_capacity(3);
        if before > 0 {
            parts.push(filled(before)?);
        }
        parts.push(x.clone());
        if after > 0 {
            parts.push(filled(after)?);
        }
        Tensor::cat(&parts, dim)
    };
    let rank = x.rank();
    band(&band(x, rank - 1, left, right)?, rank - 2, top, bottom)
}

/// Options of a `Conv2d` besides its channels and kernel; the defaults are PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dConfig {
    pub stride: (usize, usize),
    /// Zero padding added on both sides of each spatial dim.
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
    /// Input and output channels are split into this many independent groups.
    pub groups: usize,
    pub bias: bool,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Conv2dConfig { stride: (1, 1), padding: (0, 0), dilation: (1, 1), groups: 1, bias: true }
    }
}

/// 2-D convolution (cross-correlation, as in PyTorch) over `[N, C, H, W]` inputs, with
/// weight `[out, in / groups, kh, kw]` and bias `[out]`.
#[derive(Clone, Debug)]
pub struct Conv2d {
    weight: Tensor,
    bias: Option<Tensor>,
    config: Conv2dConfig,
}

impl Conv2d {
    /// PyTorch's default initialization: weight and bias U(±1/sqrt(fan_in)), with
    /// fan_in = in / groups * kh * kw.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: (usize, usize),
        config: Conv2dConfig,
        vb: &mut VarBuilder,
    ) -> Result<Self> {
        let g = config.groups;
        if in_channels == 0 || out_channels == 0 {
            let msg = format!("in_channels {in_channels} and out_channels {out_channels} must be > 0");
            return Err(bad_config("Conv2d", msg));
        }
        if g == 0 || in_channels % g != 0 || out_channels % g != 0 {
            let msg = format!("groups {g} must divide in_channels {in_channels} and out_channels {out_channels}");
            return Err(bad_config("Conv2d", msg));
        }
        window(kernel, &config).validate("Conv2d")?;
        let fan_in = (in_channels / g).saturating_mul(kernel.0).saturating_mul(kernel.1);
        let weight = vb.var(&[out_channels, in_channels / g, kernel.0, kernel.1], Init::FanInUniform)?;
        let bias = match config.bias {
            true => Some(vb.var_with_fan_in(&[out_channels], Init::FanInUniform, fan_in)?),
            false => None,
        };
        Ok(Conv2d { weight, bias, config })
    }

    /// A layer from existing tensors: weight `[out, in / groups, kh, kw]`, bias `[out]`.
    /// `config.bias` is ignored: the layer has a bias when one is given.
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>, config: Conv2dConfig) -> Result<Self> {
        let [out, _, kh, kw] = *weight.dims() else {
            let shape = weight.shape().clone();
            return Err(Error::RankMismatch { op: "Conv2d", expected: 4, got: weight.rank(), shape });
        };
        if config.groups == 0 || out % config.groups != 0 {
            let msg = format!("groups {} must divide out_channels {out}", config.groups);
            return Err(bad_config("Conv2d", msg));
        }
        if let Some(b) = &bias {
            if b.dims() != [out] {
                return Err(Error::ShapeMismatch { op: "Conv2d", lhs: weight.shape().clone(), rhs: b.shape().clone() });
            }
        }
        window((kh, kw), &config).validate("Conv2d")?;
        let config = Conv2dConfig { bias: bias.is_some(), ..config };
        Ok(Conv2d { weight, bias, config })
    }

    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    pub fn config(&self) -> &Conv2dConfig {
        &self.config
    }

    pub fn in_channels(&self) -> usize {
        self.weight.dims()[1] * self.config.groups
    }

    pub fn out_channels(&self) -> usize {
        self.weight.dims()[0]
    }

    pub fn kernel(&self) -> (usize, usize) {
        (self.weight.dims()[2], self.weight.dims()[3])
    }
}

fn window(kernel: (usize, usize), config: &Conv2dConfig) -> Window2d {
    Window2d { kernel, stride: config.stride, padding: config.padding, dilation: config.dilation }
}

impl Module for Conv2d {
    /// `[N, in, H, W] -> [N, out, Ho, Wo]`.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        expect_nchw("Conv2d", xs)?;
        let (in_channels, out_channels, g) = (self.in_channels(), self.out_channels(), self.config.groups);
        if xs.dims()[1] != in_channels {
            let msg = format!("expected {in_channels} input channels, got input of shape {:?}", xs.shape());
            return Err(Error::invalid("Conv2d", msg));
        }
        let (cols, (ho, wo)) = unfold2d("Conv2d", xs, &window(self.kernel(), &self.config), 0.0)?;
        let n = xs.dims()[0];
        let (taps, positions) = (cols.dims()[2], cols.dims()[3]);
        // [N, C, taps, L] -> [N, G, C/G * taps, L]: the rows one group's weights multiply.
        let cols = cols.reshape((n, g, in_channels / g * taps, positions))?;
        let w = self.weight.reshape((g, out_channels / g, in_channels / g * taps))?;
        // [G, out/G, K] @ [N, G, K, L] -> [N, G, out/G, L], already in NCHW order.
        let mut y = w.matmul(&cols)?.reshape((n, out_channels, ho, wo))?;
        if let Some(b) = &self.bias {
            y = y.add(&b.reshape((1, out_channels, 1, 1))?)?;
        }
        Ok(y)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        v.extend(self.bias.iter().map(|b| ("bias".to_string(), b.clone())));
        v
    }
}

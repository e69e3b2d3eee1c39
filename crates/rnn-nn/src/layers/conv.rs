//! 2-D convolution through the fused `Tensor::conv2d` (direct im2col + gemm kernels on the
//! CPU, `unfold2d` and a batched matmul elsewhere), with an optional fused activation, and
//! the input checks it shares with the pooling layers.

use rnn_core::{Epilogue, Error, Result, Tensor, Window2d};

use crate::init::bad_config;
use crate::{Init, Module, VarBuilder};

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
    activation: Epilogue,
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
        Ok(Conv2d { weight, bias, config, activation: Epilogue::None })
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
        Ok(Conv2d { weight, bias, config, activation: Epilogue::None })
    }

    /// The same layer followed by `activation`, fused into its forward:
    /// `act(conv2d(x, W) + b)` without a separate activation pass (same values and gradients
    /// as applying it after).
    pub fn with_activation(self, activation: Epilogue) -> Self {
        Conv2d { activation, ..self }
    }

    pub fn activation(&self) -> Epilogue {
        self.activation
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
        if rnn_core::autocast::is_active() {
            // Input, weight and bias in the autocast dtype, as one op (the bias add and the fused activation too).
            let inputs: Vec<&Tensor> = [xs, &self.weight].into_iter().chain(self.bias.as_ref()).collect();
            return rnn_core::autocast::autocast_op(rnn_core::AutocastOp::Conv2d, &inputs, |t| {
                Conv2d {
                    weight: t[1].clone(),
                    bias: t.get(2).cloned(),
                    config: self.config,
                    activation: self.activation,
                }
                .forward(&t[0])
            });
        }
        expect_nchw("Conv2d", xs)?;
        let (in_channels, g) = (self.in_channels(), self.config.groups);
        if xs.dims()[1] != in_channels {
            let msg = format!("expected {in_channels} input channels, got input of shape {:?}", xs.shape());
            return Err(Error::invalid("Conv2d", msg));
        }
        let window = window(self.kernel(), &self.config);
        // Checked here too so that a bad geometry is reported under the layer's name.
        window.output_size("Conv2d", (xs.dims()[2], xs.dims()[3]))?;
        xs.conv2d(&self.weight, self.bias.as_ref(), &window, g, self.activation)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        v.extend(self.bias.iter().map(|b| ("bias".to_string(), b.clone())));
        v
    }
}

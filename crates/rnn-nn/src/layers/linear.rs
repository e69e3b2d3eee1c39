//! Dense / Linear: y = x Wᵀ + b, with W stored `[out, in]` as in PyTorch; optionally with a
//! fused ReLU or GELU (`Tensor::linear`: one cuBLASLt call with an epilogue on CUDA).

use rnn_core::{Epilogue, Result, Tensor};

use crate::{Init, Module, VarBuilder};

pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
    activation: Epilogue,
}

/// Keras' name for the same layer.
pub type Dense = Linear;

impl Linear {
    /// PyTorch's default initialization: U(±1/sqrt(in)) for weight and bias.
    pub fn new(in_features: usize, out_features: usize, vb: &mut VarBuilder) -> Result<Self> {
        Self::with_init(in_features, out_features, Init::FanInUniform, true, vb)
    }

    pub fn with_init(
        in_features: usize,
        out_features: usize,
        init: Init,
        bias: bool,
        vb: &mut VarBuilder,
    ) -> Result<Self> {
        if in_features == 0 || out_features == 0 {
            let msg = format!("in_features {in_features} and out_features {out_features} must be > 0");
            return Err(crate::init::bad_config("Linear", msg));
        }
        let weight = vb.var(&[out_features, in_features], init)?;
        let bias = match bias {
            true => Some(vb.var_with_fan_in(&[out_features], Init::FanInUniform, in_features)?),
            false => None,
        };
        Ok(Linear { weight, bias, activation: Epilogue::None })
    }

    /// A layer from existing tensors: weight `[out, in]`, bias `[out]`.
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Self {
        Linear { weight, bias, activation: Epilogue::None }
    }

    /// The same layer followed by `activation`, fused into its forward: `act(x Wᵀ + b)`
    /// without a separate activation pass (same values and gradients as applying it after).
    pub fn with_activation(self, activation: Epilogue) -> Self {
        Linear { activation, ..self }
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
}

impl Module for Linear {
    /// `xs` is `[..., in]`; leading dims are flattened for one matmul and restored.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let dims = xs.dims().to_vec();
        let x2 = match dims.len() {
            2 => xs.clone(),
            _ => xs.reshape(((dims.iter().rev().skip(1).product::<usize>()), *dims.last().unwrap_or(&0)))?,
        };
        let y = x2.linear(&self.weight, self.bias.as_ref(), self.activation)?;
        match dims.len() {
            2 => Ok(y),
            _ => {
                let mut out = dims;
                if let Some(last) = out.last_mut() {
                    *last = self.weight.dims()[0];
                }
                y.reshape(out)
            }
        }
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        v.extend(self.bias.iter().map(|b| ("bias".to_string(), b.clone())));
        v
    }
}

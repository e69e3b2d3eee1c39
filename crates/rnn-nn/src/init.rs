//! Parameter initialization: `Init` says how, `VarBuilder` makes the tensors (on one device,
//! in one dtype, from one seeded generator, so a model built twice with a seed is identical).

use rand::rngs::StdRng;
use rand::SeedableRng;
use rnn_core::{DType, Device, Error, Result, Tensor};

/// How a parameter's initial values are drawn. Fans follow PyTorch: for a weight of shape
/// `[out, in, k...]`, fan_in = in * prod(k) and fan_out = out * prod(k).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    Zeros,
    Ones,
    Constant(f64),
    Uniform {
        lo: f64,
        hi: f64,
    },
    Normal {
        mean: f64,
        std: f64,
    },
    /// Glorot: U(±gain·sqrt(6 / (fan_in + fan_out))).
    XavierUniform {
        gain: f64,
    },
    /// Glorot: N(0, gain·sqrt(2 / (fan_in + fan_out))).
    XavierNormal {
        gain: f64,
    },
    /// He, fan_in mode: U(±gain·sqrt(3 / fan_in)); gain sqrt(2) suits ReLU.
    KaimingUniform {
        gain: f64,
    },
    /// He, fan_in mode: N(0, gain / sqrt(fan_in)).
    KaimingNormal {
        gain: f64,
    },
    /// PyTorch's default for Linear/Conv weights and biases: U(±1/sqrt(fan_in)).
    FanInUniform,
}

impl Init {
    pub const XAVIER: Init = Init::XavierUniform { gain: 1.0 };
    pub const HE: Init = Init::KaimingNormal { gain: std::f64::consts::SQRT_2 };
}

/// (fan_in, fan_out) of a weight shape, as PyTorch computes them.
pub fn fans(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [n] => (*n, *n),
        [out, inp, rest @ ..] => {
            let field: usize = rest.iter().product();
            (inp * field, out * field)
        }
    }
}

/// Creates parameters: tensors that track gradients, on `device`, in `dtype`.
pub struct VarBuilder {
    device: Device,
    dtype: DType,
    rng: StdRng,
}

impl VarBuilder {
    pub fn new(device: Device, dtype: DType, seed: u64) -> Self {
        VarBuilder { device, dtype, rng: StdRng::seed_from_u64(seed) }
    }

    /// f32 parameters on the CPU.
    pub fn cpu(seed: u64) -> Self {
        Self::new(Device::Cpu, DType::F32, seed)
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// A new parameter (tracks gradients) of `shape`, initialized by `init`.
    pub fn var(&mut self, shape: &[usize], init: Init) -> Result<Tensor> {
        Ok(self.tensor(shape, init, fans(shape).0)?.requires_grad())
    }

    /// Like `var`, with the fan_in given (biases use their weight's fan_in).
    pub fn var_with_fan_in(&mut self, shape: &[usize], init: Init, fan_in: usize) -> Result<Tensor> {
        Ok(self.tensor(shape, init, fan_in)?.requires_grad())
    }

    /// A non-trainable tensor (a buffer) filled with `value`.
    pub fn buffer(&self, shape: &[usize], value: f64) -> Result<Tensor> {
        Tensor::full(value, shape, self.dtype, self.device)
    }

    fn tensor(&mut self, shape: &[usize], init: Init, fan_in: usize) -> Result<Tensor> {
        let (_, fan_out) = fans(shape);
        let (d, dt, rng) = (self.device, self.dtype, &mut self.rng);
        let fan_in = fan_in.max(1) as f64;
        let uniform = |rng: &mut StdRng, bound: f64| Tensor::rand_with(rng, -bound, bound, shape, dt, d);
        match init {
            Init::Zeros => Tensor::zeros(shape, dt, d),
            Init::Ones => Tensor::ones(shape, dt, d),
            Init::Constant(v) => Tensor::full(v, shape, dt, d),
            Init::Uniform { lo, hi } => Tensor::rand_with(rng, lo, hi, shape, dt, d),
            Init::Normal { mean, std } => Tensor::randn_with(rng, mean, std, shape, dt, d),
            Init::XavierUniform { gain } => uniform(rng, gain * (6.0 / (fan_in + fan_out as f64)).sqrt()),
            Init::XavierNormal { gain } => {
                Tensor::randn_with(rng, 0.0, gain * (2.0 / (fan_in + fan_out as f64)).sqrt(), shape, dt, d)
            }
            Init::KaimingUniform { gain } => uniform(rng, gain * (3.0 / fan_in).sqrt()),
            Init::KaimingNormal { gain } => Tensor::randn_with(rng, 0.0, gain / fan_in.sqrt(), shape, dt, d),
            Init::FanInUniform => uniform(rng, 1.0 / fan_in.sqrt()),
        }
    }
}

/// The error for a layer built with a bad configuration.
pub(crate) fn bad_config(layer: &'static str, msg: impl Into<String>) -> Error {
    Error::invalid(layer, msg)
}

//! Finite-difference gradient checking, like `torch.autograd.gradcheck`: compares the
//! gradients autograd computes for `f` with central differences. Use f64 CPU inputs.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{no_grad, DType, Device, Error, Result, Tensor};

/// Step and tolerance of a check; the defaults suit smooth f64 functions of moderate size.
#[derive(Clone, Copy, Debug)]
pub struct GradCheck {
    pub step: f64,
    /// Allowed `|analytic - numeric| / max(1, |numeric|)`.
    pub tolerance: f64,
    pub seed: u64,
}

impl Default for GradCheck {
    fn default() -> Self {
        GradCheck { step: 1e-6, tolerance: 1e-5, seed: 0 }
    }
}

impl GradCheck {
    /// Checks d(sum(f(inputs) * w))/d(input) for every input, `w` fixed random weights (so the
    /// upstream gradient is not all ones). Returns the largest error found, or an
    /// `Error::Backward` naming the input and element whose gradient is wrong.
    pub fn run(&self, inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<f64> {
        let inputs: Vec<Tensor> = inputs.iter().map(|t| t.detach().requires_grad()).collect();
        for t in &inputs {
            if t.dtype() != DType::F64 || t.device() != Device::Cpu {
                return Err(Error::invalid("gradcheck", "inputs must be f64 tensors on the CPU"));
            }
        }
        let out = f(&inputs)?;
        let mut rng = StdRng::seed_from_u64(self.seed);
        let w: Vec<f64> = (0..out.elem_count()).map(|_| rng.random_range(0.5..1.5)).collect();
        let w = Tensor::from_vec(w, out.dims(), Device::Cpu)?;
        let grads = out.mul(&w)?.sum_all()?.backward()?;
        let loss_at = |i: usize, values: Vec<f64>| -> Result<f64> {
            let mut xs: Vec<Tensor> = inputs.iter().map(|t| t.detach()).collect();
            xs[i] = Tensor::from_vec(values, inputs[i].dims(), Device::Cpu)?;
            no_grad(|| f(&xs)?.mul(&w)?.sum_all()?.to_scalar::<f64>())
        };
        let mut worst: f64 = 0.0;
        for (i, input) in inputs.iter().enumerate() {
            let analytic = match grads.get(input) {
                Some(g) => g.to_vec::<f64>()?,
                None => vec![0.0; input.elem_count()],
            };
            let x = input.to_vec::<f64>()?;
            for (j, &a) in analytic.iter().enumerate() {
                let mut plus = x.clone();
                plus[j] += self.step;
                let mut minus = x.clone();
                minus[j] -= self.step;
                let numeric = (loss_at(i, plus)? - loss_at(i, minus)?) / (2.0 * self.step);
                let err = (a - numeric).abs() / numeric.abs().max(1.0);
                // NaN errors fail too.
                if err.is_nan() || err > self.tolerance {
                    return Err(Error::Backward {
                        msg: format!("gradcheck: input {i} element {j}: autograd {a}, finite difference {numeric}"),
                    });
                }
                worst = worst.max(err);
            }
        }
        Ok(worst)
    }
}

//! Linear with a fused activation (`Linear::with_activation`, one `Tensor::linear` op) gives
//! the values and gradients of the plain layer followed by the activation, for inputs of any
//! rank; and its gradients pass a finite-difference check.

use rand::rngs::StdRng;
use rand::SeedableRng;
use rnn_core::gradcheck::GradCheck;
use rnn_core::{DType, Device, Epilogue, Result, Tensor};
use rnn_nn::{Activation, Linear, Module};

fn rand64(seed: u64, shape: &[usize]) -> Result<Tensor> {
    Tensor::rand_with(&mut StdRng::seed_from_u64(seed), -1.0, 1.0, shape, DType::F64, Device::Cpu)
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    a.sub(b)?.abs()?.max_all()?.to_f64_scalar()
}

#[test]
fn fused_activation_matches_layer_then_activation() -> Result<()> {
    let cases = [
        (Epilogue::None, Activation::Identity),
        (Epilogue::Relu, Activation::Relu),
        (Epilogue::Gelu, Activation::Gelu),
    ];
    for (fused, separate) in cases {
        for (bias, x_dims) in [(true, vec![4, 3, 5]), (false, vec![6, 5]), (true, vec![5])] {
            let w = rand64(1, &[7, 5])?.requires_grad();
            let b = bias.then(|| rand64(2, &[7]).map(|b| b.requires_grad())).transpose()?;
            let x = rand64(3, &x_dims)?.requires_grad();
            let plain = Linear::from_tensors(w.clone(), b.clone());
            let want = separate.apply(&plain.forward(&x)?)?;
            let got = Linear::from_tensors(w.clone(), b.clone()).with_activation(fused).forward(&x)?;
            assert_eq!(got.dims(), want.dims());
            assert!(max_abs_diff(&got, &want)? < 1e-12, "{fused:?} {x_dims:?}: values");
            // Weighted sums, so every output's gradient differs.
            let weights = rand64(4, got.dims())?;
            let (g_got, g_want) =
                (got.mul(&weights)?.sum_all()?.backward()?, want.mul(&weights)?.sum_all()?.backward()?);
            for t in [Some(&x), Some(&w), b.as_ref()].into_iter().flatten() {
                let (a, e) = (g_got.get(t).expect("gradient"), g_want.get(t).expect("gradient"));
                assert!(max_abs_diff(a, e)? < 1e-12, "{fused:?} {x_dims:?}: gradient of {:?}", t.dims());
            }
        }
    }
    Ok(())
}

#[test]
fn fused_linear_gradcheck() -> Result<()> {
    for act in Epilogue::ALL {
        let inputs = [rand64(5, &[2, 3, 4])?, rand64(6, &[3, 4])?, rand64(7, &[3])?];
        let worst = GradCheck::default().run(&inputs, |t| {
            Linear::from_tensors(t[1].clone(), Some(t[2].clone())).with_activation(*act).forward(&t[0])
        })?;
        assert!(worst < 1e-5, "{act:?}: gradcheck error {worst}");
    }
    Ok(())
}

//! Linear with a fused activation (`Linear::with_activation`, one `Tensor::linear` op) gives
//! the values and gradients of the plain layer followed by the activation, for inputs of any
//! rank; and its gradients pass a gradient check. Every test runs on every device.

use rnn_core::{Device, Epilogue, Result};
use rnn_nn::{Activation, Linear, Module};
use rnn_testutil::{assert_close_on, check_gradients, rand64, random, test_device, tolerance, widest_float};

fn fused_activation_matches_layer_then_activation(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    // The fused op and the composition round differently only in f32 (GPU epilogues).
    let tol = tolerance(dtype).op;
    let cases = [
        (Epilogue::None, Activation::Identity),
        (Epilogue::Relu, Activation::Relu),
        (Epilogue::Gelu, Activation::Gelu),
    ];
    let rand = |seed, shape: &[usize]| random(seed, shape, dtype, device);
    for (fused, separate) in cases {
        for (bias, x_dims) in [(true, vec![4, 3, 5]), (false, vec![6, 5]), (true, vec![5])] {
            let w = rand(1, &[7, 5])?.requires_grad();
            let b = bias.then(|| rand(2, &[7]).map(|b| b.requires_grad())).transpose()?;
            let x = rand(3, &x_dims)?.requires_grad();
            let plain = Linear::from_tensors(w.clone(), b.clone());
            let want = separate.apply(&plain.forward(&x)?)?;
            let got = Linear::from_tensors(w.clone(), b.clone()).with_activation(fused).forward(&x)?;
            assert_close_on(&format!("{fused:?} {x_dims:?}: values"), &got, &want, tol);
            // Weighted sums, so every output's gradient differs.
            let weights = rand(4, got.dims())?;
            let (g_got, g_want) =
                (got.mul(&weights)?.sum_all()?.backward()?, want.mul(&weights)?.sum_all()?.backward()?);
            for t in [Some(&x), Some(&w), b.as_ref()].into_iter().flatten() {
                let (a, e) = (g_got.get(t).expect("gradient"), g_want.get(t).expect("gradient"));
                assert_close_on(&format!("{fused:?} {x_dims:?}: gradient of {:?}", t.dims()), a, e, tol);
            }
        }
    }
    Ok(())
}
test_device!(fused_activation_matches_layer_then_activation_test, fused_activation_matches_layer_then_activation);

fn fused_linear_gradcheck(device: Device) -> Result<()> {
    for act in Epilogue::ALL {
        let inputs = [rand64(5, &[2, 3, 4])?, rand64(6, &[3, 4])?, rand64(7, &[3])?];
        check_gradients(device, &inputs, |t| {
            Linear::from_tensors(t[1].clone(), Some(t[2].clone())).with_activation(*act).forward(&t[0])
        })?;
    }
    Ok(())
}
test_device!(fused_linear_gradcheck_test, fused_linear_gradcheck);

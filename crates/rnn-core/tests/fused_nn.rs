//! Fused LayerNorm, RMSNorm, softmax-cross-entropy and bias + GELU on every device: each
//! against its composition of primitives in f64 on the CPU (output and the gradient of every
//! input, on fresh random inputs, in each float dtype the device has), f64 finite-difference
//! gradient checks of the fused ops on the CPU, NaN / infinite rows, ReLU's gradient at NaN
//! and zero (PyTorch's `threshold_backward`), bad arguments, and PyTorch's values
//! (`tests/golden/fused_nn.json`, from `tests/golden/make_fused_nn.py`).

use rnn_core::op_table::{CmpOp, UnaryOp};
use rnn_core::{DType, Device, Epilogue, Error, Result, Tensor};
use rnn_testutil::golden;
use rnn_testutil::{
    check_gradients, diff_summary, floats, like, max_rel_err, rand64, test_device, tol_on, tolerance, values,
};

/// An op of the tested family, run on tensors of any dtype and device.
type Op<'a> = dyn Fn(&[Tensor]) -> Result<Tensor> + 'a;

/// The output and the gradients of `sum(f(inputs) * w)` with respect to the float inputs,
/// with `w` fixed weights in [0.5, 1.5).
fn run(f: &Op<'_>, inputs: &[Tensor]) -> Result<(Vec<f64>, Vec<Vec<f64>>)> {
    let leaves: Vec<Tensor> =
        inputs.iter().map(|t| if t.dtype().is_float() { t.detach().requires_grad() } else { t.clone() }).collect();
    let out = f(&leaves)?;
    let w = rnn_testutil::uniform(7, out.dims(), 0.5, 1.5)?;
    let grads = out.mul(&like(&w, &out)?)?.sum_all()?.backward()?;
    let grads = leaves.iter().filter(|t| t.dtype().is_float()).map(|t| grads.get(t).map(values).unwrap_or_default());
    Ok((values(&out), grads.collect()))
}

/// Runs `fused` on `device` in each float dtype it has and compares the output and the
/// gradients with `composed` on the CPU in f64, on the same (f64 CPU) inputs.
fn fused_matches_composition(device: Device, inputs: &[Tensor], fused: &Op<'_>, composed: &Op<'_>) -> Result<()> {
    let (want, want_grads) = run(composed, inputs)?;
    for dtype in floats(device) {
        let moved: Vec<Tensor> = inputs
            .iter()
            .map(|t| if t.dtype().is_float() { t.to_dtype(dtype)?.to_device(device) } else { t.to_device(device) })
            .collect::<Result<_>>()?;
        let (got, grads) = run(fused, &moved)?;
        // Half types round the inputs and the result: compare against a looser bound.
        let tol = tol_on(device, tolerance(dtype).grad) * if dtype.size_in_bytes() == 2 { 4.0 } else { 1.0 };
        let e = max_rel_err(&got, &want);
        assert!(e <= tol, "{dtype} on {device}: output off by {e:.2e} > {tol:.1e}: {}", diff_summary(&got, &want));
        for (i, (g, w)) in grads.iter().zip(&want_grads).enumerate() {
            let e = max_rel_err(g, w);
            assert!(e <= tol, "{dtype} on {device}: gradient {i} off by {e:.2e} > {tol:.1e}: {}", diff_summary(g, w));
        }
    }
    Ok(())
}

// ---- compositions of primitives (the references) ----

fn layer_norm_composed(x: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let centered = x.sub(&x.mean_keepdim(-1)?)?;
    let var = centered.sqr()?.mean_keepdim(-1)?;
    let mut y = centered.div(&var.add_scalar(eps)?.sqrt()?)?;
    if let Some(w) = w {
        y = y.mul(w)?;
    }
    match b {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}

fn rms_norm_composed(x: &Tensor, w: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let y = x.div(&x.sqr()?.mean_keepdim(-1)?.add_scalar(eps)?.sqrt()?)?;
    match w {
        Some(w) => y.mul(w),
        None => Ok(y),
    }
}

/// `-(1 - s) log p[t] - s mean(log p)` per row, 0 where the id is `ignore`.
fn cross_entropy_composed(x: &Tensor, ids: &Tensor, s: f64, ignore: Option<i64>) -> Result<Tensor> {
    let ids = ids.to_dtype(DType::I64)?;
    let logp = x.log_softmax(-1)?;
    let ignored = Tensor::full(ignore.unwrap_or(-1) as f64, ids.dims(), DType::I64, ids.device())?;
    let keep = ids.cmp(&ignored, CmpOp::Ne)?;
    let safe = ids.mul(&keep.to_dtype(DType::I64)?)?;
    let picked = logp.gather(&safe.unsqueeze(1)?, 1)?.squeeze(1)?;
    let mut loss = picked.mul_scalar(-(1.0 - s))?;
    if s > 0.0 {
        // Only with smoothing: 0 * mean(log p) is NaN where a logit is -inf.
        loss = loss.sub(&logp.mean(-1)?.mul_scalar(s)?)?;
    }
    loss.mul(&keep.to_dtype(x.dtype())?)
}

// ---- the tests ----

fn norms_match_composition(device: Device) -> Result<()> {
    for (seed, shape) in [(1u64, &[5usize, 7][..]), (2, &[2, 3, 300])] {
        let n = shape[shape.len() - 1];
        let x = rand64(seed, shape)?.mul_scalar(3.0)?.add_scalar(0.5)?;
        let (w, b) = (rand64(seed + 10, &[n])?, rand64(seed + 20, &[n])?);
        let eps = 1e-5;
        fused_matches_composition(
            device,
            &[x.clone(), w.clone(), b.clone()],
            &|t| t[0].layer_norm(Some(&t[1]), Some(&t[2]), eps),
            &|t| layer_norm_composed(&t[0], Some(&t[1]), Some(&t[2]), eps),
        )?;
        fused_matches_composition(
            device,
            &[x.clone(), w.clone()],
            &|t| t[0].layer_norm(Some(&t[1]), None, eps),
            &|t| layer_norm_composed(&t[0], Some(&t[1]), None, eps),
        )?;
        fused_matches_composition(
            device,
            &[x.clone(), b.clone()],
            &|t| t[0].layer_norm(None, Some(&t[1]), eps),
            &|t| layer_norm_composed(&t[0], None, Some(&t[1]), eps),
        )?;
        fused_matches_composition(device, std::slice::from_ref(&x), &|t| t[0].layer_norm(None, None, eps), &|t| {
            layer_norm_composed(&t[0], None, None, eps)
        })?;
        fused_matches_composition(device, &[x.clone(), w.clone()], &|t| t[0].rms_norm(Some(&t[1]), Some(eps)), &|t| {
            rms_norm_composed(&t[0], Some(&t[1]), eps)
        })?;
        fused_matches_composition(device, std::slice::from_ref(&x), &|t| t[0].rms_norm(None, Some(eps)), &|t| {
            rms_norm_composed(&t[0], None, eps)
        })?;
    }
    // A transposed (non-contiguous) input.
    let x = rand64(5, &[6, 4])?.t()?;
    let w = rand64(6, &[6])?;
    fused_matches_composition(device, &[x, w], &|t| t[0].layer_norm(Some(&t[1]), None, 1e-5), &|t| {
        layer_norm_composed(&t[0], Some(&t[1]), None, 1e-5)
    })
}
test_device!(norms_match_composition_test, norms_match_composition);

fn ids(v: &[i64], dtype: DType) -> Result<Tensor> {
    Tensor::from_vec(v.to_vec(), v.len(), Device::Cpu)?.to_dtype(dtype)
}

fn cross_entropy_matches_composition(device: Device) -> Result<()> {
    for (rows, classes, seed) in [(6usize, 5usize, 1u64), (3, 700, 2)] {
        let x = rand64(seed, &[rows, classes])?.mul_scalar(4.0)?;
        let raw: Vec<i64> = (0..rows as i64).map(|i| (i * 7 + 3) % classes as i64).collect();
        for id_dtype in [DType::U32, DType::I64] {
            let t = ids(&raw, id_dtype)?;
            for s in [0.0, 0.2] {
                fused_matches_composition(
                    device,
                    &[x.clone(), t.clone()],
                    &|a| a[0].cross_entropy_logits(&a[1], s, None),
                    &|a| cross_entropy_composed(&a[0], &a[1], s, None),
                )?;
            }
        }
        // Ignored rows: loss 0, gradient 0.
        let mut with_ignored = raw.clone();
        with_ignored[1] = -100;
        let t = ids(&with_ignored, DType::I64)?;
        fused_matches_composition(
            device,
            &[x.clone(), t],
            &|a| a[0].cross_entropy_logits(&a[1], 0.1, Some(-100)),
            &|a| cross_entropy_composed(&a[0], &a[1], 0.1, Some(-100)),
        )?;
    }
    Ok(())
}
test_device!(cross_entropy_matches_composition_test, cross_entropy_matches_composition);

fn bias_gelu_matches_composition(device: Device) -> Result<()> {
    let x = rand64(1, &[3, 4, 9])?.mul_scalar(3.0)?;
    let b = rand64(2, &[9])?;
    for (tanh, op) in [(true, UnaryOp::Gelu), (false, UnaryOp::GeluErf)] {
        fused_matches_composition(device, &[x.clone(), b.clone()], &|t| t[0].bias_gelu(&t[1], tanh), &|t| {
            t[0].add(&t[1])?.unary(op)
        })?;
    }
    Ok(())
}
test_device!(bias_gelu_matches_composition_test, bias_gelu_matches_composition);

/// Finite differences on the CPU (f64), and the device's f32 (f64 where it has it) against
/// them, through `check_gradients`.
fn fused_gradients(device: Device) -> Result<()> {
    let x = rand64(3, &[4, 6])?;
    let (w, b) = (rand64(4, &[6])?, rand64(5, &[6])?);
    check_gradients(device, &[x.clone(), w.clone(), b.clone()], |t| t[0].layer_norm(Some(&t[1]), Some(&t[2]), 1e-5))?;
    check_gradients(device, &[x.clone(), w.clone()], |t| t[0].rms_norm(Some(&t[1]), None))?;
    check_gradients(device, &[x.clone(), b.clone()], |t| t[0].bias_gelu(&t[1], true))?;
    check_gradients(device, &[x.clone(), b], |t| t[0].bias_gelu(&t[1], false))?;
    let targets = ids(&[0, 5, -100, 2], DType::I64)?;
    check_gradients(device, &[x], |t| t[0].cross_entropy_logits(&like(&targets, &t[0])?, 0.15, Some(-100)))
}
test_device!(fused_gradients_test, fused_gradients);

/// NaN and infinities stay in their rows, as in PyTorch.
fn special_values(device: Device) -> Result<()> {
    let dtype = DType::F32;
    let data = [1.0, 2.0, 3.0, f64::NAN, 1.0, 2.0, 1.0, f64::INFINITY, 0.5, -1.0, 0.0, 2.0];
    let x = Tensor::from_vec(data.to_vec(), (4, 3), Device::Cpu)?.to_dtype(dtype)?.to_device(device)?;
    let y = values(&x.layer_norm(None, None, 1e-5)?);
    assert!(y[..3].iter().all(|v| v.is_finite()), "{y:?}");
    assert!(y[3..9].iter().all(|v| v.is_nan()), "a NaN or inf row normalizes to NaN: {y:?}");
    assert!(y[9..].iter().all(|v| v.is_finite()), "{y:?}");
    let r = values(&x.rms_norm(None, None)?);
    assert!(r[3..6].iter().all(|v| v.is_nan()) && r[9..].iter().all(|v| v.is_finite()), "{r:?}");
    // Cross entropy: a NaN logit makes its row NaN; a -inf logit of another class is fine
    // (probability 0); +inf on the target gives NaN (inf - inf), as PyTorch does.
    let t = Tensor::from_vec(vec![0u32, 1, 0, 2], 4, device)?;
    let logits = Tensor::from_vec(
        vec![1.0f32, f32::NEG_INFINITY, 0.5, f32::NAN, 1.0, 2.0, f32::INFINITY, 0.0, 1.0, 0.0, 1.0, 2.0],
        (4, 3),
        Device::Cpu,
    )?
    .to_device(device)?;
    let loss = values(&logits.cross_entropy_logits(&t, 0.0, None)?);
    let want = composed_values(&logits, &t)?;
    assert!(max_rel_err(&loss, &want) < 1e-5, "{loss:?} vs {want:?}");
    Ok(())
}
test_device!(special_values_test, special_values);

/// ReLU's gradient is PyTorch's `threshold_backward`: 0 where the input is <= 0 (-0 too),
/// even when the incoming gradient is NaN; a NaN input passes the gradient on. The same
/// through `relu` and through Linear's fused ReLU epilogue.
fn relu_gradient_as_pytorch(device: Device) -> Result<()> {
    let nan = f32::NAN;
    for dtype in floats(device) {
        let on = |v: Vec<f32>| {
            let n = v.len();
            Tensor::from_vec(v, n, Device::Cpu)?.to_dtype(dtype)?.to_device(device)
        };
        let x = on(vec![-1.0, 0.0, -0.0, 2.0, nan, f32::INFINITY, f32::NEG_INFINITY, 3.0])?.requires_grad();
        let g = on(vec![1.0, nan, nan, 4.0, 5.0, nan, 7.0, -2.0])?;
        let grads = x.relu()?.mul(&g)?.sum_all()?.backward()?;
        let dx = values(grads.get(&x).expect("x tracks its gradient"));
        let want = [0.0, 0.0, 0.0, 4.0, 5.0, f64::NAN, 0.0, -2.0];
        assert!(dx.iter().zip(&want).all(|(a, b)| a == b || (a.is_nan() && b.is_nan())), "relu {dtype:?}: {dx:?}");
    }

    // x @ I + 0: the pre-activation is x itself.
    let x = Tensor::from_vec(vec![-1.0f32, 0.0, 2.0, 3.0], (1, 4), device)?.requires_grad();
    let eye: Vec<f32> = (0..16).map(|i| if i % 5 == 0 { 1.0 } else { 0.0 }).collect();
    let w = Tensor::from_vec(eye, (4, 4), device)?;
    let b = Tensor::zeros(4, DType::F32, device)?;
    let g = Tensor::from_vec(vec![nan, nan, 4.0, -2.0], (1, 4), device)?;
    let grads = x.linear(&w, Some(&b), Epilogue::Relu)?.mul(&g)?.sum_all()?.backward()?;
    let dx = values(grads.get(&x).expect("x tracks its gradient"));
    assert_eq!(dx, [0.0, 0.0, 4.0, -2.0], "linear + relu");
    Ok(())
}
test_device!(relu_gradient_as_pytorch_test, relu_gradient_as_pytorch);

fn composed_values(logits: &Tensor, t: &Tensor) -> Result<Vec<f64>> {
    let cpu = |x: &Tensor| x.to_device(Device::Cpu);
    Ok(values(&cross_entropy_composed(&cpu(logits)?.to_dtype(DType::F64)?, &cpu(t)?, 0.0, None)?))
}

fn bad_arguments(device: Device) -> Result<()> {
    let x = rnn_testutil::random(1, &[3, 4], DType::F32, device)?;
    let w5 = rnn_testutil::random(2, &[5], DType::F32, device)?;
    assert!(matches!(x.layer_norm(Some(&w5), None, 1e-5), Err(Error::ShapeMismatch { .. })));
    assert!(x.layer_norm(None, None, f64::NAN).is_err());
    assert!(x.rms_norm(None, Some(-1.0)).is_err());
    let ids_u32 = |v: Vec<u32>| Tensor::from_vec(v, 3, device);
    assert!(x.cross_entropy_logits(&ids_u32(vec![0, 1, 2])?, 1.5, None).is_err());
    assert!(x.cross_entropy_logits(&x, 0.0, None).is_err(), "float targets");
    assert!(x.cross_entropy_logits(&Tensor::from_vec(vec![0u32, 1], 2, device)?, 0.0, None).is_err());
    // An id out of range: at once on the CPU, at the next sync point on a GPU.
    let bad = x.cross_entropy_logits(&ids_u32(vec![0, 4, 1])?, 0.0, None).and_then(|l| l.to_device(Device::Cpu));
    assert!(matches!(&bad, Err(Error::IndexOutOfRange { op: "cross_entropy", index: 4, size: 4, .. })), "{bad:?}");
    let neg = Tensor::from_vec(vec![0i64, -1, 1], 3, device)?;
    let bad = x.cross_entropy_logits(&neg, 0.0, Some(-100)).and_then(|l| l.to_device(Device::Cpu));
    assert!(matches!(&bad, Err(Error::IndexOutOfRange { index: -1, .. })), "{bad:?}");
    assert!(x.bias_gelu(&w5, true).is_err());
    Ok(())
}
test_device!(bad_arguments_test, bad_arguments);

/// Large rows and many rows (the CPU's parallel split) give the same results as small ones
/// computed row by row.
#[test]
fn parallel_rows_match_serial_rows() -> Result<()> {
    let x = rnn_testutil::uniform(9, &[4096, 96], -2.0, 2.0)?.to_dtype(DType::F32)?;
    let w = rand64(10, &[96])?.to_dtype(DType::F32)?;
    let all = values(&x.layer_norm(Some(&w), None, 1e-5)?);
    let row = values(&x.narrow(0, 4000, 1)?.layer_norm(Some(&w), None, 1e-5)?);
    assert_eq!(&all[4000 * 96..4001 * 96], &row[..]);
    // bias + GELU, forward and backward (the gradient of x is the backward kernel's output).
    let x = x.requires_grad();
    let (all, all_dx) = bias_gelu_and_grad(&x, &w)?;
    let (row, row_dx) = bias_gelu_and_grad(&x.narrow(0, 4000, 1)?.detach().requires_grad(), &w)?;
    assert_eq!(&all[4000 * 96..4001 * 96], &row[..]);
    assert_eq!(&all_dx[4000 * 96..4001 * 96], &row_dx[..]);
    Ok(())
}

/// `bias_gelu(x, b)` (tanh) and the gradient of `sum(y * y)` with respect to `x`.
fn bias_gelu_and_grad(x: &Tensor, b: &Tensor) -> Result<(Vec<f64>, Vec<f64>)> {
    let y = x.bias_gelu(b, true)?;
    let grads = y.sqr()?.sum_all()?.backward()?;
    let dx = grads.get(x).ok_or_else(|| Error::Msg("no gradient of x".into()))?;
    Ok((values(&y), values(dx)))
}

/// Under autograd a GELU Linear runs as the product and `bias_gelu` (which keeps the
/// pre-activation for the backward); without, as one fused op: both give the same values.
fn linear_gelu_same_with_and_without_grad(device: Device) -> Result<()> {
    let on = |t: Tensor| t.to_dtype(DType::F32)?.to_device(device);
    let x = on(rnn_testutil::uniform(11, &[5, 7], -2.0, 2.0)?)?;
    let (w, b) = (on(rand64(12, &[6, 7])?)?, on(rand64(13, &[6])?)?);
    let plain = values(&rnn_core::no_grad(|| x.linear(&w, Some(&b), Epilogue::Gelu))?);
    let tracked = values(&x.requires_grad().linear(&w.requires_grad(), Some(&b), Epilogue::Gelu)?);
    let err = max_rel_err(&tracked, &plain);
    assert!(err < 1e-5, "linear gelu with and without autograd: {}", diff_summary(&tracked, &plain));
    Ok(())
}
test_device!(linear_gelu_same_with_and_without_grad_test, linear_gelu_same_with_and_without_grad);

// ---- PyTorch golden values (tests/golden/make_fused_nn.py) ----

const GOLDEN: &str = include_str!("golden/fused_nn.json");

/// One golden case rebuilt with the fused op in `dtype` on `device`.
fn golden_case(case: &serde_json::Value, dtype: DType, device: Device) -> golden::Check<f64> {
    let inputs = golden::get(case, "inputs")?.as_object().ok_or("'inputs' is not an object")?;
    let mut vars = Vec::new();
    let mut targets = None;
    for (name, v) in inputs {
        let t = golden::tensor(v, dtype, device)?;
        match name.as_str() {
            "targets" => targets = Some(t),
            _ => vars.push((name.clone(), t.requires_grad())),
        }
    }
    let var = |name: &str| vars.iter().find(|(n, _)| n == name).map(|(_, t)| t);
    let params = golden::get(case, "params")?;
    let num = |key: &str| params.get(key).and_then(|v| v.as_f64());
    let x = var("x").ok_or("no x")?;
    let out = match golden::get(case, "op")?.as_str() {
        Some("layer_norm") => x.layer_norm(var("weight"), var("bias"), num("eps").unwrap_or(1e-5)),
        Some("rms_norm") => x.rms_norm(var("weight"), num("eps")),
        Some("cross_entropy") => {
            let ignore = params.get("ignore_index").and_then(|v| v.as_i64());
            let t = targets.as_ref().ok_or("no targets")?;
            x.cross_entropy_logits(t, num("label_smoothing").unwrap_or(0.0), ignore)
        }
        Some("bias_gelu") => {
            let tanh = params.get("approximate").and_then(|v| v.as_str()) == Some("tanh");
            x.bias_gelu(var("bias").ok_or("no bias")?, tanh)
        }
        other => return Err(format!("unknown op {other:?}")),
    }
    .map_err(|e| e.to_string())?;
    let tol = tol_on(device, tolerance(dtype).result);
    golden::check_outputs_and_grads(case, &[("out", &out)], &vars, tol, tol * 10.0)
}

fn golden_values(device: Device) -> Result<()> {
    let fixture: serde_json::Value = serde_json::from_str(GOLDEN).expect("fused_nn.json parses");
    let cases = fixture["cases"].as_array().expect("cases");
    for dtype in [DType::F64, DType::F32].into_iter().filter(|&d| rnn_testutil::supports(device, d)) {
        golden::run_cases(&format!("fused ops in {dtype} on {device}"), cases, |c| golden_case(c, dtype, device));
    }
    Ok(())
}
test_device!(golden_values_test, golden_values);

//! Autocast (`rnn_core::autocast`): the dtype each op of the policy table produces inside a
//! bf16 / f16 region, gradients reaching f32 weights as f32 (and equal to the f32 ones up
//! to 16-bit rounding), the finite-difference check of the cast op, the weight-cast cache,
//! nesting, thread-locality and the error for other dtypes. On the CPU (the policy does not
//! depend on the device; the kernels it calls are tested per device elsewhere).

use rnn_core::gradcheck::GradCheck;
use rnn_core::{
    autocast, autocast_dtype, scaled_dot_product_attention, AttentionMask, AutocastGuard, AutocastOp, CastPolicy,
    DType, Device, Epilogue, Error, Result, Tensor,
};
use rnn_nn::{cross_entropy, mse, BatchNorm2d, Conv2d, Conv2dConfig, LayerNorm, Linear, Module, RmsNorm, VarBuilder};
use rnn_testutil::{max_rel_err, values};

const CPU: Device = Device::Cpu;
const LOW: [DType; 2] = [DType::BF16, DType::F16];

thread_local! {
    /// Each test's own seeded generator (tests run on threads of their own), so that a test
    /// sees the same inputs on every run instead of whatever the global generator gives.
    static RNG: std::cell::RefCell<rand::rngs::StdRng> = std::cell::RefCell::new(rnn_testutil::rng(7));
}

/// Standard normal f32 values from this test's generator.
fn randn(shape: &[usize]) -> Result<Tensor> {
    RNG.with(|rng| Tensor::randn_with(&mut *rng.borrow_mut(), 0.0, 1.0, shape, DType::F32, CPU))
}

/// `f` inside a region of `dtype`.
fn within<R>(dtype: DType, f: impl FnOnce() -> Result<R>) -> Result<R> {
    autocast(dtype, f)?
}

#[test]
fn lower_precision_ops_give_16_bit_outputs() -> Result<()> {
    let mut vb = VarBuilder::cpu(1);
    let conv = Conv2d::new(2, 3, (3, 3), Conv2dConfig::default(), &mut vb)?;
    let (x, w, b) = (randn(&[4, 5])?, randn(&[6, 5])?, randn(&[6])?);
    let (q, k, v) = (randn(&[1, 2, 3, 4])?, randn(&[1, 2, 5, 4])?, randn(&[1, 2, 5, 4])?);
    let bias = AttentionMask::bias(&randn(&[1, 1, 3, 5])?);
    for low in LOW {
        within(low, || {
            assert_eq!(x.matmul(&w.t()?)?.dtype(), low, "matmul");
            assert_eq!(x.linear(&w, Some(&b), Epilogue::Relu)?.dtype(), low, "linear");
            assert_eq!(conv.forward(&randn(&[1, 2, 6, 6])?)?.dtype(), low, "conv2d");
            assert_eq!(scaled_dot_product_attention(&q, &k, &v, &bias, None)?.dtype(), low, "attention");
            // Not in the table: elementwise ops keep their input's dtype.
            assert_eq!(x.matmul(&w.t()?)?.relu()?.dtype(), low, "relu");
            Ok(())
        })?;
    }
    // f64 is left alone, as in PyTorch.
    let x64 = x.to_dtype(DType::F64)?;
    let y64 = within(DType::BF16, || x64.matmul(&x64.t()?))?;
    assert_eq!(y64.dtype(), DType::F64);
    Ok(())
}

#[test]
fn float32_ops_cast_16_bit_inputs_up() -> Result<()> {
    let mut vb = VarBuilder::cpu(2);
    let (ln, rms, bn) = (LayerNorm::new(&[5], &mut vb)?, RmsNorm::new(&[5], &mut vb)?, BatchNorm2d::new(2, &mut vb)?);
    let ids = Tensor::from_vec(vec![0i64, 4, 2, 1], 4, CPU)?;
    for low in LOW {
        let h = randn(&[4, 5])?.to_dtype(low)?;
        within(low, || {
            let f32_outputs = [
                ("softmax", h.softmax(1)?),
                ("log_softmax", h.log_softmax(1)?),
                ("layer_norm", ln.forward(&h)?),
                ("rms_norm", rms.forward(&h)?),
                ("batch_norm", bn.forward(&randn(&[2, 2, 3, 3])?.to_dtype(low)?)?),
                ("cross_entropy", cross_entropy(&h, &ids)?),
                ("mse", mse(&h, &randn(&[4, 5])?)?),
                ("sum", h.sum(1)?),
                ("sum_all", h.sum_all()?),
                ("mean", h.mean_keepdim(0)?),
                // Mixed float dtypes promote to the wider (f32 here), as PyTorch's add does.
                ("add", h.add(&randn(&[5])?)?),
            ];
            for (op, y) in f32_outputs {
                assert_eq!(y.dtype(), DType::F32, "{op} in a {low} region");
            }
            Ok(())
        })?;
    }
    Ok(())
}

#[test]
fn cat_promotes_mixed_float_dtypes_inside_a_region_only() -> Result<()> {
    let a = randn(&[2, 3])?.requires_grad();
    let b = randn(&[1, 3])?.to_dtype(DType::BF16)?.requires_grad();
    let err = Tensor::cat(&[a.clone(), b.clone()], 0).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { op: "cat", .. }), "{err}");
    let joined = within(DType::F16, || Tensor::cat(&[a.clone(), b.clone()], 0))?;
    assert_eq!((joined.dtype(), joined.dims()), (DType::F32, &[3usize, 3][..]));
    let expected = [values(&a), values(&b.to_dtype(DType::F32)?)].concat();
    assert_eq!(values(&joined), expected);
    // Each input gets its gradient back in its own dtype.
    let grads = joined.sum_all()?.backward()?;
    assert_eq!(grads.get(&a).unwrap().dtype(), DType::F32);
    assert_eq!(grads.get(&b).unwrap().dtype(), DType::BF16);
    assert_eq!(values(grads.get(&b).unwrap()), vec![1.0; 3]);
    Ok(())
}

#[test]
fn policy_table_entries() {
    assert_eq!(AutocastOp::Matmul.policy(), CastPolicy::Lower);
    assert_eq!(AutocastOp::ScaledDotProductAttention.policy(), CastPolicy::Lower);
    assert_eq!(AutocastOp::Loss.policy(), CastPolicy::Float32);
    assert_eq!(AutocastOp::Elementwise.policy(), CastPolicy::Promote);
}

/// An MLP forward under autocast: the gradients of its f32 weights are f32, and equal to
/// the gradients of the same forward in f32 up to the 16-bit rounding of the activations.
#[test]
fn gradients_reach_f32_weights_as_f32() -> Result<()> {
    let mut vb = VarBuilder::cpu(3);
    let (l1, l2) = (Linear::new(8, 16, &mut vb)?, Linear::new(16, 4, &mut vb)?);
    let params = [l1.parameters(), l2.parameters()].concat();
    let (x, ids) = (randn(&[32, 8])?, Tensor::from_vec((0..32).map(|i| i % 4).collect::<Vec<i64>>(), 32, CPU)?);
    let loss = || -> Result<Tensor> { cross_entropy(&l2.forward(&l1.forward(&x)?.relu()?)?, &ids) };
    let reference = loss()?.backward()?;
    for (low, tol) in [(DType::BF16, 0.1), (DType::F16, 0.02)] {
        let l = within(low, loss)?;
        assert_eq!(l.dtype(), DType::F32);
        let grads = l.backward()?;
        for p in &params {
            let g = grads.get(p).expect("every weight has a gradient");
            assert_eq!(g.dtype(), DType::F32, "{low}: gradient dtype");
            let err = max_rel_err(&values(g), &values(reference.get(p).unwrap()));
            assert!(err <= tol, "{low}: gradient {:?} differs from f32 by {err:e}", p.dims());
        }
    }
    Ok(())
}

/// The backward of the cast op (`to_dtype`): central differences of f64 functions that
/// compute through f32 or f16. Steps are large enough that the intermediate rounding is
/// small against them; the functions are quadratic, so central differences are exact. What
/// is left is rounding: in f32, an output near 16 is rounded by up to 1e-6 and a perturbed
/// input near 2 by up to 1.2e-7, which over a step of 2e-2 moves a difference quotient by up
/// to about 1e-4 per output (one draw of unseeded inputs reached 1.8e-4), hence 1e-3; a wrong
/// backward is off by O(1). The inputs are seeded, so the check is the same on every run.
#[test]
fn cast_op_gradcheck() -> Result<()> {
    for (mid, step, tolerance) in [(DType::F32, 1e-2, 1e-3), (DType::F16, 0.25, 2e-2), (DType::BF16, 0.5, 5e-2)] {
        let x = rnn_testutil::random(21, &[3, 4], DType::F64, CPU)?;
        let y = rnn_testutil::random(22, &[4, 2], DType::F64, CPU)?;
        let check = GradCheck { step, tolerance, seed: 5 };
        check.run(&[x, y], |t| {
            let (a, b) = (t[0].to_dtype(mid)?, t[1].to_dtype(mid)?);
            a.to_dtype(DType::F32)?.matmul(&b.to_dtype(DType::F32)?)?.sqr()?.to_dtype(DType::F64)
        })?;
    }
    Ok(())
}

/// A weight used twice in one region is cast once (the cache) and still gets both
/// contributions; after a backward pass and an in-place update in the same region, the next
/// forward sees the new value.
#[test]
fn weight_cast_cache_keeps_gradients_and_values_right() -> Result<()> {
    let w = Tensor::full(0.5, (2, 2), DType::F32, CPU)?.requires_grad();
    let x = Tensor::ones((1, 2), DType::F32, CPU)?;
    within(DType::BF16, || {
        let y = x.matmul(&w)?.matmul(&w)?.sum_all()?;
        assert_eq!(y.to_f64_scalar()?, 2.0);
        let g = y.backward()?;
        // d(x W W 1)/dW = xᵀ (W 1)ᵀ + (x W)ᵀ 1ᵀ: ones from each use.
        assert_eq!(values(g.get(&w).unwrap()), vec![2.0; 4], "both uses reach the weight");
        w.assign(&Tensor::full(1.0, (2, 2), DType::F32, CPU)?)?;
        assert_eq!(x.matmul(&w)?.sum_all()?.to_f64_scalar()?, 4.0, "the updated weight is cast anew");
        Ok(())
    })
}

#[test]
fn regions_nest_and_restore() -> Result<()> {
    assert_eq!(autocast_dtype(), None);
    {
        let _outer = AutocastGuard::new(DType::BF16)?;
        assert_eq!(autocast_dtype(), Some(DType::BF16));
        let inner = autocast(DType::F16, || {
            let _off = AutocastGuard::disabled();
            assert_eq!(autocast_dtype(), None);
            randn(&[2, 2])?.matmul(&randn(&[2, 2])?)
        })??;
        assert_eq!(inner.dtype(), DType::F32, "autocast disabled inside");
        assert_eq!(autocast(DType::F16, autocast_dtype)?, Some(DType::F16));
        assert_eq!(autocast_dtype(), Some(DType::BF16), "the outer region is back");
    }
    assert_eq!(autocast_dtype(), None);
    Ok(())
}

#[test]
fn regions_are_per_thread() -> Result<()> {
    let _g = AutocastGuard::new(DType::BF16)?;
    let other = std::thread::spawn(|| -> Result<(Option<DType>, DType)> {
        Ok((autocast_dtype(), randn(&[2, 2])?.matmul(&randn(&[2, 2])?)?.dtype()))
    });
    assert_eq!(other.join().expect("thread")?, (None, DType::F32));
    assert_eq!(randn(&[2, 2])?.matmul(&randn(&[2, 2])?)?.dtype(), DType::BF16);
    Ok(())
}

#[test]
fn other_dtypes_are_errors() {
    for dtype in [DType::F32, DType::F64, DType::I64, DType::U8] {
        let mut ran = false;
        let r = autocast(dtype, || ran = true);
        assert!(matches!(r, Err(Error::UnsupportedDType { op: "autocast", .. })), "{dtype}: {r:?}");
        assert!(!ran, "{dtype}: the closure must not run");
        assert!(AutocastGuard::new(dtype).is_err());
    }
    assert_eq!(autocast_dtype(), None);
}

/// Best of `reps` timings of `f`, in ms.
fn best_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let start = std::time::Instant::now();
        f()?;
        best = best.min(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

/// Not a test: where the time of the bf16 training step of the 784-512-256-10 MLP at batch
/// 128 goes (the `mlp_784_512_256_10_b128_bf16` workload of `rnn bench cpu`): the whole
/// step in f32 and in bf16, and per layer the f32 and bf16 products of the forward and the
/// two of the backward, and the casts autocast adds (weight and input down, the weight's
/// gradient up). Run with
/// `cargo test --release -p rnn-nn --test autocast -- --ignored --nocapture bf16_step_breakdown`.
#[test]
#[ignore]
fn bf16_step_breakdown() -> Result<()> {
    let reps = 30;
    let widths = [784, 512, 256, 10];
    let batch = 128;
    let layers: Vec<(Tensor, Tensor)> = widths
        .windows(2)
        .map(|w| Ok((randn(&[w[0], w[1]])?.requires_grad(), Tensor::zeros(w[1], DType::F32, CPU)?.requires_grad())))
        .collect::<Result<_>>()?;
    let (x, ids) = (randn(&[batch, 784])?, Tensor::from_vec((0..batch as i64).map(|i| i % 10).collect(), batch, CPU)?);
    let step = || -> Result<()> {
        let mut h = x.clone();
        for (i, (w, b)) in layers.iter().enumerate() {
            h = h.matmul(w)?.add(b)?;
            if i + 1 < layers.len() {
                h = h.relu()?;
            }
        }
        cross_entropy(&h, &ids)?.backward().map(drop)
    };
    let f32_step = best_ms(reps, step)?;
    let bf16_step = best_ms(reps, || within(DType::BF16, step))?;
    println!("step: f32 {f32_step:.2} ms, bf16 {bf16_step:.2} ms ({:.2}x)", bf16_step / f32_step);
    let (mut f32_mm, mut bf16_mm, mut casts) = (0.0, 0.0, 0.0);
    for w in widths.windows(2) {
        let (k, n) = (w[0], w[1]);
        let (a, b, g) = (randn(&[batch, k])?, randn(&[k, n])?, randn(&[batch, n])?);
        let low = |t: &Tensor| t.to_dtype(DType::BF16);
        let (a16, b16, g16) = (low(&a)?, low(&b)?, low(&g)?);
        // Forward a b, backward g bᵀ and aᵀ g.
        let products = |a: &Tensor, b: &Tensor, g: &Tensor| -> Result<()> {
            a.matmul(b)?;
            g.matmul(&b.t()?)?;
            a.t()?.matmul(g).map(drop)
        };
        let (mm32, mm16) = (best_ms(reps, || products(&a, &b, &g))?, best_ms(reps, || products(&a16, &b16, &g16))?);
        let cast = best_ms(reps, || {
            low(&a)?;
            low(&b)?;
            b16.to_dtype(DType::F32).map(drop)
        })?;
        println!("{k}x{n}: products f32 {mm32:.3} ms, bf16 {mm16:.3} ms; casts {cast:.3} ms");
        (f32_mm, bf16_mm, casts) = (f32_mm + mm32, bf16_mm + mm16, casts + cast);
    }
    println!("sum: products f32 {f32_mm:.2} ms, bf16 {bf16_mm:.2} ms; casts {casts:.2} ms");
    Ok(())
}

//! The fused `conv2d`, `max_pool2d`, `avg_pool2d` and `batch_norm`: forward and gradients
//! against the
//! composition of public ops they replace (`unfold2d`, matmul, bias add, ReLU; the window's
//! first argmax gathered, the window mean; per-channel mean, variance, normalize), on fresh random inputs with odd sizes, strides,
//! padding, dilation and groups, in f32 and f64; finite-difference gradient checks (f64);
//! NaN in max pooling; errors. The CPU runs the direct kernels, other devices the
//! composition, both checked against the CPU reference.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rnn_core::gradcheck::GradCheck;
use rnn_core::{DType, Device, Epilogue, Result, Tensor, Window2d};
use rnn_testutil::*;

const CPU: Device = Device::Cpu;

fn win(kernel: (usize, usize), stride: (usize, usize), padding: (usize, usize), dilation: (usize, usize)) -> Window2d {
    Window2d { kernel, stride, padding, dilation }
}

/// (input [N, C, H, W], out channels, groups, window) covering odd sizes, strides 1-2,
/// padding 0-2, dilation 1-2, groups 1-3 and 1x1 kernels. Configs 6 and 7 split their input
/// into stride phases (even planes, one window per phase column). The input gradient of a
/// stride-1 convolution runs as a convolution with the flipped weight (configs 0, 4 and 8:
/// groups, a dilated non-square kernel) unless the padding exceeds the kernel's span
/// (config 9, which folds).
fn conv_configs() -> Vec<([usize; 4], usize, usize, Window2d)> {
    vec![
        ([2, 3, 7, 5], 4, 1, win((3, 3), (1, 1), (1, 1), (1, 1))),
        ([3, 4, 9, 8], 6, 2, win((3, 2), (2, 1), (1, 0), (1, 1))),
        ([1, 3, 8, 9], 3, 3, win((2, 3), (2, 2), (2, 1), (2, 1))),
        ([2, 5, 6, 7], 2, 1, win((1, 1), (2, 2), (0, 0), (1, 1))),
        ([2, 2, 5, 5], 3, 1, win((1, 1), (1, 1), (0, 0), (1, 1))),
        ([1, 2, 6, 6], 4, 2, win((3, 3), (1, 2), (2, 2), (2, 1))),
        ([2, 4, 8, 6], 6, 2, win((3, 3), (2, 2), (1, 1), (1, 1))),
        ([2, 3, 8, 5], 4, 1, win((3, 3), (2, 1), (1, 1), (1, 1))),
        ([2, 4, 7, 6], 6, 2, win((3, 2), (1, 1), (2, 1), (2, 1))),
        ([1, 3, 5, 5], 2, 1, win((1, 1), (1, 1), (1, 1), (1, 1))),
    ]
}

fn random(dims: &[usize], dtype: DType, seed: u64, device: Device) -> Result<Tensor> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = dims.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    Tensor::from_vec(v, dims, CPU)?.to_dtype(dtype)?.to_device(device)
}

/// The composition `Conv2d` ran before the fused op.
fn reference_conv(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    window: &Window2d,
    groups: usize,
    relu: bool,
) -> Result<Tensor> {
    let [n, c, ..] = *x.dims() else { unreachable!() };
    let o = w.dims()[0];
    let cols = x.unfold2d_window(window, 0.0)?;
    let (taps, l) = (cols.dims()[2], cols.dims()[3]);
    let (ho, wo) = window.output_size("test", (x.dims()[2], x.dims()[3]))?;
    let cols = cols.reshape((n, groups, c / groups * taps, l))?;
    let wm = w.reshape((groups, o / groups, c / groups * taps))?;
    let mut y = wm.matmul(&cols)?.reshape((n, o, ho, wo))?;
    if let Some(b) = b {
        y = y.add(&b.reshape((1, o, 1, 1))?)?;
    }
    if relu {
        y = y.relu()?;
    }
    Ok(y)
}

fn close(what: &str, a: &Tensor, b: &Tensor, tol: f64) -> Result<()> {
    assert_eq!(a.dims(), b.dims(), "{what}: shapes");
    let (a, b) = (a.to_dtype(DType::F64)?.to_vec::<f64>()?, b.to_dtype(DType::F64)?.to_vec::<f64>()?);
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs() / y.abs().max(1.0)).fold(0.0, f64::max);
    assert!(worst <= tol, "{what}: largest difference {worst} > {tol}");
    Ok(())
}

/// `f(inputs)` and the gradient of `sum(f(inputs) * upstream)` for every input.
fn value_and_grads(
    inputs: &[Tensor],
    upstream: &Tensor,
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
) -> Result<(Tensor, Vec<Tensor>)> {
    let vars: Vec<Tensor> = inputs.iter().map(|t| t.detach().requires_grad()).collect();
    let y = f(&vars)?;
    let grads = y.mul(upstream)?.sum_all()?.backward()?;
    let g = vars.iter().map(|v| grads.get(v).cloned().expect("every input has a gradient")).collect();
    Ok((y.detach(), g))
}

/// Configs that the CPU convolves directly, without unfolding, on AVX-512 (`conv_direct.rs`:
/// 3x3, stride 1, 16 input channels per group; the weight gradient also needs output rows
/// of 32 or more): output channels that fill register tiles partly (7; 16 per group; 20),
/// positions past the last whole tile, batches of several blocks of images, dilation and
/// uneven padding. The second and third also run the input gradient directly (16 or more
/// output channels per group).
fn wide_conv_configs() -> Vec<([usize; 4], usize, usize, Window2d)> {
    vec![
        ([37, 16, 3, 32], 7, 1, win((3, 3), (1, 1), (1, 1), (1, 1))),
        ([9, 32, 2, 33], 32, 2, win((3, 3), (1, 1), (1, 2), (1, 2))),
        ([4, 16, 5, 32], 20, 1, win((3, 3), (1, 1), (2, 1), (2, 1))),
        // Rows a multiple of 16 wide, few channels (the direct path by rows, see
        // `cpu/conv_direct.rs`): register tails, a position tail, a dilated width.
        ([3, 3, 4, 32], 5, 1, win((3, 3), (1, 1), (1, 1), (1, 1))),
        ([2, 4, 3, 16], 6, 1, win((3, 3), (1, 1), (1, 1), (1, 1))),
        ([3, 32, 4, 30], 8, 2, win((3, 3), (1, 1), (1, 3), (1, 2))),
        // Rows of 33, 10 outputs: the direct weight gradient by padded rows.
        ([9, 16, 3, 33], 10, 1, win((3, 3), (1, 1), (1, 1), (1, 1))),
        // 16s of output channels (the broadcast weight gradient, `cpu/conv_wgrad.rs`):
        // strided, two registers of outputs and one, non-square dilated kernels, a tail of
        // (channel, tap) pairs.
        ([3, 5, 9, 11], 32, 1, win((3, 3), (2, 2), (1, 1), (1, 1))),
        ([2, 6, 7, 9], 48, 1, win((2, 3), (2, 1), (1, 0), (2, 1))),
        ([2, 3, 6, 7], 16, 1, win((3, 3), (1, 1), (1, 1), (1, 1))),
        // 64s of output channels (the broadcast forward, `cpu/conv_bcast_fwd.rs`): strided
        // with a tail of positions; groups with a padded walk's width.
        ([2, 8, 5, 6], 64, 1, win((3, 3), (2, 2), (1, 1), (1, 1))),
        ([2, 6, 5, 7], 128, 2, win((3, 3), (1, 1), (1, 1), (1, 1))),
        // Empty planes keep the product: windows of padding only.
        ([2, 16, 0, 5], 16, 1, win((3, 3), (1, 1), (2, 2), (1, 1))),
    ]
}

fn conv_matches_the_composition(device: Device) -> Result<()> {
    check_against_the_composition(conv_configs(), device)
}
test_device!(conv_matches_the_composition_test, conv_matches_the_composition);

#[test]
fn wide_conv_matches_the_composition() -> Result<()> {
    check_against_the_composition(wide_conv_configs(), CPU)
}

/// Inputs with inf and NaN, and a weight with inf, on a config whose rows the direct path
/// walks as they are, on one it pads (whose weight gradient leaves such images to the
/// product: its gap columns would multiply an inf in the last input column by zero) and on
/// one whose weight gradient runs from broadcasts. The
/// weight with inf keeps the input gradient on the fold (the flipped-weight convolution
/// would multiply it by the zero padding). Output and gradients are what the composition
/// gives, NaN for NaN.
#[test]
fn conv_with_inf_and_nan_matches_the_composition() -> Result<()> {
    // Direct tiles by rows, by padded rows, and broadcasts (groups of 16 outputs).
    let configs = wide_conv_configs();
    for i in [0, 6, 1] {
        let (dims, o, groups, window) = configs[i];
        check_inf_and_nan(dims, o, groups, window)?;
    }
    Ok(())
}

fn check_inf_and_nan(dims: [usize; 4], o: usize, groups: usize, window: Window2d) -> Result<()> {
    let [n, c, h, w] = dims;
    for dtype in [DType::F32, DType::F64] {
        let mut xv = random(&dims, DType::F64, 5, CPU)?.to_vec::<f64>()?;
        xv[((3 * c + 2) * h + 1) * w + w - 1] = f64::INFINITY;
        xv[((5 * c + 7) * h + 2) * w + 4] = f64::NAN;
        let x = Tensor::from_vec(xv, &dims[..], CPU)?.to_dtype(dtype)?;
        for inf_weight in [false, true] {
            let mut wv = random(&[o, c / groups, 3, 3], DType::F64, 6, CPU)?.to_vec::<f64>()?;
            if inf_weight {
                wv[4 * 9 + 6] = f64::NEG_INFINITY;
            }
            let wt = Tensor::from_vec(wv, (o, c / groups, 3, 3), CPU)?.to_dtype(dtype)?;
            let inputs = [x.clone(), wt];
            let upstream = random(&[n, o, h, w], dtype, 7, CPU)?;
            let fused = |t: &[Tensor]| t[0].conv2d(&t[1], None, &window, groups, Epilogue::None);
            let reference = |t: &[Tensor]| reference_conv(&t[0], &t[1], None, &window, groups, false);
            let (y, g) = value_and_grads(&inputs, &upstream, fused)?;
            let (y_ref, g_ref) = value_and_grads(&inputs, &upstream, reference)?;
            let values = std::iter::once((&y, &y_ref)).chain(g.iter().zip(&g_ref));
            for (k, (a, r)) in values.enumerate() {
                let (a, r) = (a.to_dtype(DType::F64)?.to_vec::<f64>()?, r.to_dtype(DType::F64)?.to_vec::<f64>()?);
                let what = format!("{dtype:?} inf weight {inf_weight}: output, then gradients: {k}");
                if k != 1 || inf_weight {
                    assert!(a.iter().any(|v| !v.is_finite()), "{what}: the non-finite values reach it");
                }
                for (i, (a, r)) in a.iter().zip(&r).enumerate() {
                    let same = (a.is_nan() && r.is_nan()) || a == r || (a - r).abs() <= 1e-4 * r.abs().max(1.0);
                    assert!(same, "{what}: element {i}: {a} against {r}");
                }
            }
        }
    }
    Ok(())
}

/// The fused convolution's value and gradients against the composition on `configs`.
fn check_against_the_composition(configs: Vec<([usize; 4], usize, usize, Window2d)>, device: Device) -> Result<()> {
    let dtypes: &[DType] = if device.is_cpu() { &[DType::F32, DType::F64] } else { &[DType::F32] };
    for (i, (dims, o, groups, window)) in configs.into_iter().enumerate() {
        for &dtype in dtypes {
            for (relu, bias) in [(false, true), (true, true), (true, false)] {
                let seed = 100 * i as u64;
                let x = random(&dims, dtype, seed, device)?;
                let w = random(&[o, dims[1] / groups, window.kernel.0, window.kernel.1], dtype, seed + 1, device)?;
                let b = random(&[o], dtype, seed + 2, device)?;
                let inputs: Vec<Tensor> = if bias { vec![x, w, b] } else { vec![x, w] };
                let act = if relu { Epilogue::Relu } else { Epilogue::None };
                let fused = |t: &[Tensor]| t[0].conv2d(&t[1], t.get(2), &window, groups, act);
                let reference = |t: &[Tensor]| reference_conv(&t[0], &t[1], t.get(2), &window, groups, relu);
                let ys = no_grad_shape(&inputs, reference)?;
                let upstream = random(&ys, dtype, seed + 3, device)?;
                let (y, g) = value_and_grads(&inputs, &upstream, fused)?;
                let (y_ref, g_ref) = value_and_grads(&inputs, &upstream, reference)?;
                let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
                let what = format!("config {i} {dtype:?} relu {relu} bias {bias} on {device}");
                close(&format!("{what}: y"), &y.to_device(CPU)?, &y_ref.to_device(CPU)?, tol)?;
                for (k, (a, r)) in g.iter().zip(&g_ref).enumerate() {
                    close(&format!("{what}: grad {k}"), &a.to_device(CPU)?, &r.to_device(CPU)?, tol)?;
                }
            }
        }
    }
    Ok(())
}

fn no_grad_shape(inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<Vec<usize>> {
    Ok(rnn_core::no_grad(|| f(inputs))?.dims().to_vec())
}

#[test]
fn conv_gradchecks() -> Result<()> {
    for (i, (dims, o, groups, window)) in conv_configs().into_iter().enumerate() {
        let small = [dims[0].min(2), dims[1], dims[2].min(6), dims[3].min(6)];
        let x = random(&small, DType::F64, i as u64, CPU)?;
        let w = random(&[o, dims[1] / groups, window.kernel.0, window.kernel.1], DType::F64, 7 + i as u64, CPU)?;
        let b = random(&[o], DType::F64, 9, CPU)?;
        for act in [Epilogue::None, Epilogue::Relu] {
            let f = |t: &[Tensor]| t[0].conv2d(&t[1], Some(&t[2]), &window, groups, act);
            let worst = GradCheck::default().run(&[x.clone(), w.clone(), b.clone()], f)?;
            assert!(worst < 1e-6, "config {i} {act:?}: {worst}");
        }
    }
    Ok(())
}

/// (input, window) pairs for pooling: overlapping and gapped windows, padding up to half
/// the kernel, dilation (max only), odd sizes.
fn pool_configs() -> Vec<([usize; 4], Window2d)> {
    vec![
        ([2, 3, 8, 8], win((2, 2), (2, 2), (0, 0), (1, 1))),
        ([1, 2, 7, 9], win((3, 3), (2, 2), (1, 1), (1, 1))),
        ([2, 1, 9, 7], win((3, 2), (1, 2), (1, 1), (1, 1))),
        ([1, 2, 5, 6], win((2, 2), (3, 3), (1, 0), (1, 1))),
        ([1, 2, 9, 9], win((3, 3), (2, 1), (1, 1), (2, 2))),
    ]
}

fn reference_pool(x: &Tensor, window: &Window2d, max: bool) -> Result<Tensor> {
    let [n, c, h, w] = *x.dims() else { unreachable!() };
    let (ho, wo) = window.output_size("test", (h, w))?;
    let y = if max {
        let cols = x.unfold2d_window(window, f64::NEG_INFINITY)?;
        cols.gather(&cols.argmax_keepdim(2)?, 2)?
    } else {
        x.unfold2d_window(window, 0.0)?.mean_keepdim(2)?
    };
    y.reshape((n, c, ho, wo))
}

fn pools_match_the_composition(device: Device) -> Result<()> {
    let dtypes: &[DType] = if device.is_cpu() { &[DType::F32, DType::F64] } else { &[DType::F32] };
    for (i, (dims, window)) in pool_configs().into_iter().enumerate() {
        for &dtype in dtypes {
            for max in [true, false] {
                if !max && window.dilation != (1, 1) {
                    continue;
                }
                let x = random(&dims, dtype, 50 + i as u64, device)?;
                let fused = |t: &[Tensor]| if max { t[0].max_pool2d(&window) } else { t[0].avg_pool2d(&window) };
                let reference = |t: &[Tensor]| reference_pool(&t[0], &window, max);
                let inputs = [x];
                let upstream = random(&no_grad_shape(&inputs, reference)?, dtype, 60 + i as u64, device)?;
                let (y, g) = value_and_grads(&inputs, &upstream, fused)?;
                let (y_ref, g_ref) = value_and_grads(&inputs, &upstream, reference)?;
                let what = format!("config {i} {dtype:?} max {max} on {device}");
                let tol = if dtype == DType::F64 { 1e-12 } else { 1e-6 };
                close(&format!("{what}: y"), &y.to_device(CPU)?, &y_ref.to_device(CPU)?, tol)?;
                close(&format!("{what}: grad"), &g[0].to_device(CPU)?, &g_ref[0].to_device(CPU)?, tol)?;
            }
        }
    }
    Ok(())
}
test_device!(pools_match_the_composition_test, pools_match_the_composition);

#[test]
fn pool_gradchecks() -> Result<()> {
    for (i, (dims, window)) in pool_configs().into_iter().enumerate() {
        let x = random(&[1, dims[1], dims[2], dims[3]], DType::F64, i as u64, CPU)?;
        let worst = GradCheck::default().run(std::slice::from_ref(&x), |t| t[0].max_pool2d(&window))?;
        assert!(worst < 1e-6, "max config {i}: {worst}");
        if window.dilation == (1, 1) {
            let worst = GradCheck::default().run(&[x], |t| t[0].avg_pool2d(&window))?;
            assert!(worst < 1e-6, "avg config {i}: {worst}");
        }
    }
    Ok(())
}

/// A NaN wins its window (and takes the gradient), as in PyTorch; +inf is an ordinary max;
/// ties go to the first element in scan order.
#[test]
fn max_pool_nan_inf_and_ties() -> Result<()> {
    let nan = f64::NAN;
    #[rustfmt::skip]
    let v = vec![
        1.0, nan, 5.0, 5.0,
        2.0, 3.0, 5.0, 5.0,
        f64::INFINITY, 0.0, -1.0, -2.0,
        f64::NEG_INFINITY, 1.0, -3.0, -1.0,
    ];
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::from_vec(v.clone(), (1, 1, 4, 4), CPU)?.to_dtype(dtype)?.requires_grad();
        let y = x.max_pool2d(&win((2, 2), (2, 2), (0, 0), (1, 1)))?;
        let got = y.to_dtype(DType::F64)?.to_vec::<f64>()?;
        assert!(got[0].is_nan(), "{got:?}");
        assert_eq!(&got[1..], &[5.0, f64::INFINITY, -1.0]);
        let g = y.sum_all()?.backward()?.get(&x).cloned().expect("gradient").to_dtype(DType::F64)?;
        #[rustfmt::skip]
        let expected = vec![
            0.0, 1.0, 1.0, 0.0,
            0.0, 0.0, 0.0, 0.0,
            1.0, 0.0, 1.0, 0.0,
            0.0, 0.0, 0.0, 0.0,
        ];
        assert_eq!(g.to_vec::<f64>()?, expected, "{dtype:?}");
    }
    Ok(())
}

#[test]
fn bad_arguments_are_errors() -> Result<()> {
    let x = Tensor::zeros((1, 4, 5, 5), DType::F32, CPU)?;
    let w3 = win((3, 3), (1, 1), (0, 0), (1, 1));
    let w = Tensor::zeros((2, 4, 3, 3), DType::F32, CPU)?;
    // Wrong kernel for the window, groups not dividing, channel mismatch, bias shape, dtype.
    assert!(x.conv2d(&w, None, &win((2, 2), (1, 1), (0, 0), (1, 1)), 1, Epilogue::None).is_err());
    assert!(x.conv2d(&w, None, &w3, 3, Epilogue::None).is_err());
    assert!(x.conv2d(&Tensor::zeros((2, 3, 3, 3), DType::F32, CPU)?, None, &w3, 1, Epilogue::None).is_err());
    assert!(x.conv2d(&w, Some(&Tensor::zeros(3, DType::F32, CPU)?), &w3, 1, Epilogue::None).is_err());
    assert!(x.conv2d(&w.to_dtype(DType::F64)?, None, &w3, 1, Epilogue::None).is_err());
    assert!(x.to_dtype(DType::U32)?.max_pool2d(&w3).is_err());
    // A kernel larger than the padded input, a zero stride, a rank-3 input.
    assert!(x.max_pool2d(&win((7, 7), (1, 1), (0, 0), (1, 1))).is_err());
    assert!(x.avg_pool2d(&win((2, 2), (0, 1), (0, 0), (1, 1))).is_err());
    assert!(x.squeeze(0)?.max_pool2d(&w3).is_err());
    assert!(x.squeeze(0)?.conv2d(&w, None, &w3, 1, Epilogue::None).is_err());
    Ok(())
}

/// f16 and bf16 take the composition on the CPU; strided (non-contiguous) inputs are copied.
#[test]
fn half_dtypes_and_strided_inputs() -> Result<()> {
    let window = win((3, 3), (1, 1), (1, 1), (1, 1));
    let x = random(&[2, 3, 6, 5], DType::F32, 1, CPU)?;
    let w = random(&[4, 3, 3, 3], DType::F32, 2, CPU)?;
    let y = x.conv2d(&w, None, &window, 1, Epilogue::Relu)?;
    for dtype in [DType::F16, DType::BF16] {
        let yh = x.to_dtype(dtype)?.conv2d(&w.to_dtype(dtype)?, None, &window, 1, Epilogue::Relu)?;
        close(&format!("{dtype:?} conv"), &yh, &y, 0.05)?;
        let ph = x.to_dtype(dtype)?.max_pool2d(&window)?;
        close(&format!("{dtype:?} pool"), &ph, &x.max_pool2d(&window)?, 0.01)?;
    }
    // [N, C, W, H] transposed to a non-contiguous [N, C, H, W] view.
    let xt = random(&[2, 3, 5, 6], DType::F32, 3, CPU)?.transpose(2, 3)?;
    let y = xt.conv2d(&w, None, &window, 1, Epilogue::None)?;
    close("strided conv", &y, &xt.contiguous()?.conv2d(&w, None, &window, 1, Epilogue::None)?, 1e-6)?;
    close("strided pool", &xt.avg_pool2d(&window)?, &xt.contiguous()?.avg_pool2d(&window)?, 1e-6)?;
    Ok(())
}

// ---------------------------------------------------------------- batch norm

/// One batch norm case: input dims, with weight and bias, with a residual, with ReLU.
#[derive(Clone, Copy)]
struct BnCase<'a> {
    dims: &'a [usize],
    affine: bool,
    residual: bool,
    relu: bool,
}

/// Ranks 2 to 5, a batch of 1 with planes > 1, planes of 1, each option on and off.
fn batch_norm_cases() -> Vec<BnCase<'static>> {
    let case = |dims, affine, residual, relu| BnCase { dims, affine, residual, relu };
    vec![
        case(&[3, 4, 5, 6], true, false, false),
        case(&[2, 3, 4, 5], true, true, true),
        case(&[1, 2, 3, 3], false, false, true),
        case(&[5, 3], true, true, false),
        case(&[2, 3, 2, 3, 2], false, true, true),
    ]
}

impl BnCase<'_> {
    /// x (an offset mean per channel, so that centering matters), then the weight and bias
    /// when affine, then the residual.
    fn inputs(&self, dtype: DType, seed: u64, device: Device) -> Result<Vec<Tensor>> {
        let c = self.dims[1];
        let mut v = vec![random(self.dims, dtype, seed, device)?.mul_scalar(2.0)?.add_scalar(3.0)?];
        if self.affine {
            v.push(random(&[c], dtype, seed + 1, device)?.add_scalar(1.5)?);
            v.push(random(&[c], dtype, seed + 2, device)?);
        }
        if self.residual {
            v.push(random(self.dims, dtype, seed + 3, device)?);
        }
        Ok(v)
    }

    /// (weight, bias, residual) among `t` as `inputs` ordered them.
    fn args<'t>(&self, t: &'t [Tensor]) -> (Option<&'t Tensor>, Option<&'t Tensor>, Option<&'t Tensor>) {
        let (w, b) = if self.affine { (t.get(1), t.get(2)) } else { (None, None) };
        (w, b, if self.residual { t.last() } else { None })
    }

    fn fused(&self, t: &[Tensor]) -> Result<Tensor> {
        let (w, b, r) = self.args(t);
        Ok(t[0].batch_norm(w, b, r, 1e-5, self.relu)?.0)
    }

    /// The composition of public ops the fused op replaces: y, batch mean, biased variance.
    fn reference(&self, t: &[Tensor]) -> Result<Vec<Tensor>> {
        let ((w, b, r), x) = (self.args(t), &t[0]);
        let dims: Vec<usize> = (0..x.rank()).filter(|&d| d != 1).collect();
        let mut channel = vec![1; x.rank()];
        channel[1] = x.dims()[1];
        let mean = x.mean_keepdim(dims.clone())?;
        let centered = x.sub(&mean)?;
        let var = centered.sqr()?.mean_keepdim(dims)?;
        let mut y = centered.div(&var.add_scalar(1e-5)?.sqrt()?)?;
        if let (Some(w), Some(b)) = (w, b) {
            y = y.mul(&w.reshape(channel.clone())?)?.add(&b.reshape(channel)?)?;
        }
        if let Some(r) = r {
            y = y.add(r)?;
        }
        if self.relu {
            y = y.relu()?;
        }
        let c = x.dims()[1];
        Ok(vec![y, mean.reshape(c)?, var.reshape(c)?])
    }
}

fn batch_norm_matches_the_composition(device: Device) -> Result<()> {
    let dtypes: &[DType] = if device.is_cpu() { &[DType::F32, DType::F64] } else { &[DType::F32] };
    for (i, case) in batch_norm_cases().into_iter().enumerate() {
        for &dtype in dtypes {
            let inputs = case.inputs(dtype, 10 * i as u64, device)?;
            let upstream = random(case.dims, dtype, 10 * i as u64 + 5, device)?;
            let (y, g) = value_and_grads(&inputs, &upstream, |t| case.fused(t))?;
            let (y_ref, g_ref) = value_and_grads(&inputs, &upstream, |t| Ok(case.reference(t)?.remove(0)))?;
            let tol = if dtype == DType::F64 { 1e-11 } else { 2e-5 };
            let what = format!("case {i} {dtype:?} on {device}");
            close(&format!("{what}: y"), &y.to_device(CPU)?, &y_ref.to_device(CPU)?, tol)?;
            for (k, (a, r)) in g.iter().zip(&g_ref).enumerate() {
                close(&format!("{what}: grad {k}"), &a.to_device(CPU)?, &r.to_device(CPU)?, tol * 10.0)?;
            }
            // The saved statistics, as the layer reads them for its running averages.
            let (w, b, r) = case.args(&inputs);
            let (_, mean, var) = inputs[0].batch_norm(w, b, r, 1e-5, case.relu)?;
            let stats = case.reference(&inputs)?;
            close(&format!("{what}: mean"), &mean.to_device(CPU)?, &stats[1].to_device(CPU)?, tol)?;
            close(&format!("{what}: var"), &var.to_device(CPU)?, &stats[2].to_device(CPU)?, tol)?;
        }
    }
    Ok(())
}
test_device!(batch_norm_matches_the_composition_test, batch_norm_matches_the_composition);

#[test]
fn batch_norm_gradchecks() -> Result<()> {
    for (i, case) in batch_norm_cases().into_iter().enumerate() {
        let inputs = case.inputs(DType::F64, 50 + i as u64, CPU)?;
        let worst = GradCheck::default().run(&inputs, |t| case.fused(t))?;
        assert!(worst < 1e-6, "case {i}: {worst}");
    }
    Ok(())
}

/// A NaN or an infinity poisons its own channel's statistics only, as in PyTorch; half
/// types compute in f32.
#[test]
fn batch_norm_nan_inf_and_half_dtypes() -> Result<()> {
    let x = random(&[2, 3, 2, 2], DType::F32, 1, CPU)?;
    let mut v = x.to_vec::<f32>()?;
    v[0] = f32::NAN; // channel 0
    v[4] = f32::INFINITY; // channel 1
    let y = Tensor::from_vec(v, (2, 3, 2, 2), CPU)?.batch_norm(None, None, None, 1e-5, false)?.0;
    let y = y.to_vec::<f32>()?;
    for (i, y) in y.iter().enumerate() {
        let channel = (i / 4) % 3;
        assert_eq!(y.is_nan(), channel < 2, "element {i}: {y}");
    }
    let (y, _, _) = x.batch_norm(None, None, None, 1e-5, true)?;
    for dtype in [DType::F16, DType::BF16] {
        let (yh, mean, _) = x.to_dtype(dtype)?.batch_norm(None, None, None, 1e-5, true)?;
        assert_eq!((yh.dtype(), mean.dtype()), (dtype, DType::F32));
        close(&format!("{dtype:?} batch norm"), &yh, &y, 0.02)?;
    }
    // A strided (non-contiguous) input is read through its layout.
    let xt = random(&[2, 3, 4, 5], DType::F64, 2, CPU)?.transpose(2, 3)?;
    let (y, _, _) = xt.batch_norm(None, None, None, 1e-5, false)?;
    close("strided", &y, &xt.contiguous()?.batch_norm(None, None, None, 1e-5, false)?.0, 1e-12)
}

#[test]
fn batch_norm_bad_arguments_are_errors() -> Result<()> {
    let x = Tensor::zeros((2, 3, 4), DType::F32, CPU)?;
    let c3 = Tensor::ones(3, DType::F32, CPU)?;
    assert!(x.batch_norm(Some(&Tensor::ones(4, DType::F32, CPU)?), None, None, 1e-5, false).is_err());
    assert!(x.batch_norm(None, Some(&c3.to_dtype(DType::F64)?), None, 1e-5, false).is_err());
    assert!(x.batch_norm(Some(&c3), None, None, -1.0, false).is_err());
    assert!(x.batch_norm(Some(&c3), None, None, f64::NAN, false).is_err());
    assert!(x.flatten_all()?.batch_norm(None, None, None, 1e-5, false).is_err());
    assert!(x.to_dtype(DType::U32)?.batch_norm(None, None, None, 1e-5, false).is_err());
    assert!(Tensor::zeros((0, 3), DType::F32, CPU)?.batch_norm(None, None, None, 1e-5, false).is_err());
    // A residual of another shape or dtype.
    assert!(x.batch_norm(None, None, Some(&c3), 1e-5, true).is_err());
    assert!(x.batch_norm(None, None, Some(&x.to_dtype(DType::F64)?), 1e-5, true).is_err());
    Ok(())
}

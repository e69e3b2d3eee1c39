//! `unfold2d` / `fold2d`: forward against a naive reference on random inputs, the adjoint
//! property `<unfold(x), y> = <x, fold(y)>` (which is what makes each the other's backward),
//! finite-difference gradient checks, every dtype and layout, and the error paths. Everything
//! but the (f64) gradient checks runs on every device, in the dtypes it supports.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rnn_core::gradcheck::GradCheck;
use rnn_core::{DType, Device, Error, Result, Tensor, Window2d};
use rnn_testutil::*;

const CPU: Device = Device::Cpu;

/// (input [N, C, H, W], window) pairs covering strides 1-3, padding 0-2, dilation 1-2,
/// non-square kernels and inputs, windows with gaps between them, and padding wider than
/// half the kernel.
fn configs() -> Vec<([usize; 4], Window2d)> {
    let w = |kernel, stride, padding, dilation| Window2d { kernel, stride, padding, dilation };
    vec![
        ([2, 3, 5, 5], w((3, 3), (1, 1), (1, 1), (1, 1))),
        ([1, 2, 6, 7], w((3, 3), (2, 2), (0, 0), (1, 1))),
        ([2, 1, 7, 6], w((2, 3), (1, 2), (2, 1), (1, 1))),
        ([1, 2, 7, 8], w((3, 2), (2, 1), (1, 2), (2, 2))),
        ([3, 2, 4, 5], w((2, 2), (2, 2), (0, 0), (1, 1))),
        ([1, 1, 8, 9], w((2, 2), (3, 3), (1, 0), (1, 2))),
        ([2, 2, 3, 4], w((1, 1), (1, 1), (0, 0), (1, 1))),
        ([1, 3, 2, 3], w((5, 4), (1, 1), (2, 2), (1, 1))),
        ([1, 1, 1, 1], w((3, 3), (2, 1), (2, 1), (1, 1))),
    ]
}

fn out_size(size: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (size + 2 * p - d * (k - 1) - 1) / s + 1
}

/// Calls `f(plane, tap, position, input_index)` for every window element, with the index
/// into the plane of the input element it reads, or `None` in the padding. The obvious six
/// nested loops, sharing nothing with the library's code.
fn for_each_element(dims: [usize; 4], win: &Window2d, mut f: impl FnMut(usize, usize, usize, Option<usize>)) {
    let [n, c, h, w] = dims;
    let (k, s, p, d) = (win.kernel, win.stride, win.padding, win.dilation);
    let (ho, wo) = (out_size(h, k.0, s.0, p.0, d.0), out_size(w, k.1, s.1, p.1, d.1));
    for plane in 0..n * c {
        for i in 0..k.0 {
            for j in 0..k.1 {
                for oh in 0..ho {
                    for ow in 0..wo {
                        let r = (oh * s.0 + i * d.0) as i64 - p.0 as i64;
                        let col = (ow * s.1 + j * d.1) as i64 - p.1 as i64;
                        let inside = (0..h as i64).contains(&r) && (0..w as i64).contains(&col);
                        let src = inside.then(|| r as usize * w + col as usize);
                        f(plane, i * k.1 + j, oh * wo + ow, src);
                    }
                }
            }
        }
    }
}

/// The unfolded `[N, C, kh * kw, Ho * Wo]` values of `x` (`dims`, row-major), naively.
fn naive_unfold(x: &[f64], dims: [usize; 4], win: &Window2d, pad: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let plane_len = dims[2] * dims[3];
    let mut shape = (0, 0);
    for_each_element(dims, win, |_, tap, pos, _| shape = (shape.0.max(tap + 1), shape.1.max(pos + 1)));
    out.resize(dims[0] * dims[1] * shape.0 * shape.1, f64::NAN);
    for_each_element(dims, win, |plane, tap, pos, src| {
        out[(plane * shape.0 + tap) * shape.1 + pos] = src.map_or(pad, |i| x[plane * plane_len + i]);
    });
    out
}

/// The folded `[N, C, H, W]` values of `cols` (unfolded layout), naively.
fn naive_fold(cols: &[f64], dims: [usize; 4], win: &Window2d) -> Vec<f64> {
    let plane_len = dims[2] * dims[3];
    let mut out = vec![0.0; dims.iter().product()];
    let per_plane = cols.len() / (dims[0] * dims[1]).max(1);
    let positions = per_plane / win.taps();
    for_each_element(dims, win, |plane, tap, pos, src| {
        if let Some(i) = src {
            out[plane * plane_len + i] += cols[plane * per_plane + tap * positions + pos];
        }
    });
    out
}

fn unfold(x: &Tensor, win: &Window2d, pad: f64) -> Result<Tensor> {
    x.unfold2d(win.kernel, win.stride, win.padding, win.dilation, pad)
}

fn fold(cols: &Tensor, hw: (usize, usize), win: &Window2d) -> Result<Tensor> {
    cols.fold2d(hw, win.kernel, win.stride, win.padding, win.dilation)
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fn unfold_matches_the_naive_reference(device: Device) -> Result<()> {
    for (seed, (dims, win)) in configs().into_iter().enumerate() {
        let x64 = random(seed as u64, &dims, DType::F64, CPU)?;
        for pad in [0.0, -0.5, f64::NEG_INFINITY] {
            let expected = naive_unfold(&x64.to_vec::<f64>()?, dims, &win, pad);
            for dtype in [DType::F64, DType::F32].into_iter().filter(|&d| supports(device, d)) {
                let got = unfold(&x64.to_dtype(dtype)?.to_device(device)?, &win, pad)?;
                let (ho, wo) = win.output_size("test", (dims[2], dims[3]))?;
                assert_eq!(got.dims(), &[dims[0], dims[1], win.taps(), ho * wo], "{win:?}");
                // A copy: f64 exact, f32 exactly the rounded input.
                let got = values(&got);
                let rounded: Vec<f64> = expected.iter().map(|&v| v as f32 as f64).collect();
                assert!(
                    got == if dtype == DType::F64 { expected.clone() } else { rounded },
                    "{win:?} {dtype} pad {pad}"
                );
            }
        }
    }
    Ok(())
}
test_device!(unfold_matches_the_naive_reference_test, unfold_matches_the_naive_reference);

fn fold_matches_the_naive_reference(device: Device) -> Result<()> {
    for (seed, (dims, win)) in configs().into_iter().enumerate() {
        let (ho, wo) = win.output_size("test", (dims[2], dims[3]))?;
        let cols = random(100 + seed as u64, &[dims[0], dims[1], win.taps(), ho * wo], DType::F64, CPU)?;
        let expected = naive_fold(&cols.to_vec::<f64>()?, dims, &win);
        if supports(device, DType::F64) {
            let got = fold(&cols.to_device(device)?, (dims[2], dims[3]), &win)?;
            assert_eq!(got.dims(), &dims);
            let err = max_abs_diff(&values(&got), &expected);
            assert!(err < 1e-12, "{win:?}: {err}");
        }
        let got32 = fold(&cols.to_dtype(DType::F32)?.to_device(device)?, (dims[2], dims[3]), &win)?;
        assert_eq!(got32.dims(), &dims);
        let err = max_abs_diff(&values(&got32), &expected);
        assert!(err < 1e-5, "{win:?} f32: {err}");
    }
    Ok(())
}
test_device!(fold_matches_the_naive_reference_test, fold_matches_the_naive_reference);

/// The defining property of the adjoint, which is also exactly what makes `fold2d` the
/// gradient of `unfold2d` (and the reverse): `<unfold(x), y> = <x, fold(y)>`.
fn fold_is_the_adjoint_of_unfold(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
    for (seed, (dims, win)) in configs().into_iter().enumerate() {
        let x = random(200 + seed as u64, &dims, dtype, device)?;
        let cols = unfold(&x, &win, 0.0)?;
        let y = random(300 + seed as u64, cols.dims(), dtype, device)?;
        let scalar = |t: Tensor| values(&t)[0];
        let lhs = scalar(cols.mul(&y)?.sum_all()?);
        let rhs = scalar(x.mul(&fold(&y, (dims[2], dims[3]), &win)?)?.sum_all()?);
        assert!((lhs - rhs).abs() < tol * (1.0 + lhs.abs()), "{win:?} {dtype}: {lhs} vs {rhs}");
    }
    Ok(())
}
test_device!(fold_is_the_adjoint_of_unfold_test, fold_is_the_adjoint_of_unfold);

#[test]
fn gradchecks_of_both_ops() -> Result<()> {
    for (seed, (dims, win)) in configs().into_iter().enumerate().filter(|(_, (d, _))| d.iter().product::<usize>() <= 60)
    {
        let x = random(400 + seed as u64, &dims, DType::F64, CPU)?;
        // A non-zero pad value must not receive (or leak) any gradient.
        let worst = GradCheck::default().run(&[x], |xs| unfold(&xs[0], &win, 0.25))?;
        assert!(worst < 1e-6, "unfold {win:?}: {worst}");
        let hw = (dims[2], dims[3]);
        let (ho, wo) = win.output_size("test", hw)?;
        let cols = random(500 + seed as u64, &[dims[0], dims[1], win.taps(), ho * wo], DType::F64, CPU)?;
        let worst = GradCheck::default().run(&[cols], |xs| fold(&xs[0], hw, &win)?.sqr())?;
        assert!(worst < 1e-6, "fold {win:?}: {worst}");
    }
    // Second order: fold's backward is unfold's, and unfold's backward is fold.
    let (dims, win) = configs()[2];
    let x = random(600, &dims, DType::F64, CPU)?;
    let worst = GradCheck::default().run(&[x], |xs| {
        let y = unfold(&xs[0], &win, 0.0)?.sqr()?;
        fold(&y, (dims[2], dims[3]), &win)
    })?;
    assert!(worst < 1e-6, "unfold then fold: {worst}");
    Ok(())
}

fn strided_inputs_and_every_float_dtype(device: Device) -> Result<()> {
    let (dims, win) = configs()[3];
    let dtype = widest_float(device);
    let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
    let x = random(7, &dims, dtype, device)?;
    let expected = unfold(&x, &win, -1.0)?;
    let expected_values = values(&expected);
    // The same values seen through a transposed layout and through a narrowed one.
    let transposed = x.transpose(2, 3)?.contiguous()?.transpose(2, 3)?;
    assert!(!transposed.is_contiguous());
    assert!(values(&unfold(&transposed, &win, -1.0)?) == expected_values, "transposed input");
    let wide = Tensor::cat(&[x.clone(), x.clone()], 3)?.narrow(3, dims[3], dims[3])?;
    assert!(values(&unfold(&wide, &win, -1.0)?) == expected_values, "narrowed input");
    let cols = random(8, expected.dims(), dtype, device)?;
    let folded = values(&fold(&cols, (dims[2], dims[3]), &win)?);
    let cols_t = cols.transpose(2, 3)?.contiguous()?.transpose(2, 3)?;
    assert!(max_abs_diff(&values(&fold(&cols_t, (dims[2], dims[3]), &win)?), &folded) < tol);
    for low in [DType::F16, DType::BF16].into_iter().filter(|&d| supports(device, d)) {
        // A copy is exact in any dtype; the fold sums a few values, within the dtype's precision.
        let got = values(&unfold(&x.to_dtype(low)?, &win, -1.0)?);
        assert!(got == values(&expected.to_dtype(low)?), "{low}");
        let got = values(&fold(&cols.to_dtype(low)?, (dims[2], dims[3]), &win)?);
        assert!(max_abs_diff(&got, &folded) < 0.1, "{low}");
    }
    Ok(())
}
test_device!(strided_inputs_and_every_float_dtype_test, strided_inputs_and_every_float_dtype);

/// Inputs large enough that both ops split their planes over threads (and, on a GPU,
/// dispatch grids of more than 65,535 workgroups in one dimension).
fn large_inputs_match_the_reference(device: Device) -> Result<()> {
    let dims = [4, 64, 30, 31];
    let win = Window2d { kernel: (3, 3), stride: (1, 1), padding: (1, 1), dilation: (1, 1) };
    let x = random(9, &dims, DType::F32, device)?;
    let x64 = values(&x);
    let cols = unfold(&x, &win, 0.0)?;
    assert!(cols.elem_count() > 2_000_000);
    let got = values(&cols);
    assert!(got == naive_unfold(&x64, dims, &win, 0.0), "unfold of {dims:?}");
    let folded = values(&fold(&cols, (dims[2], dims[3]), &win)?);
    assert!(max_abs_diff(&folded, &naive_fold(&got, dims, &win)) < 1e-5);
    Ok(())
}
test_device!(large_inputs_match_the_reference_test, large_inputs_match_the_reference);

fn empty_inputs(device: Device) -> Result<()> {
    let win = Window2d { kernel: (3, 3), stride: (1, 1), padding: (1, 1), dilation: (1, 1) };
    let cols = unfold(&Tensor::zeros((0, 2, 4, 4), DType::F32, device)?, &win, 0.0)?;
    assert_eq!(cols.dims(), &[0, 2, 9, 16]);
    assert_eq!(fold(&cols, (4, 4), &win)?.dims(), &[0, 2, 4, 4]);
    // No rows, but the padding still holds two window rows: every element is padding.
    let win = Window2d { padding: (2, 1), ..win };
    let cols = unfold(&Tensor::zeros((1, 2, 0, 3), DType::F32, device)?, &win, 7.0)?;
    assert_eq!(cols.dims(), &[1, 2, 9, 6]);
    assert!(cols.to_vec::<f32>()?.iter().all(|&v| v == 7.0));
    assert_eq!(fold(&cols, (0, 3), &win)?.dims(), &[1, 2, 0, 3]);
    Ok(())
}
test_device!(empty_inputs_test, empty_inputs);

fn is_invalid<T>(r: Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

fn bad_arguments_are_errors(device: Device) -> Result<()> {
    let x = Tensor::zeros((1, 2, 5, 5), DType::F32, device)?;
    let ok = |k, s, p, d| x.unfold2d(k, s, p, d, 0.0);
    assert!(matches!(
        Tensor::zeros((2, 5, 5), DType::F32, device)?.unfold2d((2, 2), (1, 1), (0, 0), (1, 1), 0.0),
        Err(Error::RankMismatch { .. })
    ));
    assert!(is_invalid(ok((0, 2), (1, 1), (0, 0), (1, 1))), "zero kernel");
    assert!(is_invalid(ok((2, 2), (1, 0), (0, 0), (1, 1))), "zero stride");
    assert!(is_invalid(ok((2, 2), (1, 1), (0, 0), (0, 1))), "zero dilation");
    assert!(is_invalid(ok((6, 2), (1, 1), (0, 0), (1, 1))), "kernel larger than the input");
    assert!(is_invalid(ok((3, 2), (1, 1), (0, 0), (3, 1))), "dilated kernel larger than the input");
    assert_eq!(ok((6, 2), (1, 1), (1, 0), (1, 1))?.dims(), &[1, 2, 12, 8], "fits once padded");
    assert!(is_invalid(ok((3, 3), (1, 1), (usize::MAX / 2 + 1, 0), (1, 1))), "padding overflows");
    assert!(is_invalid(ok((3, 3), (1, 1), (0, 0), (1, usize::MAX))), "dilation overflows");
    assert!(is_invalid(ok((usize::MAX, 1), (1, 1), (0, 0), (1, 1))), "huge kernel");
    assert!(is_invalid(ok((1, 1), (1, 1), (usize::MAX / 4, usize::MAX / 4), (1, 1))), "output too large");

    // Huge strides and padding that still fit: one window, mostly padding. A device that
    // indexes in 32 bits may reject them instead.
    let far = x.unfold2d((1, 2), (1, usize::MAX), (0, usize::MAX / 2 - 2), (1, 1), 5.0);
    if wide_index(device) || far.is_ok() {
        let far = far?;
        assert_eq!(far.dims(), &[1, 2, 2, 5]);
        assert!(far.to_vec::<f32>()?.iter().all(|&v| v == 5.0));
        let back = far.fold2d((5, 5), (1, 2), (1, usize::MAX), (0, usize::MAX / 2 - 2), (1, 1))?;
        assert!(back.to_vec::<f32>()?.iter().all(|&v| v == 0.0));
    } else {
        assert!(is_invalid(far), "a window past 32-bit indexing on {device}");
        let cols = Tensor::full(5.0, (1, 2, 2, 5), DType::F32, device)?;
        assert!(is_invalid(cols.fold2d((5, 5), (1, 2), (1, usize::MAX), (0, usize::MAX / 2 - 2), (1, 1))));
    }

    let win = Window2d { kernel: (2, 2), stride: (1, 1), padding: (0, 0), dilation: (1, 1) };
    let cols = unfold(&x, &win, 0.0)?;
    assert!(matches!(fold(&cols.flatten(0, 1)?, (5, 5), &win), Err(Error::RankMismatch { .. })));
    assert!(is_invalid(fold(&cols, (5, 6), &win)), "positions do not match the output size");
    assert!(is_invalid(fold(&cols, (1, 5), &win)), "window larger than the output");
    let other = Window2d { kernel: (1, 4), ..win };
    assert!(is_invalid(fold(&cols, (5, 5), &other)), "taps do not match the kernel");
    assert!(is_invalid(fold(&cols, (usize::MAX, usize::MAX), &win)), "output too large");
    assert!(is_invalid(cols.fold2d((5, 5), (2, 2), (0, 1), (0, 0), (1, 1))), "zero stride");
    Ok(())
}
test_device!(bad_arguments_are_errors_test, bad_arguments_are_errors);

/// Integer tensors move like any other data (only gradients need floats).
fn integer_dtypes_unfold_and_fold(device: Device) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(3);
    let data: Vec<u32> = (0..2 * 4 * 5).map(|_| rng.random_range(0..100)).collect();
    let win = Window2d { kernel: (2, 3), stride: (1, 2), padding: (1, 1), dilation: (1, 1) };
    let expected = naive_unfold(&data.iter().map(|&v| v as f64).collect::<Vec<_>>(), [1, 2, 4, 5], &win, 3.0);
    let want_folded = naive_fold(&expected, [1, 2, 4, 5], &win);
    for dtype in [DType::U32, DType::I64, DType::U8] {
        let x = Tensor::from_vec(data.clone(), (1, 2, 4, 5), CPU)?.to_dtype(dtype)?.to_device(device)?;
        let cols = unfold(&x, &win, 3.0)?;
        assert_eq!((cols.dtype(), values(&cols)), (dtype, expected.clone()), "unfold {dtype}");
        let folded = fold(&cols, (4, 5), &win)?;
        // u8 sums wrap around like every u8 addition.
        let want: Vec<f64> =
            want_folded.iter().map(|&v| if dtype == DType::U8 { (v as u64 % 256) as f64 } else { v }).collect();
        assert_eq!((folded.dtype(), values(&folded)), (dtype, want), "fold {dtype}");
    }
    Ok(())
}
test_device!(integer_dtypes_unfold_and_fold_test, integer_dtypes_unfold_and_fold);

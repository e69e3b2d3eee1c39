//! Forward correctness of every op against naive references, on every available device.
//! Most sizes are small; a few cases exceed 40,000 elements to take the parallel paths (and
//! 65,535 elements for the multi-row workgroup grids of the GPU reductions).
//!
//! Each body runs on every device with the dtypes that device supports (`floats`,
//! `supports`); reference values are computed on the host in f64.

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rnn_core::op_table::{BinaryOp, CmpOp, UnaryOp};
use rnn_core::{manual_seed, DType, Device, Epilogue, Error, Result, Tensor};
use rnn_testutil::reference::*;
use rnn_testutil::*;

fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

fn randn(rng: &mut StdRng, dims: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    Tensor::randn_with(rng, 0.0, 1.0, dims.to_vec(), dtype, device)
}

/// Relative tolerance of results rounded to `dtype` (a few ulps of the format).
fn tol(dtype: DType) -> f64 {
    tolerance(dtype).op
}

/// Checks shape and values of `got` against `want`. The tolerance is the one given, relaxed
/// on a GPU to its f32 accuracy (`tol_on`); exact checks (0.0) stay exact everywhere.
fn check_close(what: &str, got: &Tensor, dims: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.dims(), dims, "{what}: shape");
    let tol = tol_on(got.device(), tol);
    let got = values(got);
    let err = max_rel_err(&got, want);
    assert!(err <= tol, "{what}: max relative error {err:.3e} > {tol:.1e}: {}", diff_summary(&got, want));
}

// ---------------------------------------------------------------- creation and dtypes

fn creation(device: Device) -> Result<()> {
    assert_eq!(values(&Tensor::zeros((2, 3), DType::F32, device)?), vec![0.0; 6]);
    assert_eq!(values(&Tensor::ones(4, DType::I64, device)?), vec![1.0; 4]);
    for dtype in dtypes(device) {
        let full = Tensor::full(2.5, (2, 2), dtype, device)?;
        let want = if dtype.is_float() { 2.5 } else { 2.0 };
        assert_eq!((full.dims(), full.dtype(), values(&full)), (&[2usize, 2][..], dtype, vec![want; 4]), "{dtype}");
    }
    assert_eq!(Tensor::arange(0i64, 5, device)?.to_vec::<i64>()?, vec![0, 1, 2, 3, 4]);
    assert_eq!(Tensor::arange_step(1.0f32, 2.0, 0.25, device)?.to_vec::<f32>()?, vec![1.0, 1.25, 1.5, 1.75]);
    assert_eq!(Tensor::arange_step(5i64, 0, -2, device)?.to_vec::<i64>()?, vec![5, 3, 1]);
    assert_eq!(Tensor::arange(3u32, 3, device)?.dims(), &[0]);
    assert!(Tensor::arange_step(0.0f32, 1.0, 0.0, device).is_err(), "zero step");
    let v = Tensor::from_vec(vec![1u8, 2, 3, 4, 5, 6], (3, 2), device)?;
    assert_eq!((v.dims(), v.dtype()), (&[3usize, 2][..], DType::U8));
    assert_eq!(v.to_vec2::<u8>()?, vec![vec![1, 2], vec![3, 4], vec![5, 6]]);
    let s = Tensor::from_slice(&[1.5f32, -2.0], 2, device)?;
    assert_eq!(s.to_vec1::<f32>()?, vec![1.5, -2.0]);
    if supports(device, DType::F64) {
        assert_eq!(Tensor::from_slice(&[1.5f64, -2.0], 2, device)?.to_vec1::<f64>()?, vec![1.5, -2.0]);
    }
    assert!(Tensor::from_vec(vec![1.0f32; 5], (2, 3), device).is_err(), "5 elements cannot fill [2, 3]");
    let scalar = Tensor::scalar(7i64, device)?;
    assert_eq!((scalar.rank(), scalar.to_scalar::<i64>()?), (0, 7));
    Ok(())
}
test_device!(creation_test, creation);

/// A dtype the device does not hold is an `UnsupportedDType` error wherever a tensor of it
/// would be made, and an i64 value the device cannot store is an error too, never a
/// silently wrong value.
fn unsupported_dtypes(device: Device) -> Result<()> {
    let x = tensor(&[1.0, 2.0, 3.0], &[3], DType::F32, device);
    for dtype in DType::ALL.iter().copied().filter(|&d| !supports(device, d)) {
        let unsupported = |r: Result<Tensor>| matches!(r, Err(rnn_core::Error::UnsupportedDType { .. }));
        assert!(unsupported(Tensor::zeros(3, dtype, device)), "zeros {dtype} on {device}");
        assert!(unsupported(Tensor::ones(3, DType::F32, Device::Cpu)?.to_dtype(dtype)?.to_device(device)), "upload");
        assert!(unsupported(x.to_dtype(dtype)), "to_dtype {dtype} on {device}");
        assert!(Tensor::randn_with(&mut rng(5), 0.0, 1.0, 3, dtype, device).is_err(), "randn {dtype} on {device}");
    }
    let wide = Tensor::from_vec(vec![1i64 << 40, -(1i64 << 35), 7], 3, Device::Cpu)?;
    match wide.to_device(device) {
        Ok(w) => {
            assert!(wide_i64(device), "{device} took i64 values it cannot store");
            assert_eq!(w.to_vec::<i64>()?, vec![1i64 << 40, -(1i64 << 35), 7]);
            assert_eq!(w.add_scalar(1.0)?.to_vec::<i64>()?, vec![(1i64 << 40) + 1, -(1i64 << 35) + 1, 8]);
        }
        Err(e) => assert!(!wide_i64(device), "upload of wide i64 values to {device}: {e}"),
    }
    let edge = Tensor::from_vec(vec![i32::MAX as i64, i32::MIN as i64], 2, Device::Cpu)?.to_device(device)?;
    assert_eq!(edge.to_vec::<i64>()?, vec![i32::MAX as i64, i32::MIN as i64], "the i32 range fits everywhere");
    Ok(())
}
test_device!(unsupported_dtypes_test, unsupported_dtypes);

fn mean_std(v: &[f64]) -> (f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
    (mean, var.sqrt())
}

fn random_distributions(device: Device) -> Result<()> {
    let n = 100_000;
    let normal = values(&Tensor::randn_with(&mut rng(1), 1.0, 2.0, n, DType::F32, device)?);
    let (m, s) = mean_std(&normal);
    assert!((m - 1.0).abs() < 0.03 && (s - 2.0).abs() < 0.03, "randn(1, 2): mean {m}, std {s}");
    let uniform = values(&Tensor::rand_with(&mut rng(2), -1.0, 3.0, n, widest_float(device), device)?);
    let (m, s) = mean_std(&uniform);
    let expected_std = 4.0 / 12f64.sqrt();
    assert!((m - 1.0).abs() < 0.02 && (s - expected_std).abs() < 0.02, "rand(-1, 3): mean {m}, std {s}");
    assert!(uniform.iter().all(|&x| (-1.0..3.0).contains(&x)), "rand out of [-1, 3)");
    for dtype in floats(device) {
        let a = values(&Tensor::randn_with(&mut rng(3), 0.0, 1.0, 50, dtype, device)?);
        let b = values(&Tensor::randn_with(&mut rng(3), 0.0, 1.0, 50, dtype, device)?);
        assert_eq!(a, b, "same generator seed, same values ({dtype})");
    }
    assert!(Tensor::randn_with(&mut rng(4), 0.0, 1.0, 3, DType::U8, device).is_err(), "random ints are not supported");
    Ok(())
}
test_device!(random_distributions_test, random_distributions);

/// `manual_seed` drives the global generator, which every test thread shares: this is the
/// only test of this binary that uses it.
#[test]
fn manual_seed_reproducible() -> Result<()> {
    manual_seed(42);
    let (a, u) =
        (Tensor::randn(0.0, 1.0, 64, DType::F32, Device::Cpu)?, Tensor::rand(0.0, 1.0, 8, DType::F64, Device::Cpu)?);
    manual_seed(42);
    let (b, v) =
        (Tensor::randn(0.0, 1.0, 64, DType::F32, Device::Cpu)?, Tensor::rand(0.0, 1.0, 8, DType::F64, Device::Cpu)?);
    assert_eq!((a.to_vec::<f32>()?, u.to_vec::<f64>()?), (b.to_vec::<f32>()?, v.to_vec::<f64>()?));
    manual_seed(43);
    assert_ne!(a.to_vec::<f32>()?, Tensor::randn(0.0, 1.0, 64, DType::F32, Device::Cpu)?.to_vec::<f32>()?);
    Ok(())
}

fn dtype_round_trips(device: Device) -> Result<()> {
    // Exactly representable in every dtype.
    let exact = [0.0, 1.0, 2.0, 3.0, 7.0, 100.0, 127.0];
    for from in dtypes(device) {
        let x = tensor(&exact, &[7], from, device);
        assert_eq!(x.dtype(), from);
        for to in dtypes(device) {
            let y = x.to_dtype(to)?;
            assert_eq!(y.dtype(), to);
            assert_eq!(values(&y), exact, "{from} -> {to}");
            assert_eq!(values(&y.to_dtype(from)?), exact, "{from} -> {to} -> {from}");
        }
    }
    // Rounding and truncation, from the most precise float of the device.
    let x = tensor(&[0.1, -1.7, 1000.3, 2.5], &[4], widest_float(device), device);
    if supports(device, DType::F16) {
        check_close("-> f16", &x.to_dtype(DType::F16)?, &[4], &[0.1, -1.7, 1000.3, 2.5], 5e-4);
        assert_eq!(x.to_dtype(DType::F16)?.to_vec::<f16>()?[0], f16::from_f64(0.1));
    }
    if supports(device, DType::BF16) {
        check_close("-> bf16", &x.to_dtype(DType::BF16)?, &[4], &[0.1, -1.7, 1000.3, 2.5], 4e-3);
        assert_eq!(x.to_dtype(DType::BF16)?.to_vec::<bf16>()?[1], bf16::from_f64(-1.7));
    }
    assert_eq!(x.to_dtype(DType::I64)?.to_vec::<i64>()?, vec![0, -1, 1000, 2]);
    assert_eq!(x.to_dtype(DType::U8)?.to_vec::<u8>()?[3], 2);
    assert_eq!(x.to_dtype(DType::F32)?.to_vec::<f32>()?, vec![0.1f32, -1.7, 1000.3, 2.5]);
    assert!(x.to_vec::<u8>().is_err(), "to_vec with the wrong element type");
    // A strided source converts in logical order.
    let t = tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], DType::F32, device).t()?;
    assert_eq!(t.to_dtype(DType::U32)?.to_vec2::<u32>()?, vec![vec![1, 4], vec![2, 5], vec![3, 6]]);
    Ok(())
}
test_device!(dtype_round_trips_test, dtype_round_trips);

// ---------------------------------------------------------------- views and movement

fn arange24(device: Device) -> Result<Tensor> {
    Tensor::arange(0f32, 24.0, device)?.reshape((2, 3, 4))
}

/// Asserts `v` is a view of `x` and that `v[idx] = x[src(idx)]` for every element.
fn check_view(name: &str, x: &Tensor, v: &Tensor, dims: &[usize], src: impl Fn(&[usize]) -> Vec<usize>) {
    assert!(v.same_storage(x), "{name} copied its input");
    assert_eq!(v.dims(), dims, "{name}: shape");
    let (xv, vv) = (values(x), values(v));
    for (i, &got) in vv.iter().enumerate() {
        let idx = unravel(i, dims);
        assert_eq!(got, xv[ravel(&src(&idx), x.dims())], "{name} at {idx:?}");
    }
}

fn views(device: Device) -> Result<()> {
    let x = arange24(device)?;
    let flat = |i: &[usize]| unravel(ravel(i, &[4, 6]), &[2, 3, 4]);
    check_view("reshape", &x, &x.reshape((4, 6))?, &[4, 6], flat);
    check_view("transpose", &x, &x.transpose(0, 2)?, &[4, 3, 2], |i| vec![i[2], i[1], i[0]]);
    check_view("permute", &x, &x.permute(&[1, 2, 0])?, &[3, 4, 2], |i| vec![i[2], i[0], i[1]]);
    check_view("narrow", &x, &x.narrow(1, 1, 2)?, &[2, 2, 4], |i| vec![i[0], i[1] + 1, i[2]]);
    check_view("narrow of narrow", &x, &x.narrow(2, 1, 3)?.narrow(0, 1, 1)?, &[1, 3, 3], |i| vec![1, i[1], i[2] + 1]);
    let u = x.unsqueeze(1)?;
    check_view("unsqueeze", &x, &u, &[2, 1, 3, 4], |i| vec![i[0], i[2], i[3]]);
    check_view("unsqueeze(-1)", &x, &x.unsqueeze(-1)?, &[2, 3, 4, 1], |i| i[..3].to_vec());
    check_view("squeeze", &x, &u.squeeze(1)?, &[2, 3, 4], |i| i.to_vec());
    check_view("transpose then squeeze", &x, &u.transpose(0, 3)?.squeeze(1)?, &[4, 3, 2], |i| vec![i[2], i[1], i[0]]);
    let row = x.narrow(1, 2, 1)?;
    check_view("broadcast_as", &x, &row.broadcast_as((5, 2, 3, 4))?, &[5, 2, 3, 4], |i| vec![i[1], 2, i[3]]);
    check_view("flatten", &x, &x.flatten(1, 2)?, &[2, 12], |i| vec![i[0], i[1] / 4, i[1] % 4]);
    check_view("flatten_all", &x, &x.flatten_all()?, &[24], |i| unravel(i[0], &[2, 3, 4]));
    assert!(x.squeeze(0).is_err(), "squeeze of a dim of size 2");
    assert!(x.broadcast_as((3, 3, 4)).is_err(), "broadcast of 2 to 3");
    assert!(x.narrow(2, 3, 2).is_err(), "narrow past the end");
    assert!(x.permute(&[0, 0, 1]).is_err(), "not a permutation");
    assert!(x.reshape((5, 5)).is_err(), "reshape to another element count");
    Ok(())
}
test_device!(views_test, views);

fn contiguous_copies(device: Device) -> Result<()> {
    let x = arange24(device)?;
    assert!(x.contiguous()?.same_storage(&x), "contiguous of a contiguous tensor is itself");
    let t = x.transpose(1, 2)?;
    assert!(!t.is_contiguous());
    let c = t.contiguous()?;
    assert!(c.is_contiguous() && !c.same_storage(&x));
    assert_eq!(values(&c), values(&t));
    // Reshaping a non-contiguous view has to copy, and keeps the logical order.
    let r = t.reshape((2, 12))?;
    assert!(!r.same_storage(&x));
    let expect: Vec<f64> = (0..24)
        .map(|i| {
            let j = unravel(i, &[2, 4, 3]);
            (j[0] * 12 + j[2] * 4 + j[1]) as f64
        })
        .collect();
    assert_eq!(values(&r), expect);
    let n = x.narrow(2, 1, 2)?.contiguous()?;
    assert_eq!(values(&n), vec![1., 2., 5., 6., 9., 10., 13., 14., 17., 18., 21., 22.]);
    Ok(())
}
test_device!(contiguous_copies_test, contiguous_copies);

fn cat_stack(device: Device) -> Result<()> {
    let x = arange24(device)?;
    let y = x.narrow(1, 0, 2)?.mul_scalar(-1.0)?; // [2, 2, 4]
    let z = x.transpose(1, 2)?.narrow(2, 0, 1)?.transpose(1, 2)?; // [2, 1, 4], strided
    let c = Tensor::cat(&[x.clone(), y.clone(), z.clone()], 1)?;
    let (xv, yv, zv) = (values(&x), values(&y), values(&z));
    let want: Vec<f64> = (0..2 * 6 * 4)
        .map(|i| match *unravel(i, &[2, 6, 4]).as_slice() {
            [a, b, c] if b < 3 => xv[ravel(&[a, b, c], &[2, 3, 4])],
            [a, b, c] if b < 5 => yv[ravel(&[a, b - 3, c], &[2, 2, 4])],
            [a, _, c] => zv[ravel(&[a, 0, c], &[2, 1, 4])],
            _ => unreachable!(),
        })
        .collect();
    check_close("cat(1)", &c, &[2, 6, 4], &want, 0.0);
    let c0 = Tensor::cat(&[x.clone(), x.narrow(0, 1, 1)?], 0)?;
    check_close("cat(0)", &c0, &[3, 3, 4], &[xv.clone(), xv[12..].to_vec()].concat(), 0.0);
    let c2 = Tensor::cat(&[x.narrow(2, 0, 1)?, x.narrow(2, 3, 1)?], -1)?;
    let want2: Vec<f64> = (0..6).flat_map(|r| [xv[r * 4], xv[r * 4 + 3]]).collect();
    check_close("cat(-1)", &c2, &[2, 3, 2], &want2, 0.0);
    let s = Tensor::stack(&[x.clone(), x.add_scalar(100.0)?], 0)?;
    check_close("stack(0)", &s, &[2, 2, 3, 4], &[xv.clone(), xv.iter().map(|v| v + 100.0).collect()].concat(), 0.0);
    let s3 = Tensor::stack(&[x.clone(), x.add_scalar(100.0)?], 3)?;
    let want3: Vec<f64> = xv.iter().flat_map(|&v| [v, v + 100.0]).collect();
    check_close("stack(3)", &s3, &[2, 3, 4, 2], &want3, 0.0);
    assert!(Tensor::cat(&[x.clone(), y.clone()], 0).is_err(), "cat of mismatched dims");
    assert!(Tensor::stack(&[x.clone(), y], 0).is_err(), "stack of different shapes");
    assert!(Tensor::cat(&[], 0).is_err(), "cat of nothing");
    Ok(())
}
test_device!(cat_stack_test, cat_stack);

fn read_back(device: Device) -> Result<()> {
    let x = arange24(device)?;
    assert_eq!(x.to_vec::<f32>()?, (0..24).map(|v| v as f32).collect::<Vec<_>>());
    let v3 = x.to_vec3::<f32>()?;
    assert_eq!((v3.len(), v3[1].len(), v3[1][2].clone()), (2, 3, vec![20.0, 21.0, 22.0, 23.0]));
    assert_eq!(x.narrow(0, 1, 1)?.squeeze(0)?.t()?.to_vec2::<f32>()?[3], vec![15.0, 19.0, 23.0]);
    assert_eq!(x.narrow(2, 3, 1)?.narrow(1, 2, 1)?.narrow(0, 1, 1)?.to_scalar::<f32>()?, 23.0);
    assert!(x.to_vec2::<f32>().is_err() && x.to_vec1::<f32>().is_err(), "wrong rank");
    assert!(x.to_scalar::<f32>().is_err(), "24 elements are not a scalar");
    Ok(())
}
test_device!(read_back_test, read_back);

fn ndarray_round_trip(device: Device) -> Result<()> {
    use ndarray::{Array2, Ix2, ShapeBuilder};
    let a = Array2::from_shape_fn((3, 4), |(i, j)| (i * 10 + j) as f32);
    let t = Tensor::from_ndarray(&a, device)?;
    assert_eq!((t.dims(), t.device()), (&[3usize, 4][..], device));
    assert_eq!(t.to_ndarray_dim::<f32, Ix2>()?, a);
    // Column-major memory: the tensor still sees the logical order.
    let f = Array2::from_shape_vec((2, 3).f(), vec![1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0]).expect("shape");
    let tf = Tensor::from_ndarray(&f, device)?;
    assert_eq!(tf.to_vec2::<f32>()?, vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]);
    assert_eq!(tf.t()?.to_ndarray_dim::<f32, Ix2>()?, f.t());
    assert!(t.to_ndarray_dim::<f32, ndarray::Ix3>().is_err(), "rank 2 is not rank 3");
    if supports(device, DType::F64) {
        let d = Array2::from_shape_fn((2, 2), |(i, j)| (i as f64) - 0.5 * j as f64);
        assert_eq!(Tensor::from_ndarray(&d, device)?.to_ndarray_dim::<f64, Ix2>()?, d);
    }
    Ok(())
}
test_device!(ndarray_round_trip_test, ndarray_round_trip);

// ---------------------------------------------------------------- elementwise

fn unary_input(op: UnaryOp, rng: &mut StdRng, dims: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    let positive = matches!(op, UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Recip);
    let (lo, hi) = if positive { (0.1, 4.0) } else { (-4.0, 4.0) };
    Tensor::rand_with(rng, lo, hi, dims.to_vec(), dtype, device)
}

fn check_unary(op: UnaryOp, x: &Tensor, tol: f64, what: &str) -> Result<()> {
    let want: Vec<f64> = values(x).into_iter().map(|v| op.eval_f64(v)).collect();
    check_close(&format!("{} {what} ({})", op.name(), x.dtype()), &x.unary(op)?, x.dims(), &want, tol);
    Ok(())
}

fn unary_ops(device: Device) -> Result<()> {
    let mut r = rng(10);
    for &op in UnaryOp::ALL {
        for dtype in floats(device) {
            let x = unary_input(op, &mut r, &[3, 5, 4], dtype, device)?;
            check_unary(op, &x, tol(dtype), "contiguous")?;
            check_unary(op, &x.transpose(0, 2)?.narrow(1, 1, 3)?, tol(dtype), "strided")?;
        }
        // Over the parallel threshold, contiguous and strided.
        let big = unary_input(op, &mut r, &[250, 200], DType::F32, device)?;
        check_unary(op, &big, tol(DType::F32), "big")?;
        check_unary(op, &big.t()?, tol(DType::F32), "big transposed")?;
        assert!(Tensor::ones(3, DType::I64, device)?.unary(op).is_err(), "{} of an integer tensor", op.name());
    }
    Ok(())
}
test_device!(unary_ops_test, unary_ops);

fn binary_ref(op: BinaryOp) -> fn(f64, f64) -> f64 {
    match op {
        BinaryOp::Add => |a, b| a + b,
        BinaryOp::Sub => |a, b| a - b,
        BinaryOp::Mul => |a, b| a * b,
        BinaryOp::Div => |a, b| a / b,
        BinaryOp::Pow => f64::powf,
        BinaryOp::Maximum => f64::max,
        BinaryOp::Minimum => f64::min,
        BinaryOp::FloorDivide => |a, b| (a / b).floor(),
        BinaryOp::Remainder => |a, b| a - b * (a / b).floor(),
    }
}

fn binary_input(
    op: BinaryOp,
    lhs: bool,
    rng: &mut StdRng,
    dims: &[usize],
    dtype: DType,
    device: Device,
) -> Result<Tensor> {
    match (op, lhs) {
        (BinaryOp::Pow, true) => Tensor::rand_with(rng, 0.1, 3.0, dims.to_vec(), dtype, device),
        (BinaryOp::Div | BinaryOp::FloorDivide | BinaryOp::Remainder, false) => {
            Tensor::rand_with(rng, 0.5, 2.0, dims.to_vec(), dtype, device)
        }
        _ => Tensor::rand_with(rng, -3.0, 3.0, dims.to_vec(), dtype, device),
    }
}

fn check_binary(op: BinaryOp, a: &Tensor, b: &Tensor, tol: f64, what: &str) -> Result<()> {
    let (od, want) = zip_ref(&values(a), a.dims(), &values(b), b.dims(), binary_ref(op));
    check_close(&format!("{} {what} ({})", op.name(), a.dtype()), &a.binary(b, op)?, &od, &want, tol);
    Ok(())
}

fn binary_ops(device: Device) -> Result<()> {
    let mut r = rng(11);
    let shapes: [(&[usize], &[usize]); 5] =
        [(&[2, 3], &[2, 3]), (&[3, 1, 4], &[2, 4]), (&[4], &[3, 1]), (&[2, 3, 4], &[]), (&[], &[5])];
    for &op in BinaryOp::ALL {
        for dtype in floats(device) {
            for (sa, sb) in shapes {
                let (a, b) = (
                    binary_input(op, true, &mut r, sa, dtype, device)?,
                    binary_input(op, false, &mut r, sb, dtype, device)?,
                );
                check_binary(op, &a, &b, tol(dtype), &format!("{sa:?} with {sb:?}"))?;
            }
            let a = binary_input(op, true, &mut r, &[4, 3], dtype, device)?.t()?;
            let b = binary_input(op, false, &mut r, &[3, 6], dtype, device)?.narrow(1, 1, 4)?;
            check_binary(op, &a, &b, tol(dtype), "transposed with narrowed")?;
        }
        let a = binary_input(op, true, &mut r, &[300, 200], DType::F32, device)?;
        let b = binary_input(op, false, &mut r, &[300, 200], DType::F32, device)?;
        check_binary(op, &a, &b, tol(DType::F32), "big")?;
        check_binary(op, &a, &b.narrow(0, 0, 1)?, tol(DType::F32), "big broadcast row")?;
        check_binary(op, &a.narrow(1, 0, 1)?, &b, tol(DType::F32), "big broadcast column")?;
        check_binary(op, &a, &b.t()?.contiguous()?.t()?, tol(DType::F32), "big with transposed rhs")?;
        check_binary(op, &a.t()?, &b.t()?, tol(DType::F32), "big both transposed")?;
    }
    Ok(())
}
test_device!(binary_ops_test, binary_ops);

fn binary_scalar_and_int(device: Device) -> Result<()> {
    let x = tensor(&[1.0, -2.0, 3.5, 4.0], &[2, 2], DType::F32, device);
    check_close("add_scalar", &x.add_scalar(1.5)?, &[2, 2], &[2.5, -0.5, 5.0, 5.5], 0.0);
    check_close("sub_scalar", &x.sub_scalar(1.0)?, &[2, 2], &[0.0, -3.0, 2.5, 3.0], 0.0);
    check_close("mul_scalar", &x.mul_scalar(-2.0)?, &[2, 2], &[-2.0, 4.0, -7.0, -8.0], 0.0);
    check_close("div_scalar", &x.div_scalar(2.0)?, &[2, 2], &[0.5, -1.0, 1.75, 2.0], 0.0);
    check_close("pow_scalar", &x.abs()?.pow_scalar(2.0)?, &[2, 2], &[1.0, 4.0, 12.25, 16.0], 1e-6);
    check_close("maximum_scalar", &x.maximum_scalar(2.0)?, &[2, 2], &[2.0, 2.0, 3.5, 4.0], 0.0);
    check_close("minimum_scalar", &x.minimum_scalar(2.0)?, &[2, 2], &[1.0, -2.0, 2.0, 2.0], 0.0);
    let i = Tensor::from_vec(vec![7i64, -8, 9, 10], 4, device)?;
    let j = Tensor::from_vec(vec![2i64, 3, 0, -4], 4, device)?;
    assert_eq!(i.add(&j)?.to_vec::<i64>()?, vec![9, -5, 9, 6]);
    assert_eq!(i.mul(&j)?.to_vec::<i64>()?, vec![14, -24, 0, -40]);
    assert_eq!(i.div(&j)?.dtype(), DType::F32, "integers divide as f32 (integer_division_is_true_division)");
    assert_eq!(i.maximum(&j)?.to_vec::<i64>()?, vec![7, 3, 9, 10]);
    // Python's // and % on integers (PyTorch's values); a zero divisor is an error, as
    // PyTorch's ZeroDivisionError; a fractional scalar makes the result f32.
    let (p, q) =
        (Tensor::from_vec(vec![7i64, -7, 7, -7], 4, device)?, Tensor::from_vec(vec![2i64, 2, -2, -2], 4, device)?);
    assert_eq!(p.floor_divide(&q)?.to_vec::<i64>()?, vec![3, -4, -4, 3]);
    assert_eq!(p.remainder(&q)?.to_vec::<i64>()?, vec![1, 1, -1, -1]);
    for r in [i.floor_divide(&j), i.remainder(&j), i.remainder_scalar(0.0)] {
        let e = r.expect_err("integer // or % by zero").to_string();
        assert!(e.contains("division by zero"), "{e}");
    }
    assert_eq!(p.floor_divide_scalar(2.5)?.to_vec::<f32>()?, vec![2.0, -3.0, 2.0, -3.0]);
    assert_eq!(p.remainder_scalar(-3.0)?.to_vec::<i64>()?, vec![-2, -1, -2, -1]);
    let v = Tensor::from_vec(vec![7u8, 200], 2, device)?;
    let w = Tensor::from_vec(vec![2u8, 3], 2, device)?;
    assert_eq!((v.floor_divide(&w)?.to_vec::<u8>()?, v.remainder(&w)?.to_vec::<u8>()?), (vec![3, 66], vec![1, 2]));
    let u = Tensor::from_vec(vec![250u8, 3], 2, device)?;
    assert_eq!(u.add_scalar(10.0)?.to_vec::<u8>()?, vec![4, 13], "u8 addition wraps");
    assert_eq!(u.add_scalar(0.5)?.to_vec::<f32>()?, vec![250.5, 3.5], "a fractional scalar makes it f32");
    assert!(x.add(&i).is_err(), "f32 + i64");
    assert!(x.add(&tensor(&[1.0; 3], &[3], DType::F32, device)).is_err(), "[2, 2] + [3]");
    Ok(())
}
test_device!(binary_scalar_and_int_test, binary_scalar_and_int);

fn compare_where(device: Device) -> Result<()> {
    // Small integers, so that many elements tie.
    let av = [0.0, 1.0, 2.0, 1.0, 0.0, 2.0, 2.0, 1.0, 0.0, 1.0, 1.0, 2.0];
    for dtype in
        [DType::F32, DType::BF16, DType::F16, DType::I64, DType::U8].into_iter().filter(|&d| supports(device, d))
    {
        let a = tensor(&av, &[3, 1, 4], dtype, device);
        let b = tensor(&[1.0, 0.0, 2.0, 1.0, 1.0, 1.0, 0.0, 2.0], &[2, 4], dtype, device);
        for &op in CmpOp::ALL {
            let (od, want) = zip_ref(&values(&a), a.dims(), &values(&b), b.dims(), |x, y| op.eval(x, y) as u8 as f64);
            let got = a.cmp(&b, op)?;
            assert_eq!(got.dtype(), DType::U8);
            check_close(&format!("{} ({dtype})", op.name()), &got, &od, &want, 0.0);
        }
    }
    let x = tensor(&[0.5, -1.0, 2.0, 1.0], &[4], DType::F32, device);
    assert_eq!(x.gt_scalar(0.75)?.to_vec::<u8>()?, vec![0, 0, 1, 1]);
    assert_eq!(x.le_scalar(1.0)?.to_vec::<u8>()?, vec![1, 1, 0, 1]);
    assert_eq!(x.eq_scalar(2.0)?.to_vec::<u8>()?, vec![0, 0, 1, 0]);
    assert_eq!(x.ne(&x.add_scalar(0.0)?)?.to_vec::<u8>()?, vec![0; 4]);
    for cond_dtype in [DType::U8, DType::U32, DType::I64] {
        let cond = tensor(&[1.0, 0.0, 5.0], &[3, 1], cond_dtype, device);
        let t = tensor(&[10.0, 20.0], &[2], DType::F32, device);
        let f = tensor(&[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0], &[3, 2], DType::F32, device);
        let got = cond.where_cond(&t, &f)?;
        check_close("where_cond", &got, &[3, 2], &[10.0, 20.0, -3.0, -4.0, 10.0, 20.0], 0.0);
    }
    assert!(x.where_cond(&x, &x).is_err(), "a float condition");
    Ok(())
}
test_device!(compare_where_test, compare_where);

fn clamp_masked_fill(device: Device) -> Result<()> {
    let mut r = rng(12);
    let x = randn(&mut r, &[4, 6], DType::F32, device)?.t()?;
    let xv = values(&x);
    let want: Vec<f64> = xv.iter().map(|v| v.clamp(-0.5, 0.3f32 as f64)).collect(); // bounds in f32
    check_close("clamp", &x.clamp(-0.5, 0.3)?, &[6, 4], &want, 0.0);
    assert!(x.clamp(1.0, -1.0).is_err(), "min > max");
    let mask = x.gt_scalar(0.0)?;
    let want: Vec<f64> = xv.iter().map(|&v| if v > 0.0 { 9.0 } else { v }).collect();
    check_close("masked_fill", &x.masked_fill(&mask, 9.0)?, &[6, 4], &want, 0.0);
    let row = Tensor::from_vec(vec![1u8, 0, 0, 1], 4, device)?;
    let want: Vec<f64> = xv.iter().enumerate().map(|(i, &v)| if i % 4 == 0 || i % 4 == 3 { -1.0 } else { v }).collect();
    check_close("masked_fill broadcast", &x.masked_fill(&row, -1.0)?, &[6, 4], &want, 0.0);
    Ok(())
}
test_device!(clamp_masked_fill_test, clamp_masked_fill);

/// `maximum`, `minimum` and so `clamp` keep NaN on every device, as `torch.maximum` does (the
/// GPUs' fmax / max would drop it).
fn nan_extremes(device: Device) -> Result<()> {
    for dtype in floats(device) {
        let a = Tensor::from_vec(vec![f32::NAN, 1.0, f32::NAN, -2.0, f32::INFINITY], 5, Device::Cpu)?;
        let b = Tensor::from_vec(vec![0.5f32, f32::NAN, f32::NAN, 3.0, f32::NEG_INFINITY], 5, Device::Cpu)?;
        let (a, b) = (a.to_dtype(dtype)?.to_device(device)?, b.to_dtype(dtype)?.to_device(device)?);
        let got = |t: Tensor| -> Result<Vec<f64>> { t.to_device(Device::Cpu)?.to_dtype(DType::F64)?.to_vec::<f64>() };
        let same = |got: Vec<f64>, want: [f64; 5], what: &str| {
            let ok = got.iter().zip(want).all(|(&g, w)| (g.is_nan() && w.is_nan()) || g == w);
            assert!(ok, "{what} on {device} ({dtype}): {got:?}, want {want:?}");
        };
        let nan = f64::NAN;
        same(got(a.maximum(&b)?)?, [nan, nan, nan, 3.0, f64::INFINITY], "maximum");
        same(got(a.minimum(&b)?)?, [nan, nan, nan, -2.0, f64::NEG_INFINITY], "minimum");
        same(got(a.clamp(-1.0, 1.0)?)?, [nan, 1.0, nan, -1.0, 1.0], "clamp");
    }
    Ok(())
}
test_device!(nan_extremes_test, nan_extremes);

// ---------------------------------------------------------------- reductions

#[derive(Clone, Copy, Debug)]
enum Red {
    Sum,
    Mean,
    Max,
    Min,
    ArgMax,
    ArgMin,
    Var,
}
const REDS: [Red; 7] = [Red::Sum, Red::Mean, Red::Max, Red::Min, Red::ArgMax, Red::ArgMin, Red::Var];

fn apply(x: &Tensor, red: Red, dims: Vec<usize>, keep: bool) -> Result<Tensor> {
    match (red, keep) {
        (Red::Sum, false) => x.sum(dims),
        (Red::Sum, true) => x.sum_keepdim(dims),
        (Red::Mean, false) => x.mean(dims),
        (Red::Mean, true) => x.mean_keepdim(dims),
        (Red::Max, false) => x.max(dims),
        (Red::Max, true) => x.max_keepdim(dims),
        (Red::Min, false) => x.min(dims),
        (Red::Min, true) => x.min_keepdim(dims),
        (Red::ArgMax, false) => x.argmax(dims),
        (Red::ArgMax, true) => x.argmax_keepdim(dims),
        (Red::ArgMin, false) => x.argmin(dims),
        (Red::ArgMin, true) => x.argmin_keepdim(dims),
        (Red::Var, false) => x.var(dims),
        (Red::Var, true) => x.var_keepdim(dims),
    }
}

/// The naive value of one group of elements.
fn red_ref(red: Red, g: &[f64]) -> f64 {
    let n = g.len() as f64;
    let pos = |better: fn(f64, f64) -> bool| {
        (0..g.len()).fold(0, |best, i| if better(g[i], g[best]) { i } else { best }) as f64
    };
    match red {
        Red::Sum => g.iter().sum(),
        Red::Mean => g.iter().sum::<f64>() / n,
        Red::Max => g.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Red::Min => g.iter().copied().fold(f64::INFINITY, f64::min),
        Red::ArgMax => pos(|a, b| a > b),
        Red::ArgMin => pos(|a, b| a < b),
        Red::Var => {
            let m = g.iter().sum::<f64>() / n;
            g.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)
        }
    }
}

fn check_reduce(x: &Tensor, red: Red, dims: &[usize], keep: bool, tol: f64) -> Result<()> {
    let (kept, want) = reduce_ref(&values(x), x.dims(), dims, |g| red_ref(red, g));
    let out_dims: Vec<usize> =
        if keep { kept } else { (0..x.rank()).filter(|d| !dims.contains(d)).map(|d| x.dims()[d]).collect() };
    let got = apply(x, red, dims.to_vec(), keep)?;
    let arg = matches!(red, Red::ArgMax | Red::ArgMin);
    assert_eq!(got.dtype(), if arg { DType::I64 } else { x.dtype() }, "{red:?} dtype");
    let what = format!(
        "{red:?} over {dims:?} keepdim={keep} of {:?} {} (contiguous: {})",
        x.dims(),
        x.dtype(),
        x.is_contiguous()
    );
    check_close(&what, &got, &out_dims, &want, if arg { 0.0 } else { tol });
    Ok(())
}

/// Every non-empty set of dims of `x`, every reduction, with and without keepdim.
fn check_all_reductions(x: &Tensor, tol: f64) -> Result<()> {
    for mask in 1u32..(1 << x.rank()) {
        let dims: Vec<usize> = (0..x.rank()).filter(|d| mask & (1 << d) != 0).collect();
        for red in REDS {
            for keep in [false, true] {
                check_reduce(x, red, &dims, keep, tol)?;
            }
        }
    }
    Ok(())
}

fn reductions(device: Device) -> Result<()> {
    let mut r = rng(13);
    for dtype in [DType::F32, DType::F64].into_iter().filter(|&d| supports(device, d)) {
        check_all_reductions(&randn(&mut r, &[3, 4, 5], dtype, device)?, 4.0 * tol(dtype))?;
        let x4 = randn(&mut r, &[2, 3, 4, 5], dtype, device)?;
        check_all_reductions(&x4, 4.0 * tol(dtype))?;
        check_all_reductions(&x4.permute(&[2, 0, 3, 1])?, 4.0 * tol(dtype))?;
        check_all_reductions(&x4.narrow(3, 1, 3)?.narrow(0, 1, 1)?, 4.0 * tol(dtype))?;
    }
    for dtype in [DType::F16, DType::BF16].into_iter().filter(|&d| supports(device, d)) {
        let h = randn(&mut r, &[4, 6, 5], dtype, device)?;
        for red in REDS {
            check_reduce(&h, red, &[1], false, 4.0 * tol(dtype))?;
        }
    }
    let i = Tensor::from_vec(vec![3i64, -7, 2, 9, 0, 4], (2, 3), device)?;
    assert_eq!(i.sum(1)?.to_vec::<i64>()?, vec![-2, 13]);
    assert_eq!(i.max(0)?.to_vec::<i64>()?, vec![9, 0, 4]);
    assert_eq!(i.argmin(1)?.to_vec::<i64>()?, vec![1, 1]);
    let ties = Tensor::from_vec(vec![1.0f32, 3.0, 3.0, 0.0, 0.0, 3.0], (2, 3), device)?;
    assert_eq!(ties.argmax(1)?.to_vec::<i64>()?, vec![1, 2], "ties pick the first");
    assert_eq!(ties.argmin(1)?.to_vec::<i64>()?, vec![0, 0]);
    let empty = Tensor::zeros((2, 0), DType::F32, device)?;
    assert_eq!(empty.sum(1)?.to_vec::<f32>()?, vec![0.0, 0.0]);
    assert!(empty.max(1).is_err() && empty.argmax(1).is_err(), "max over an empty dim");
    // log(sum(exp())) of nothing: log(0), as PyTorch's; the empty input's gradient is empty.
    let x = empty.requires_grad();
    let lse = x.logsumexp_keepdim(1)?;
    assert_eq!((lse.dims(), lse.to_vec::<f32>()?), (&[2, 1][..], vec![f32::NEG_INFINITY; 2]));
    assert_eq!(x.logsumexp(rnn_core::AllDims)?.to_vec::<f32>()?, vec![f32::NEG_INFINITY]);
    assert_eq!(empty.logsumexp(0)?.dims(), &[0], "no slices: an empty result");
    let grads = lse.sum_all()?.backward()?;
    assert_eq!(grads.get(&x).expect("a gradient for x").dims(), &[2, 0]);
    // No outputs, each of a long reduction (the GPUs split those over blocks per output).
    let no_rows = Tensor::zeros((0, 5000), DType::F32, device)?;
    assert_eq!(no_rows.sum(1)?.dims(), &[0]);
    assert_eq!(no_rows.max_keepdim(1)?.dims(), &[0, 1]);
    assert!(i.sum([0, 0]).is_err() && i.sum(2).is_err(), "bad dims");
    Ok(())
}
test_device!(reductions_test, reductions);

/// Integer sums are exact i64 (PyTorch promotes integer sums, bool-like u8 included, to
/// int64): a u8 sum does not stop at 255. mean and var of integers are errors, as in
/// PyTorch (which cannot infer their dtype), and argmax / argmin give i64 positions.
fn integer_reductions_match_pytorch_dtypes(device: Device) -> Result<()> {
    let bytes = Tensor::full(200.0, (3, 300), DType::U8, device)?;
    let sums = bytes.sum(1)?;
    assert_eq!(sums.dtype(), DType::I64);
    assert_eq!(sums.to_vec::<i64>()?, vec![60_000; 3]);
    assert_eq!(bytes.sum_all()?.to_vec::<i64>()?, vec![180_000]);
    assert_eq!(bytes.gt_scalar(100.0)?.sum_keepdim(0)?.dims(), &[1, 300], "a comparison's count");
    let words = Tensor::full(4e9, 4, DType::U32, device)?;
    let words_sum = words.sum(0)?.to_vec::<i64>()?;
    // wgpu stores i64 as i32: its sums saturate at i32's range (the CPU and CUDA are exact).
    let want = if matches!(device, Device::Wgpu(_)) { i64::from(i32::MAX) } else { 16_000_000_000 };
    assert_eq!(words_sum, vec![want], "u32 sum");
    let signed = Tensor::from_vec(vec![-5i64, 3, -9, 4], (2, 2), device)?;
    assert_eq!(signed.sum(0)?.to_vec::<i64>()?, vec![-14, 7]);
    for x in [&bytes, &words, &signed] {
        for (what, r) in [("mean", x.mean(0)), ("mean", x.mean_all()), ("var", x.var(0))] {
            match r {
                Err(Error::UnsupportedDType { op, dtype, .. }) => assert_eq!((op, dtype), (what, x.dtype())),
                other => panic!("{what} of {}: {other:?}", x.dtype()),
            }
        }
        assert_eq!(x.argmax(0)?.dtype(), DType::I64);
        assert_eq!(x.argmin(0)?.dtype(), DType::I64);
    }
    assert_eq!(x_f32(device)?.argmax(0)?.dtype(), DType::I64);
    Ok(())
}
test_device!(integer_reductions_match_pytorch_dtypes_test, integer_reductions_match_pytorch_dtypes);

fn x_f32(device: Device) -> Result<Tensor> {
    Tensor::from_vec(vec![1f32, 3.0, 2.0], 3, device)
}

/// Dividing integers is PyTorch's true division: the result is f32, so `7 / 2` is 3.5 and a
/// zero divisor gives ±inf or NaN, never an integer made up for it.
fn integer_division_is_true_division(device: Device) -> Result<()> {
    for dtype in [DType::U8, DType::U32, DType::I64] {
        let a = Tensor::from_vec(vec![7f64, 9., 1., 0.], 4, Device::Cpu)?.to_dtype(dtype)?.to_device(device)?;
        let b = Tensor::from_vec(vec![2f64, 4., 0., 0.], 4, Device::Cpu)?.to_dtype(dtype)?.to_device(device)?;
        let q = a.div(&b)?;
        assert_eq!(q.dtype(), DType::F32, "{dtype}");
        let got = q.to_vec::<f32>()?;
        // GPU float division may be a few ulp off (WGSL allows 2.5), hence `close`.
        let close = |got: &[f32], want: &[f32]| got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 1e-6 * w.abs());
        assert!(close(&got[..2], &[3.5, 2.25]) && got[2] == f32::INFINITY, "{dtype}: {got:?}");
        assert!(got[3].is_nan(), "0 / 0 is NaN ({dtype}): {got:?}");
        assert!(close(&(&a / &b)?.to_vec::<f32>()?[..2], &[3.5, 2.25]), "the / operator ({dtype})");
        let halves = a.div_scalar(2.5)?.to_vec::<f32>()?;
        assert!(close(&halves, &[2.8, 3.6, 0.4, 0.0]), "the scalar is not truncated ({dtype}): {halves:?}");
    }
    let signed = Tensor::from_vec(vec![-7i64, 7], 2, device)?;
    let q = signed.div(&Tensor::from_vec(vec![2i64, 0], 2, device)?)?.to_vec::<f32>()?;
    assert!((q[0] + 3.5).abs() < 1e-6 && q[1] == f32::INFINITY, "{q:?}");
    let mixed = signed.div(&Tensor::from_vec(vec![2u32, 1], 2, device)?);
    assert!(matches!(mixed, Err(Error::DTypeMismatch { op: "div", .. })), "{mixed:?}");
    Ok(())
}
test_device!(integer_division_is_true_division_test, integer_division_is_true_division);

fn reductions_big(device: Device) -> Result<()> {
    let mut r = rng(14);
    // Many outputs (parallel over outputs), inner == 1 and inner > 1.
    let x = randn(&mut r, &[40_000, 3], DType::F32, device)?;
    for red in [Red::Sum, Red::Max, Red::ArgMin] {
        check_reduce(&x, red, &[1], false, 1e-5)?;
        check_reduce(&x.t()?.contiguous()?, red, &[0], true, 1e-5)?;
    }
    check_reduce(&x.t()?, Red::Mean, &[1], false, 1e-5)?;
    // Long rows split over the threads.
    let mut row = values(&randn(&mut r, &[100_003], DType::F32, device)?);
    row[40_001] = 10.0;
    row[99_999] = 10.0; // a tie in a later chunk: the first one wins
    row[41_234] = -10.0;
    let t = tensor(&row, &[1, row.len()], DType::F32, device);
    for red in [Red::Sum, Red::Mean, Red::Max, Red::Min, Red::ArgMax, Red::ArgMin, Red::Var] {
        check_reduce(&t, red, &[1], false, 1e-5)?;
    }
    assert_eq!(t.argmax(1)?.to_vec::<i64>()?, vec![40_001]);
    let two = randn(&mut r, &[2, 50_000], widest_float(device), device)?;
    for red in [Red::Sum, Red::Max, Red::ArgMax] {
        check_reduce(&two, red, &[1], true, if two.dtype() == DType::F64 { 1e-12 } else { 1e-5 })?;
    }
    let total = Tensor::ones(100_000, DType::F32, device)?.sum_all()?.to_scalar::<f32>()?;
    assert_eq!(total, 100_000.0);
    Ok(())
}
test_device!(reductions_big_test, reductions_big);

fn softmax_ref(x: &[f64], dims: &[usize], dim: usize, log: bool) -> Vec<f64> {
    let (_, max) = reduce_ref(x, dims, &[dim], |g| g.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    let (_, sum) = reduce_ref(x, dims, &[dim], |g| {
        let m = g.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        g.iter().map(|v| (v - m).exp()).sum()
    });
    let mut kept = dims.to_vec();
    kept[dim] = 1;
    (0..x.len())
        .map(|i| {
            let mut idx = unravel(i, dims);
            idx[dim] = 0;
            let (m, s) = (max[ravel(&idx, &kept)], sum[ravel(&idx, &kept)]);
            if log {
                x[i] - m - s.ln()
            } else {
                (x[i] - m).exp() / s
            }
        })
        .collect()
}

fn softmax(device: Device) -> Result<()> {
    let mut r = rng(15);
    for dtype in floats(device) {
        let x = randn(&mut r, &[3, 4, 5], dtype, device)?.mul_scalar(3.0)?;
        for (dim, input) in [(0, x.clone()), (1, x.clone()), (2, x.clone()), (1, x.transpose(0, 2)?)] {
            let xv = values(&input);
            let sm = input.softmax(dim)?;
            check_close("softmax", &sm, input.dims(), &softmax_ref(&xv, input.dims(), dim, false), 2.0 * tol(dtype));
            let lsm = input.log_softmax(dim)?;
            check_close(
                "log_softmax",
                &lsm,
                input.dims(),
                &softmax_ref(&xv, input.dims(), dim, true),
                2.0 * tol(dtype),
            );
            let sums = sm.sum(dim)?;
            check_close("softmax sums to 1", &sums, sums.dims(), &vec![1.0; sums.elem_count()], 2.0 * tol(dtype));
        }
    }
    // Large inputs must not overflow.
    let big = tensor(&[1000.0, 1001.0, 999.0, -1000.0, 0.0, 1000.0], &[2, 3], DType::F32, device);
    let want = softmax_ref(&values(&big), &[2, 3], 1, false);
    check_close("softmax of 1000s", &big.softmax(-1)?, &[2, 3], &want, 1e-6);
    let want = softmax_ref(&values(&big), &[2, 3], 1, true);
    let got = big.log_softmax(-1)?;
    assert!(values(&got).iter().all(|v| v.is_finite()), "log_softmax of 1000s: {:?}", values(&got));
    check_close("log_softmax of 1000s", &got, &[2, 3], &want, 1e-6);
    Ok(())
}
test_device!(softmax_test, softmax);

// ---------------------------------------------------------------- matmul

fn check_matmul(a: &Tensor, b: &Tensor, tol: f64, what: &str) -> Result<()> {
    let (ad, bd) = (a.dims().to_vec(), b.dims().to_vec());
    let (ad2, bd2) = (
        if ad.len() == 1 { vec![1, ad[0]] } else { ad.clone() },
        if bd.len() == 1 { vec![bd[0], 1] } else { bd.clone() },
    );
    let (mut od, want) = matmul_ref(&values(a), &ad2, &values(b), &bd2);
    if bd.len() == 1 {
        od.pop();
    }
    if ad.len() == 1 {
        od.remove(od.len() - if bd.len() == 1 { 1 } else { 2 });
    }
    check_close(&format!("matmul {what} {ad:?} @ {bd:?} ({})", a.dtype()), &a.matmul(b)?, &od, &want, tol);
    Ok(())
}

fn matmul(device: Device) -> Result<()> {
    let mut r = rng(16);
    for dtype in floats(device) {
        let t = 4.0 * tol(dtype);
        let mut m = |dims: &[usize]| randn(&mut r, dims, dtype, device);
        check_matmul(&m(&[5, 7])?, &m(&[7, 3])?, t, "2-D")?;
        check_matmul(&m(&[2, 5, 7])?, &m(&[2, 7, 3])?, t, "batched")?;
        check_matmul(&m(&[2, 1, 5, 7])?, &m(&[3, 7, 4])?, t, "broadcast batch")?;
        check_matmul(&m(&[5, 7])?, &m(&[4, 7, 2])?, t, "2-D @ batched")?;
        check_matmul(&m(&[7, 5])?.t()?, &m(&[3, 7])?.t()?, t, "transposed operands")?;
        check_matmul(&m(&[2, 7, 5])?.t()?, &m(&[7, 6])?.narrow(1, 2, 3)?, t, "batched transposed @ narrowed")?;
        check_matmul(&m(&[7])?, &m(&[7, 3])?, t, "1-D @ 2-D")?;
        check_matmul(&m(&[5, 7])?, &m(&[7])?, t, "2-D @ 1-D")?;
        check_matmul(&m(&[2, 5, 7])?, &m(&[7])?, t, "batched @ 1-D")?;
        check_matmul(&m(&[7])?, &m(&[7])?, t, "1-D @ 1-D")?;
    }
    let f32s = |r: &mut StdRng, dims: &[usize]| randn(r, dims, DType::F32, device);
    check_matmul(&f32s(&mut r, &[128, 256])?, &f32s(&mut r, &[256, 64])?, 1e-4, "big")?;
    check_matmul(&f32s(&mut r, &[256, 128])?.t()?, &f32s(&mut r, &[64, 256])?.t()?, 1e-4, "big transposed")?;
    check_matmul(&f32s(&mut r, &[4, 64, 128])?, &f32s(&mut r, &[4, 128, 64])?, 1e-4, "big batched")?;
    let x = Tensor::ones((2, 3), DType::F32, device)?;
    assert!(x.matmul(&x).is_err(), "inner dims 3 and 2");
    assert!(x.matmul(&x.t()?.to_dtype(other_dtype(device, DType::F32))?).is_err(), "mixed dtypes");
    assert!(x.to_dtype(DType::I64)?.matmul(&x.t()?.to_dtype(DType::I64)?).is_err(), "integer matmul");
    assert!(x.matmul(&Tensor::scalar(1.0f32, device)?).is_err(), "0-D operand");
    Ok(())
}
test_device!(matmul_test, matmul);

/// Shapes and layouts around the kernels' tiles and access modes: sizes that are not
/// multiples of a workgroup's output tile (32 x 256 on CPU adapters, 64 x 64 on GPUs) and
/// span several of them, 1 x N and N x 1, k = 1, and b with 4-aligned contiguous rows (vec4
/// access) next to b transposed, narrowed at an odd offset, or with n or a batch stride not
/// a multiple of 4 (element access).
fn matmul_tiles(device: Device) -> Result<()> {
    let mut r = rng(17);
    for dtype in floats(device) {
        // f16 / bf16 outputs are f32 sums rounded once to the half type, but the inputs'
        // rounding and the devices' summation orders differ: allow a few dozen of its ulps
        // (k <= 64 here). A wrong index is off by O(1).
        let half = matches!(dtype, DType::F16 | DType::BF16);
        let t = if half { 32.0 } else { 4.0 } * tol(dtype);
        let mut m = |dims: &[usize]| randn(&mut r, dims, dtype, device);
        check_matmul(&m(&[37, 45])?, &m(&[45, 300])?, t, "edges, 4-aligned n")?;
        check_matmul(&m(&[37, 45])?, &m(&[45, 301])?, t, "edges, odd n")?;
        check_matmul(&m(&[1, 64])?, &m(&[64, 260])?, t, "1 x N")?;
        check_matmul(&m(&[70, 64])?, &m(&[64, 1])?, t, "N x 1")?;
        check_matmul(&m(&[40, 1])?, &m(&[1, 264])?, t, "k = 1")?;
        check_matmul(&m(&[33, 45])?, &m(&[45, 308])?.narrow(1, 4, 300)?, t, "b narrowed at a 4-aligned offset")?;
        check_matmul(&m(&[33, 45])?, &m(&[45, 308])?.narrow(1, 1, 300)?, t, "b narrowed at an odd offset")?;
        check_matmul(&m(&[33, 45])?, &m(&[300, 45])?.t()?, t, "b transposed")?;
        check_matmul(&m(&[45, 33])?.t()?, &m(&[45, 260])?, t, "a transposed")?;
        check_matmul(&m(&[2, 1, 33, 20])?, &m(&[3, 20, 40])?, t, "broadcast batch, 4-aligned b")?;
        check_matmul(&m(&[3, 7, 5])?, &m(&[3, 5, 9])?.narrow(2, 0, 8)?, t, "batched b, unaligned row stride")?;
        check_matmul(&m(&[3, 7, 5])?, &m(&[3, 5, 8])?, t, "batched, 4-aligned b")?;
        check_matmul(&m(&[3, 6, 5])?, &m(&[3, 5, 6])?, t, "batched, odd batch stride of b")?;
        check_matmul(&m(&[5, 33, 16])?, &m(&[5, 16, 264])?, t, "batched, several tiles")?;
    }
    Ok(())
}
test_device!(matmul_tiles_test, matmul_tiles);

/// `act(x @ wᵀ + b)` on the host in f64.
fn linear_ref(x: &Tensor, w: &Tensor, b: Option<&Tensor>, act: Epilogue) -> Result<(Vec<usize>, Vec<f64>)> {
    let (od, mut z) = matmul_ref(&values(x), x.dims(), &values(&w.t()?), &[w.dims()[1], w.dims()[0]]);
    let n = od[1];
    if let Some(b) = b {
        let b = values(b);
        z.iter_mut().enumerate().for_each(|(i, v)| *v += b[i % n]);
    }
    let gelu = |v: f64| 0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh());
    let f = |v: f64| match act {
        Epilogue::None => v,
        Epilogue::Relu => v.max(0.0),
        Epilogue::Gelu => gelu(v),
    };
    Ok((od, z.into_iter().map(f).collect()))
}

fn check_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, tol: f64, what: &str) -> Result<()> {
    for &act in Epilogue::ALL {
        let (od, want) = linear_ref(x, w, b, act)?;
        let what = format!("linear {act:?} {what} {:?} x {:?} ({})", x.dims(), w.dims(), x.dtype());
        check_close(&what, &x.linear(w, b, act)?, &od, &want, tol);
    }
    Ok(())
}

fn linear(device: Device) -> Result<()> {
    let mut r = rng(17);
    for dtype in floats(device) {
        // f16 / bf16 outputs are f32 sums rounded once to the half type, but the inputs'
        // rounding and the devices' summation orders differ: allow a few dozen of its ulps
        // (k <= 64 here). A wrong index is off by O(1).
        let half = matches!(dtype, DType::F16 | DType::BF16);
        let t = if half { 32.0 } else { 4.0 } * tol(dtype);
        let mut m = |dims: &[usize]| randn(&mut r, dims, dtype, device);
        let (x, w, b) = (m(&[5, 7])?, m(&[3, 7])?, m(&[3])?);
        check_linear(&x, &w, Some(&b), t, "")?;
        check_linear(&x, &w, None, t, "no bias")?;
        let (xt, wn, bn) = (m(&[7, 5])?.t()?, m(&[3, 9])?.narrow(1, 1, 7)?, m(&[8])?.narrow(0, 4, 3)?);
        check_linear(&xt, &wn, Some(&bn), t, "transposed x, narrowed w and b")?;
        let (wt, bs) = (m(&[7, 3])?.t()?, m(&[3, 2])?.narrow(1, 1, 1)?.squeeze(1)?);
        check_linear(&x, &wt, Some(&bs), t, "transposed w, strided b")?;
        check_linear(&m(&[0, 7])?, &w, Some(&b), t, "no rows")?;
        check_linear(&m(&[5, 0])?, &m(&[3, 0])?, Some(&b), t, "k = 0")?;
        if half {
            // Several depth blocks and register tiles; the bias and activation are applied
            // to the f32 sum, so the one rounding to the half type stays the only large error.
            let (x, w, b) = (m(&[67, 300])?, m(&[129, 300])?, m(&[129])?);
            check_linear(&x, &w, Some(&b), t, "big")?;
        }
    }
    let mut m = |dims: &[usize]| randn(&mut r, dims, DType::F32, device);
    let (x, w, b) = (m(&[67, 300])?, m(&[129, 300])?, m(&[129])?);
    check_linear(&x, &w, Some(&b), 1e-4, "big")?;
    // Enough values for the CPU's bias and activation pass to run on the threads (rows of
    // 1031 columns).
    let (x, w, b) = (m(&[1030, 4])?, m(&[1031, 4])?, m(&[1031])?);
    check_linear(&x, &w, Some(&b), 1e-4, "rows over threads")?;
    linear_errors(device)
}
test_device!(linear_test, linear);

fn linear_errors(device: Device) -> Result<()> {
    let x = Tensor::ones((2, 3), DType::F32, device)?;
    let w = Tensor::ones((4, 3), DType::F32, device)?;
    let b = Tensor::ones(4, DType::F32, device)?;
    let relu = Epilogue::Relu;
    assert!(x.linear(&w.t()?, None, relu).is_err(), "in features 3 against 4");
    assert!(x.linear(&w, Some(&x), relu).is_err(), "2-D bias");
    assert!(x.linear(&w, Some(&b.narrow(0, 0, 3)?), relu).is_err(), "bias of 3 for 4 outputs");
    assert!(x.reshape(6)?.linear(&w, None, relu).is_err(), "1-D input");
    assert!(x.unsqueeze(0)?.linear(&w, None, relu).is_err(), "3-D input");
    let other = other_dtype(device, DType::F32);
    assert!(x.linear(&w.to_dtype(other)?, None, relu).is_err(), "mixed dtypes");
    assert!(x.linear(&w, Some(&b.to_dtype(other)?), relu).is_err(), "mixed bias dtype");
    if device != Device::Cpu {
        let on_cpu = |t: &Tensor| t.to_device(Device::Cpu);
        assert!(x.linear(&on_cpu(&w)?, None, relu).is_err(), "weight on another device");
        assert!(x.linear(&w, Some(&on_cpu(&b)?), relu).is_err(), "bias on another device");
    }
    Ok(())
}

// ---------------------------------------------------------------- index ops

fn index_select(device: Device) -> Result<()> {
    let x = arange24(device)?; // [2, 3, 4]
    let xv = values(&x);
    let ids_u32 = Tensor::from_vec(vec![2u32, 0, 2], 3, device)?;
    let got = x.index_select(&ids_u32, 1)?;
    let want: Vec<f64> = (0..2 * 3 * 4)
        .map(|i| {
            let j = unravel(i, &[2, 3, 4]);
            xv[ravel(&[j[0], [2, 0, 2][j[1]], j[2]], &[2, 3, 4])]
        })
        .collect();
    check_close("index_select(1)", &got, &[2, 3, 4], &want, 0.0);
    let ids_i64 = Tensor::from_vec(vec![3i64, 3, 0, 1, 2], 5, device)?;
    let got = x.transpose(0, 2)?.index_select(&ids_i64, 0)?; // [5, 3, 2]
    let want: Vec<f64> = (0..5 * 3 * 2)
        .map(|i| {
            let j = unravel(i, &[5, 3, 2]);
            xv[ravel(&[j[2], j[1], [3, 3, 0, 1, 2][j[0]]], &[2, 3, 4])]
        })
        .collect();
    check_close("index_select(0) of a transposed tensor", &got, &[5, 3, 2], &want, 0.0);
    let ids_u8 = Tensor::from_vec(vec![1u8], 1, device)?;
    check_close(
        "index_select(-1) u8 ids",
        &x.index_select(&ids_u8, -1)?,
        &[2, 3, 1],
        &[1., 5., 9., 13., 17., 21.],
        0.0,
    );
    // A bad id: an error from the op on the CPU, at the next sync point (the read) on a GPU.
    let read = |r: Result<Tensor>| r?.to_device(Device::Cpu);
    assert!(read(x.index_select(&Tensor::from_vec(vec![3u32], 1, device)?, 1)).is_err(), "index 3 of size 3");
    assert!(read(x.index_select(&Tensor::from_vec(vec![-1i64], 1, device)?, 1)).is_err(), "negative index");
    assert!(x.index_select(&Tensor::from_vec(vec![0.0f32], 1, device)?, 1).is_err(), "float ids");
    Ok(())
}
test_device!(index_select_test, index_select);

fn gather_scatter(device: Device) -> Result<()> {
    let x = tensor(&[1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.], &[3, 4], DType::F32, device);
    let ids = Tensor::from_vec(vec![3u32, 0, 1, 1, 0, 2], (3, 2), device)?;
    check_close("gather(1)", &x.gather(&ids, 1)?, &[3, 2], &[4., 1., 6., 6., 9., 11.], 0.0);
    let ids0 = Tensor::from_vec(vec![2i64, 0, 1, 1, 0, 0, 2, 2], (2, 4), device)?;
    check_close("gather(0)", &x.gather(&ids0, 0)?, &[2, 4], &[9., 2., 7., 8., 1., 2., 11., 12.], 0.0);
    // Transposed source [4, 3] and transposed ids.
    let idt = Tensor::from_vec(vec![0u32, 3, 2, 1, 1, 0], (3, 2), device)?.t()?;
    check_close("gather(0) strided", &x.t()?.gather(&idt, 0)?, &[2, 3], &[1., 7., 10., 4., 6., 9.], 0.0);
    // scatter_add accumulates repeated indices.
    let src = tensor(&[10., 20., 30., 40., 50., 60.], &[3, 2], DType::F32, device);
    let got = x.scatter_add(&ids, &src, 1)?;
    check_close("scatter_add(1)", &got, &[3, 4], &[21., 2., 3., 14., 5., 76., 7., 8., 59., 10., 71., 12.], 0.0);
    let z = Tensor::zeros((3, 2), widest_float(device), device)?;
    let ids_rows = Tensor::from_vec(vec![2u8, 2, 2, 0], (2, 2), device)?;
    let src2 = tensor(&[1., 2., 3., 4.], &[2, 2], widest_float(device), device);
    check_close("scatter_add(0)", &z.scatter_add(&ids_rows, &src2, 0)?, &[3, 2], &[0., 4., 0., 0., 4., 2.], 0.0);
    // Ids repeated along the other dims, as the gradient of index_select broadcasts them
    // (the CPU reads only the repeated vector): the sums of the same ids written out.
    let cube = arange24(device)?; // [2, 3, 4]
    let picks = Tensor::from_vec(vec![2u32, 0, 2, 2, 1], (1, 5, 1), device)?.broadcast_as((2, 5, 4))?;
    let src = Tensor::arange(0f32, 40.0, device)?.reshape((2, 5, 4))?.mul_scalar(0.5)?;
    let want = values(&cube.scatter_add(&picks.contiguous()?, &src, 1)?);
    check_close("scatter_add(1), repeated ids", &cube.scatter_add(&picks, &src, 1)?, &[2, 3, 4], &want, 0.0);
    let bad = Tensor::from_vec(vec![0u32, 3, 1, 1, 0], (1, 5, 1), device)?.broadcast_as((2, 5, 4))?;
    // A bad id: an error from the op on the CPU, at the next sync point (the read) on a GPU.
    let read = |r: Result<Tensor>| r?.to_device(Device::Cpu);
    assert!(read(x.gather(&Tensor::from_vec(vec![4u32; 6], (3, 2), device)?, 1)).is_err(), "index 4 of size 4");
    assert!(read(cube.scatter_add(&bad, &src, 1)).is_err(), "repeated ids: index 3 of size 3");
    assert!(x.gather(&Tensor::from_vec(vec![0u32; 4], (2, 2), device)?, 1).is_err(), "ids of another shape");
    assert!(x.scatter_add(&ids, &src.t()?, 1).is_err(), "src shape differs from ids");
    Ok(())
}
test_device!(gather_scatter_test, gather_scatter);

fn one_hot(device: Device) -> Result<()> {
    let ids = Tensor::from_vec(vec![2u32, 0, 3, 2], (2, 2), device)?;
    let oh = ids.one_hot(4, DType::F32)?;
    assert_eq!((oh.dims(), oh.dtype()), (&[2usize, 2, 4][..], DType::F32));
    let want = [0., 0., 1., 0., 1., 0., 0., 0., 0., 0., 0., 1., 0., 0., 1., 0.];
    check_close("one_hot", &oh, &[2, 2, 4], &want, 0.0);
    let oh = Tensor::from_vec(vec![1i64, 0], 2, device)?.one_hot(3, DType::U8)?;
    assert_eq!(oh.to_vec2::<u8>()?, vec![vec![0, 1, 0], vec![1, 0, 0]]);
    assert!(ids.one_hot(3, DType::F32).is_err(), "class 3 of 3");
    assert!(Tensor::from_vec(vec![-1i64], 1, device)?.one_hot(3, DType::F32).is_err(), "negative class");
    assert!(Tensor::ones(2, DType::F32, device)?.one_hot(3, DType::F32).is_err(), "float class ids");
    Ok(())
}
test_device!(one_hot_test, one_hot);

//! The std-trait API of `Tensor`: `Display` (PyTorch-style printing) and the arithmetic
//! operators (`+ - * /` and unary `-` on owned and borrowed tensors and on `f64`), on every
//! device: printing reads the (possibly strided) values back from the device.

use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_testutil::{other_dtype, supports, test_device, widest_float};

fn matrix(device: Device) -> Result<Tensor> {
    Tensor::from_vec(vec![1f32, -2.5, 3., 4., 5., -6.], (2, 3), device)
}

/// `want` as printed on `device`: the header names the device (`cpu` in the literals).
fn on(device: Device, want: &str) -> String {
    want.replace(", cpu]", &format!(", {device}]"))
}

// ---------------------------------------------------------------- Display

fn display_f32_matrix(device: Device) -> Result<()> {
    let want = "\
[[ 1.0000, -2.5000,  3.0000],
 [ 4.0000,  5.0000, -6.0000]]
Tensor[[2, 3], f32, cpu]";
    assert_eq!(matrix(device)?.to_string(), on(device, want));
    Ok(())
}
test_device!(display_f32_matrix_test, display_f32_matrix);

fn display_i64_vector(device: Device) -> Result<()> {
    let t = Tensor::from_vec(vec![1i64, -20, 300], 3, device)?;
    assert_eq!(t.to_string(), on(device, "[  1, -20, 300]\nTensor[[3], i64, cpu]"));
    Ok(())
}
test_device!(display_i64_vector_test, display_i64_vector);

fn display_rank0(device: Device) -> Result<()> {
    assert_eq!(Tensor::scalar(3.5f32, device)?.to_string(), on(device, "3.5000\nTensor[[], f32, cpu]"));
    assert_eq!(Tensor::scalar(7u8, device)?.to_string(), on(device, "7\nTensor[[], u8, cpu]"));
    Ok(())
}
test_device!(display_rank0_test, display_rank0);

fn display_empty(device: Device) -> Result<()> {
    let t = Tensor::zeros((2, 0), DType::F32, device)?;
    assert_eq!(t.to_string(), on(device, "[]\nTensor[[2, 0], f32, cpu]"));
    assert_eq!(Tensor::zeros(0, DType::I64, device)?.to_string(), on(device, "[]\nTensor[[0], i64, cpu]"));
    Ok(())
}
test_device!(display_empty_test, display_empty);

fn display_summarized_matrix(device: Device) -> Result<()> {
    let t = Tensor::arange(0i64, 10_000, device)?.reshape((100, 100))?;
    let want = "\
[[   0,    1,    2,  ...,   97,   98,   99],
 [ 100,  101,  102,  ...,  197,  198,  199],
 [ 200,  201,  202,  ...,  297,  298,  299],
 ...,
 [9700, 9701, 9702,  ..., 9797, 9798, 9799],
 [9800, 9801, 9802,  ..., 9897, 9898, 9899],
 [9900, 9901, 9902,  ..., 9997, 9998, 9999]]
Tensor[[100, 100], i64, cpu]";
    assert_eq!(t.to_string(), on(device, want));
    Ok(())
}
test_device!(display_summarized_matrix_test, display_summarized_matrix);

fn display_summarizes_only_long_dims_of_large_tensors(device: Device) -> Result<()> {
    // 2000 elements: dim 0 (size 2) is printed whole, dim 1 is cut.
    let t = Tensor::arange(0i64, 2000, device)?.reshape((2, 1000))?;
    let want = "\
[[   0,    1,    2,  ...,  997,  998,  999],
 [1000, 1001, 1002,  ..., 1997, 1998, 1999]]
Tensor[[2, 1000], i64, cpu]";
    assert_eq!(t.to_string(), on(device, want));
    // 1000 elements is not more than the threshold: nothing is cut (the lines wrap).
    let t = Tensor::arange(0i64, 1000, device)?;
    assert!(!t.to_string().contains("..."));
    Ok(())
}
test_device!(
    display_summarizes_only_long_dims_of_large_tensors_test,
    display_summarizes_only_long_dims_of_large_tensors
);

fn display_scientific(device: Device) -> Result<()> {
    let t = Tensor::from_vec(vec![1e-8f64, -1.0, 0.0, 1e8], 4, Device::Cpu)?.to_dtype(widest_float(device))?;
    let want = format!("[ 1.0000e-08, -1.0000e+00,  0.0000e+00,  1.0000e+08]\nTensor[[4], {}, cpu]", t.dtype());
    assert_eq!(t.to_device(device)?.to_string(), on(device, &want));
    // Each trigger alone: a value below 1e-4, one above 1e8, a range over 1000; or none.
    let cases = [
        ([1e-5f32, 0.5], "[1.0000e-05, 5.0000e-01]"),
        ([2e8, 1e6], "[2.0000e+08, 1.0000e+06]"),
        ([0.01, 20.0], "[1.0000e-02, 2.0000e+01]"),
        ([0.001, -0.5], "[ 0.0010, -0.5000]"),
    ];
    for (values, want) in cases {
        let t = Tensor::from_vec(values.to_vec(), 2, device)?;
        assert_eq!(t.to_string(), on(device, &format!("{want}\nTensor[[2], f32, cpu]")));
    }
    Ok(())
}
test_device!(display_scientific_test, display_scientific);

fn display_non_finite(device: Device) -> Result<()> {
    let t = Tensor::from_vec(vec![f32::NAN, f32::NEG_INFINITY, 1.5], 3, device)?;
    assert_eq!(t.to_string(), on(device, "[   nan,   -inf, 1.5000]\nTensor[[3], f32, cpu]"));
    Ok(())
}
test_device!(display_non_finite_test, display_non_finite);

fn display_rank3_separates_blocks_with_blank_lines(device: Device) -> Result<()> {
    let t = Tensor::arange(0i64, 8, device)?.reshape((2, 2, 2))?;
    let want = "\
[[[0, 1],
  [2, 3]],

 [[4, 5],
  [6, 7]]]
Tensor[[2, 2, 2], i64, cpu]";
    assert_eq!(t.to_string(), on(device, want));
    Ok(())
}
test_device!(display_rank3_separates_blocks_with_blank_lines_test, display_rank3_separates_blocks_with_blank_lines);

fn display_wraps_long_vectors(device: Device) -> Result<()> {
    // Cells of width 2 plus ", ": 20 per 80-column line.
    let t = Tensor::arange(0u32, 25, device)?;
    let want = "\
[ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
 20, 21, 22, 23, 24]
Tensor[[25], u32, cpu]";
    assert_eq!(t.to_string(), on(device, want));
    Ok(())
}
test_device!(display_wraps_long_vectors_test, display_wraps_long_vectors);

/// Integers print exactly, whatever their range: u32 values past i32, the ends of u8.
fn display_integer_extremes(device: Device) -> Result<()> {
    let t = Tensor::from_vec(vec![4_000_000_000u32, 7, u32::MAX], 3, device)?;
    assert_eq!(t.to_string(), on(device, "[4000000000,          7, 4294967295]\nTensor[[3], u32, cpu]"));
    let t = Tensor::from_vec(vec![255u8, 0], 2, device)?;
    assert_eq!(t.to_string(), on(device, "[255,   0]\nTensor[[2], u8, cpu]"));
    let t = Tensor::from_vec(vec![i32::MIN as i64, i32::MAX as i64], 2, device)?;
    assert_eq!(t.to_string(), on(device, "[-2147483648,  2147483647]\nTensor[[2], i64, cpu]"));
    Ok(())
}
test_device!(display_integer_extremes_test, display_integer_extremes);

fn display_views_half_precision_and_precision_flag(device: Device) -> Result<()> {
    let t = matrix(device)?.t()?; // a strided view
    let want = "\
[[ 1.0000,  4.0000],
 [-2.5000,  5.0000],
 [ 3.0000, -6.0000]]
Tensor[[3, 2], f32, cpu]";
    assert_eq!(t.to_string(), on(device, want));
    for half in [DType::F16, DType::BF16].into_iter().filter(|&d| supports(device, d)) {
        let h = matrix(device)?.to_dtype(half)?;
        assert!(h.to_string().starts_with("[[ 1.0000, -2.5000,  3.0000],"), "{half}");
    }
    let third = Tensor::scalar(1.0f64 / 3.0, Device::Cpu)?.to_dtype(widest_float(device))?.to_device(device)?;
    let want = format!("0.33\nTensor[[], {}, cpu]", third.dtype());
    assert_eq!(format!("{third:.2}"), on(device, &want));
    Ok(())
}
test_device!(display_views_half_precision_and_precision_flag_test, display_views_half_precision_and_precision_flag);

fn debug_is_the_header_only(device: Device) -> Result<()> {
    assert_eq!(format!("{:?}", matrix(device)?), on(device, "Tensor[[2, 3], f32, cpu]"));
    Ok(())
}
test_device!(debug_is_the_header_only_test, debug_is_the_header_only);

// ---------------------------------------------------------------- operators

fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// `$op` applied to every mix of owned and borrowed operands equals `$method`.
macro_rules! check_binary {
    ($a:expr, $b:expr, $op:tt, $method:ident) => {{
        let (a, b): (&Tensor, &Tensor) = (&$a, &$b);
        let want = values(&a.$method(b)?);
        assert_eq!(values(&(a $op b)?), want, "&a {} &b", stringify!($op));
        assert_eq!(values(&(a.clone() $op b)?), want, "a {} &b", stringify!($op));
        assert_eq!(values(&(a $op b.clone())?), want, "&a {} b", stringify!($op));
        assert_eq!(values(&(a.clone() $op b.clone())?), want, "a {} b", stringify!($op));
    }};
}

fn binary_operators_match_methods(device: Device) -> Result<()> {
    let a = matrix(device)?;
    let b = Tensor::from_vec(vec![2f32, 4., -1., 0.5, 8., 3.], (2, 3), device)?;
    check_binary!(a, b, +, add);
    check_binary!(a, b, -, sub);
    check_binary!(a, b, *, mul);
    check_binary!(a, b, /, div);
    assert_eq!(values(&(&a + &b)?), [3., 1.5, 2., 4.5, 13., -3.]);
    assert_eq!(values(&(&a / &b)?), [0.5, -0.625, -3., 8., 0.625, -2.]);
    Ok(())
}
test_device!(binary_operators_match_methods_test, binary_operators_match_methods);

fn binary_operators_broadcast(device: Device) -> Result<()> {
    let a = matrix(device)?;
    let row = Tensor::from_vec(vec![10f32, 20., 30.], 3, device)?;
    let col = Tensor::from_vec(vec![1f32, -1.], (2, 1), device)?;
    check_binary!(a, row, +, add);
    check_binary!(col, a, *, mul);
    assert_eq!((&row - &col)?.dims(), &[2, 3]);
    assert_eq!(values(&(&a + &row)?), [11., 17.5, 33., 14., 25., 24.]);
    Ok(())
}
test_device!(binary_operators_broadcast_test, binary_operators_broadcast);

fn scalar_operators_match_methods(device: Device) -> Result<()> {
    let a = matrix(device)?;
    assert_eq!(values(&(&a + 2.0)?), values(&a.add_scalar(2.0)?));
    assert_eq!(values(&(&a - 2.0)?), values(&a.sub_scalar(2.0)?));
    assert_eq!(values(&(&a * 2.0)?), values(&a.mul_scalar(2.0)?));
    assert_eq!(values(&(&a / 2.0)?), values(&a.div_scalar(2.0)?));
    assert_eq!(values(&(a.clone() * 2.0)?), [2., -5., 6., 8., 10., -12.]);
    // The scalar takes the tensor's dtype.
    let ints = Tensor::from_vec(vec![1i64, 2, 3], 3, device)?;
    assert_eq!((&ints * 3.0)?.to_vec::<i64>()?, [3, 6, 9]);
    Ok(())
}
test_device!(scalar_operators_match_methods_test, scalar_operators_match_methods);

fn neg_operator(device: Device) -> Result<()> {
    let a = matrix(device)?;
    assert_eq!(values(&(-&a)?), values(&a.neg()?));
    assert_eq!(values(&(-a.clone())?), [-1., 2.5, -3., -4., -5., 6.]);
    Ok(())
}
test_device!(neg_operator_test, neg_operator);

fn operators_chain_with_question_mark(device: Device) -> Result<()> {
    let a = matrix(device)?;
    let y = ((&a * 2.0)? - (-&a)?)?; // 3a
    assert_eq!(values(&y), values(&a.mul_scalar(3.0)?));
    Ok(())
}
test_device!(operators_chain_with_question_mark_test, operators_chain_with_question_mark);

fn operator_errors_match_methods(device: Device) -> Result<()> {
    let a = matrix(device)?;
    let bad_shape = Tensor::ones((4, 3), DType::F32, device)?;
    let bad_dtype = Tensor::ones((2, 3), other_dtype(device, DType::F32), device)?;
    for other in [&bad_shape, &bad_dtype] {
        let want = a.add(other).unwrap_err();
        assert_eq!((&a + other).unwrap_err(), want);
        assert_eq!((a.clone() - other.clone()).unwrap_err(), a.sub(other).unwrap_err());
        assert_eq!((&a * other.clone()).unwrap_err(), a.mul(other).unwrap_err());
        assert_eq!((a.clone() / other).unwrap_err(), a.div(other).unwrap_err());
    }
    assert!(matches!((&a + &bad_shape).unwrap_err(), Error::BroadcastIncompatible { .. }));
    assert!(matches!((&a + &bad_dtype).unwrap_err(), Error::DTypeMismatch { .. }));
    Ok(())
}
test_device!(operator_errors_match_methods_test, operator_errors_match_methods);

// ---------------------------------------------------------------- host access

/// `with_host_slice` sees the elements in row-major order whatever the layout and device,
/// and refuses another element type.
fn with_host_slice_reads_logical_order(device: Device) -> Result<()> {
    let a = matrix(device)?;
    let views = [a.clone(), a.t()?, a.narrow(1, 1, 2)?, a.narrow(0, 1, 1)?];
    for view in &views {
        let seen = view.with_host_slice(|s: &[f32]| s.to_vec())?;
        assert_eq!(seen, view.to_vec::<f32>()?, "shape {:?}", view.dims());
    }
    let err = a.with_host_slice(|s: &[i64]| s.len()).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { .. }));
    Ok(())
}
test_device!(with_host_slice_reads_logical_order_test, with_host_slice_reads_logical_order);

/// CPU tensor buffers come back through the host cache: after a tensor is dropped, the next
/// one of its size class reuses its buffer, and a reused buffer handed out as zeros (or as
/// an op's output) carries nothing over from its last owner.
#[test]
fn cpu_buffers_are_reused_without_leaking_old_values() -> Result<()> {
    let n = 3 << 14; // 192 KiB of f32: above the cache's minimum size
    let before = rnn_core::cpu_memory_stats();
    for round in 0..4 {
        let filled = Tensor::full(7.0 + round as f64, n, DType::F32, Device::Cpu)?;
        let doubled = filled.add(&filled)?;
        assert!(doubled.to_vec::<f32>()?.iter().all(|&v| v == 2.0 * (7.0 + round as f32)));
        drop((filled, doubled));
        let zeros = Tensor::zeros(n, DType::F32, Device::Cpu)?;
        assert!(zeros.to_vec::<f32>()?.iter().all(|&v| v == 0.0), "round {round}");
        let relu = Tensor::full(-1.0, n, DType::F32, Device::Cpu)?.relu()?;
        assert!(relu.to_vec::<f32>()?.iter().all(|&v| v == 0.0), "round {round}");
    }
    let after = rnn_core::cpu_memory_stats();
    // Other tests share the cache, so only a lower bound is certain.
    assert!(after.hits >= before.hits + 3, "{before:?} -> {after:?}");
    assert!(after.cap > 0);
    Ok(())
}

//! The helpers catch what they are for: a wrong gradient, a result that differs in f32 from
//! the f64 reference, NaNs; and the tolerance table covers every dtype.

use rnn_core::{DType, Device, Result, Tensor};
use rnn_testutil::{check_gradients, max_rel_err, rand64, tolerance, GRADCHECK_TOL};

#[test]
fn every_dtype_has_tolerances() {
    for dtype in DType::ALL {
        let t = tolerance(dtype);
        assert!(t.op <= t.result && t.result <= t.grad, "{dtype}: {t:?}");
        assert_eq!(t.op == 0.0, !dtype.is_float(), "{dtype}: integers exact, floats not");
    }
    assert!(tolerance(DType::F64).grad < GRADCHECK_TOL);
}

#[test]
fn max_rel_err_counts_nan_and_infinities() {
    assert_eq!(max_rel_err(&[1.0, f64::NAN], &[1.0, f64::NAN]), 0.0);
    assert_eq!(max_rel_err(&[f64::INFINITY], &[f64::INFINITY]), 0.0);
    assert_eq!(max_rel_err(&[1.0], &[f64::NAN]), f64::INFINITY);
    assert_eq!(max_rel_err(&[f64::INFINITY], &[f64::NEG_INFINITY]), f64::INFINITY);
    assert_eq!(max_rel_err(&[3.0], &[1.0]), 1.0);
}

#[test]
fn a_correct_gradient_passes() -> Result<()> {
    let inputs = [rand64(1, &[3, 4])?, rand64(2, &[4, 2])?];
    check_gradients(Device::Cpu, &inputs, |xs| xs[0].matmul(&xs[1])?.tanh())
}

#[test]
#[should_panic(expected = "gradcheck")]
fn a_wrong_gradient_fails_on_the_cpu() {
    // x * detach(x): autograd sees x, the finite differences 2x.
    let x = rand64(3, &[5]).unwrap();
    let _ = check_gradients(Device::Cpu, &[x], |xs| xs[0].mul(&xs[0].detach())).map_err(|e| panic!("gradcheck: {e}"));
}

#[test]
#[should_panic(expected = "differs from f64 on the CPU")]
fn a_result_that_differs_in_f32_fails() {
    // Right in f64 (so the finite differences pass), 1e-3 off in f32: what a device kernel
    // with a bug looks like to the comparison against the CPU.
    let f = |xs: &[Tensor]| match xs[0].dtype() {
        DType::F32 => xs[0].sqr()?.mul_scalar(1.001),
        _ => xs[0].sqr(),
    };
    let _ = check_gradients(Device::Cpu, &[rand64(4, &[6]).unwrap()], f);
}

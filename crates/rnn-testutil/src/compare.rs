//! Reading tensors back and comparing them, building tensors from f64 values, and checking
//! errors.

use rnn_core::{DType, Device, Error, Result, Tensor};

/// Max |a - b| / (1 + |b|) over two equal-length slices. A NaN where the other side has
/// none (or unequal infinities) counts as an infinite error, not one `f64::max` skips.
pub fn max_rel_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let err = |x: f64, y: f64| match (x.is_nan(), y.is_nan()) {
        (true, true) => 0.0,
        (false, false) if x == y => 0.0,
        (false, false) => (x - y).abs() / (1.0 + y.abs()),
        _ => f64::INFINITY,
    };
    a.iter().zip(b).map(|(&x, &y)| err(x, y)).map(|e| if e.is_nan() { f64::INFINITY } else { e }).fold(0.0, f64::max)
}

/// Max |a - b| over two equal-length slices (NaN on either side makes it NaN's `max`: use
/// [`max_rel_err`] where NaNs may appear).
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// The tensor's elements as f64 (any dtype, any device: converted on the host).
pub fn values(t: &Tensor) -> Vec<f64> {
    t.to_device(Device::Cpu)
        .and_then(|t| t.to_dtype(DType::F64))
        .and_then(|t| t.to_vec::<f64>())
        .expect("read back tensor")
}

/// Where `got` and `want` differ most, for failure messages: the element count, the index
/// and both values of the worst element, and the first few elements of each (never a dump
/// of a whole tensor).
pub fn diff_summary(got: &[f64], want: &[f64]) -> String {
    let err = |(&x, &y): (&f64, &f64)| max_rel_err(&[x], &[y]);
    let worst = got.iter().zip(want).map(err).enumerate().fold((0, 0.0), |b, (i, e)| if e > b.1 { (i, e) } else { b });
    let head = |v: &[f64]| v.iter().take(6).map(|x| format!("{x:.6}")).collect::<Vec<_>>().join(", ");
    let (g, w) = (got.get(worst.0).copied().unwrap_or(f64::NAN), want.get(worst.0).copied().unwrap_or(f64::NAN));
    format!(
        "{} elements; worst at {}: got {g}, want {w}; first got [{}], want [{}]",
        got.len(),
        worst.0,
        head(got),
        head(want)
    )
}

/// Asserts two tensors (any dtypes, any devices) have the same shape and close values
/// ([`max_rel_err`] at most `tol`).
pub fn assert_close(a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.dims(), b.dims(), "shape mismatch");
    let (av, bv) = (values(a), values(b));
    let err = max_rel_err(&av, &bv);
    assert!(err <= tol, "max relative error {err:.3e} > {tol:.1e}: {}", diff_summary(&av, &bv));
}

/// Like [`assert_close`], naming `what` in the failure message, with the tolerance relaxed
/// to `got`'s device ([`tol_on`](crate::tol_on)).
pub fn assert_close_on(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    let tol = crate::tol_on(got.device(), tol);
    let (g, w) = (values(got), values(want));
    let err = max_rel_err(&g, &w);
    assert!(
        err <= tol,
        "{what} on {}: max relative error {err:.3e} > {tol:.1e}: {}",
        got.device(),
        diff_summary(&g, &w)
    );
}

/// A tensor from f64 values in the given dtype (converted on the host, then moved).
pub fn tensor(data: &[f64], shape: &[usize], dtype: DType, device: Device) -> Tensor {
    try_tensor(data, shape, dtype, device).expect("build test tensor")
}

/// `tensor`, with the error of an unsupported dtype or value returned.
pub fn try_tensor(data: &[f64], shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    Tensor::from_vec(data.to_vec(), shape.to_vec(), Device::Cpu)?.to_dtype(dtype)?.to_device(device)
}

/// Asserts `result` is an error whose message contains `needle`.
#[track_caller]
pub fn expect_err<T>(result: Result<T>, needle: &str) {
    match result {
        Ok(_) => panic!("expected an error mentioning {needle:?}, got Ok"),
        Err(e) => assert!(e.to_string().contains(needle), "error {e:?} does not mention {needle:?}"),
    }
}

/// Whether `r` is an `Error::InvalidArgument`.
pub fn is_invalid<T>(r: Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

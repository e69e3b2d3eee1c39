//! The op table is the single definition of every elementwise op: each entry must be
//! complete (CPU formula, CUDA and WGSL expressions) and runnable on every backend.

use rnn_testutil::*;
use rnn_core::op::{BinaryOp, CmpOp, UnaryOp};
use rnn_core::{DType, Device, Result, Tensor};
use std::collections::HashSet;

/// Whether `expr` uses the variable `name` as a whole token (not inside `fmax`).
fn uses(expr: &str, name: &str) -> bool {
    expr.split(|c: char| !c.is_alphanumeric() && c != '_').any(|token| token == name)
}

#[test]
fn every_entry_is_complete_and_named_once() {
    let mut names = HashSet::new();
    for op in UnaryOp::ALL {
        assert!(names.insert(op.name()), "duplicate op name {}", op.name());
        assert!(uses(op.cuda_expr(), "x"), "{}: CUDA expression must use x", op.name());
        assert!(uses(op.wgsl_expr(), "x"), "{}: WGSL expression must use x", op.name());
    }
    for op in BinaryOp::ALL {
        assert!(names.insert(op.name()), "duplicate op name {}", op.name());
        for expr in [op.cuda_expr(), op.wgsl_expr()] {
            assert!(uses(expr, "a") && uses(expr, "b"), "{}: expression must use a and b", op.name());
        }
    }
    for op in CmpOp::ALL {
        assert!(names.insert(op.name()), "duplicate op name {}", op.name());
    }
}

/// Every op of the table runs on the device for every float dtype, and matches the CPU.
fn every_op_runs(device: Device) -> Result<()> {
    let x = Tensor::rand(0.1, 2.0, (3, 5), DType::F64, Device::Cpu)?;
    let y = Tensor::rand(0.1, 2.0, (3, 5), DType::F64, Device::Cpu)?;
    for dtype in floats(device) {
        // One op on inputs rounded to `dtype`, against f64 on the exact inputs.
        let tol = tol_on(device, tolerance(dtype).result);
        let (xd, yd) = (x.to_dtype(dtype)?.to_device(device)?, y.to_dtype(dtype)?.to_device(device)?);
        for &op in UnaryOp::ALL {
            let want = x.unary(op)?;
            assert_close(&xd.unary(op)?.to_device(Device::Cpu)?, &want, tol);
        }
        for &op in BinaryOp::ALL {
            let want = x.binary(&y, op)?;
            assert_close(&xd.binary(&yd, op)?.to_device(Device::Cpu)?, &want, tol);
        }
        for &op in CmpOp::ALL {
            let got = values(&xd.cmp(&xd, op)?);
            let want = values(&x.cmp(&x, op)?);
            assert_eq!(got, want, "{} on {dtype}", op.name());
        }
    }
    Ok(())
}
test_device!(every_op_runs_test, every_op_runs);

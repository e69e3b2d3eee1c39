//! The op table is the single definition of every elementwise op: each entry must be
//! complete (CPU formula, CUDA and WGSL expressions) and runnable on every backend.

use rnn_core::op_table::{BinaryOp, CmpOp, UnaryOp};
use rnn_core::{DType, Device, Result, Tensor};
use rnn_testutil::*;
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
        // One op on inputs rounded to `dtype`, against f64 on the exact inputs (unary ops: on
        // the rounded inputs, where floor or round would jump if an input rounds across a step).
        let tol = tol_on(device, tolerance(dtype).result);
        let (xd, yd) = (x.to_dtype(dtype)?.to_device(device)?, y.to_dtype(dtype)?.to_device(device)?);
        let x_rounded = x.to_dtype(dtype)?.to_dtype(DType::F64)?;
        let y_rounded = y.to_dtype(dtype)?.to_dtype(DType::F64)?;
        for &op in UnaryOp::ALL {
            let want = x_rounded.unary(op)?;
            assert_close(&xd.unary(op)?.to_device(Device::Cpu)?, &want, tol);
        }
        for &op in BinaryOp::ALL {
            // `//` and `%` jump where an input rounds across a multiple: the rounded inputs.
            let jumps = matches!(op, BinaryOp::FloorDivide | BinaryOp::Remainder);
            let want = if jumps { x_rounded.binary(&y_rounded, op)? } else { x.binary(&y, op)? };
            assert_close(&xd.binary(&yd, op)?.to_device(Device::Cpu)?, &want, tol);
        }
    }
    Ok(())
}
test_device!(every_op_runs_test, every_op_runs);

/// Each element pair of `cmp_operands` is less, equal or greater.
#[derive(Clone, Copy)]
enum Rel {
    Less,
    Equal,
    Greater,
}

/// Operand pairs whose elements are less, equal and greater in turn, exact in every dtype
/// (small integers for all; negative and fractional values for floats, the halves and
/// quarters bf16 holds). Returns (a, b, relation of each element pair).
fn cmp_operands(dtype: DType) -> (Vec<f64>, Vec<f64>, Vec<Rel>) {
    use Rel::*;
    let mut pairs = vec![(1.0, 2.0, Less), (2.0, 2.0, Equal), (5.0, 4.0, Greater), (0.0, 0.0, Equal), (0.0, 7.0, Less)];
    pairs.push((255.0, 254.0, Greater)); // the top of u8
    if dtype.is_float() {
        pairs.extend([(-0.5, 0.25, Less), (2.25, 2.25, Equal), (-3.0, -3.5, Greater), (-1.5, -1.5, Equal)]);
    }
    let a = pairs.iter().map(|p| p.0).collect();
    let b = pairs.iter().map(|p| p.1).collect();
    (a, b, pairs.iter().map(|p| p.2).collect())
}

/// Whether `op` holds for an element pair with relation `rel`, written out per op rather
/// than with the op table's own formula.
fn expected(op: CmpOp, rel: Rel) -> bool {
    use Rel::*;
    match op {
        CmpOp::Eq => matches!(rel, Equal),
        CmpOp::Ne => !matches!(rel, Equal),
        CmpOp::Lt => matches!(rel, Less),
        CmpOp::Le => matches!(rel, Less | Equal),
        CmpOp::Gt => matches!(rel, Greater),
        CmpOp::Ge => matches!(rel, Greater | Equal),
    }
}

/// Every comparison of the table, on two different operands with less, equal and greater
/// element pairs (so each op yields both true and false), in every dtype of the device: the
/// result is the expected 0 / 1 mask, also with the operands swapped (`a < b` is `b > a`).
fn every_comparison_gives_the_expected_mask(device: Device) -> Result<()> {
    for dtype in dtypes(device) {
        let (a, b, rels) = cmp_operands(dtype);
        let (at, bt) = (tensor(&a, &[a.len()], dtype, device), tensor(&b, &[b.len()], dtype, device));
        for &op in CmpOp::ALL {
            let want: Vec<f64> = rels.iter().map(|&r| expected(op, r) as u8 as f64).collect();
            assert!(want.contains(&0.0) && want.contains(&1.0), "{}: operands give one answer only", op.name());
            let got = at.cmp(&bt, op)?;
            assert_eq!(got.dims(), at.dims(), "{} on {dtype}", op.name());
            assert_eq!(values(&got), want, "{} on {dtype}: {a:?} vs {b:?}", op.name());
            let swapped = match op {
                CmpOp::Lt => CmpOp::Gt,
                CmpOp::Le => CmpOp::Ge,
                CmpOp::Gt => CmpOp::Lt,
                CmpOp::Ge => CmpOp::Le,
                same => same,
            };
            assert_eq!(values(&bt.cmp(&at, swapped)?), want, "{} swapped on {dtype}", op.name());
        }
    }
    Ok(())
}
test_device!(every_comparison_gives_the_expected_mask_test, every_comparison_gives_the_expected_mask);

//! The fused LayerNorm / RMSNorm, softmax-cross-entropy and bias + GELU kernels on the
//! emulator against the CPU: every dtype (and id dtype), both directions, strided and offset
//! inputs, rows shorter and longer than a block, NaN / infinite values, bad class ids.

use super::families::fused_outputs;
use super::{compare, random, rng, small_ints, views, Tol};
use crate::cpu::CpuStorage;
use crate::fused::bias_gelu::{BiasGelu, BiasGeluBackward};
use crate::fused::cross_entropy::{CrossEntropy, CrossEntropyBackward};
use crate::fused::norm::{Norm, NormBackward};
use crate::fused::FusedOp;
use crate::gpu::variants::ID_DTYPES;
use crate::{DType, Layout, Result};

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// Values in [-4, 4] without NaN or infinities.
fn plain(rng: &mut rand::rngs::StdRng, dtype: DType, n: usize) -> CpuStorage {
    use rand::Rng;
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(-4.0..4.0f64)).collect();
    CpuStorage::F64(v).to_dtype(&Layout::contiguous(n), dtype).expect("cast")
}

/// Runs `op` on both and compares every output (only the first where the CPU fails: the
/// emulator reports a bad id once, at the first read-back). Returns the CPU's outputs (none
/// where it failed).
fn check(what: &str, op: &dyn FusedOp, inputs: &[(&CpuStorage, &Layout)], tol: Tol) -> Result<Vec<CpuStorage>> {
    let (got, want) = fused_outputs(op, inputs);
    let count = want.as_ref().map_or(1, |w| w.len());
    for i in 0..count {
        let pick_got = got.as_ref().map(|v| v[i].clone()).map_err(|e| crate::Error::Msg(e.to_string()));
        let pick_want = want.as_ref().map(|v| v[i].clone()).map_err(|e| crate::Error::Msg(e.to_string()));
        compare(&format!("{what} output {i}"), pick_got, pick_want, tol);
    }
    Ok(want.unwrap_or_default())
}

fn norms(rng: &mut rand::rngs::StdRng, d: DType) -> Result<()> {
    for shape in [&[5usize, 7][..], &[3, 300], &[2, 0], &[0, 4], &[2, 3, 40]] {
        let n = shape[shape.len() - 1];
        let rows: usize = shape[..shape.len() - 1].iter().product();
        for (view, l, len) in views(shape).into_iter().take(4) {
            let x = plain(rng, d, len);
            let (w, b) = (plain(rng, d, n), plain(rng, d, n));
            let pl = Layout::contiguous(n);
            for (rms, weight, bias) in [
                (false, true, true),
                (false, false, true),
                (false, false, false),
                (true, true, false),
                (true, false, false),
            ] {
                let op = Norm { rms, eps: 1e-5, weight, bias };
                let mut inputs = vec![(&x, &l)];
                inputs.extend(weight.then_some((&w, &pl)));
                inputs.extend(bias.then_some((&b, &pl)));
                let what = format!("{} {d} {shape:?} {view} w {weight} b {bias}", op.name());
                let outs = check(&what, &op, &inputs, Tol::sum(d, 8, 4.0))?;
                let g = plain(rng, d, rows * n);
                let gl = Layout::contiguous(shape.to_vec());
                let mut back = vec![(&x, &l), (&g, &gl)];
                let stat_layout = Layout::contiguous(rows);
                back.extend(outs[1..].iter().map(|s| (s, &stat_layout)));
                back.extend(weight.then_some((&w, &pl)));
                let what = format!("{what} backward");
                check(&what, &NormBackward { fwd: op }, &back, Tol::sum(d, rows.max(8), 16.0))?;
            }
        }
    }
    // NaN and infinities stay in their rows.
    let x = random(rng, d, 400);
    let op = Norm { rms: false, eps: 1e-5, weight: false, bias: false };
    check(&format!("layer_norm {d} specials"), &op, &[(&x, &Layout::contiguous(vec![20, 20]))], Tol::sum(d, 8, 4.0))?;
    Ok(())
}

fn cross_entropy(rng: &mut rand::rngs::StdRng, d: DType, k: DType) -> Result<()> {
    for (rows, classes) in [(5usize, 7usize), (3, 300), (0, 4)] {
        for (view, l, len) in views(&[rows, classes]).into_iter().take(4) {
            let x = plain(rng, d, len);
            let mut ids = small_ints(rng, k, rows, classes as i64);
            if rows > 2 && k != DType::U8 {
                // An ignored row.
                match &mut ids {
                    CpuStorage::I64(v) => v[1] = -100,
                    CpuStorage::U32(v) => v[1] = 1000,
                    _ => {}
                }
            }
            let ignore = Some(if k == DType::I64 { -100 } else { 1000 });
            let il = Layout::contiguous(rows);
            for smoothing in [0.0, 0.25] {
                let op = CrossEntropy { smoothing, ignore };
                let what = format!("cross_entropy {d} ids {k} [{rows}, {classes}] {view} s {smoothing}");
                let outs = check(&what, &op, &[(&x, &l), (&ids, &il)], Tol::sum(d, 8, 8.0))?;
                let g = plain(rng, d, rows);
                let back = [(&x, &l), (&ids, &il), (&outs[1], &il), (&g, &il)];
                check(&format!("{what} backward"), &CrossEntropyBackward { fwd: op }, &back, Tol::sum(d, 8, 8.0))?;
            }
        }
    }
    // Specials in the logits, and a bad id (reported as the CPU reports it).
    let x = random(rng, d, 400);
    let xl = Layout::contiguous(vec![20, 20]);
    let ids = small_ints(rng, k, 20, 20);
    let il = Layout::contiguous(20);
    let op = CrossEntropy { smoothing: 0.1, ignore: None };
    check(&format!("cross_entropy {d} ids {k} specials"), &op, &[(&x, &xl), (&ids, &il)], Tol::sum(d, 8, 8.0))?;
    let mut bad = small_ints(rng, k, 20, 20);
    match &mut bad {
        CpuStorage::U8(v) => v[7] = 25,
        CpuStorage::U32(v) => v[7] = 20,
        CpuStorage::I64(v) => v[7] = -3,
        _ => {}
    }
    check(&format!("cross_entropy {d} ids {k} bad id"), &op, &[(&x, &xl), (&bad, &il)], Tol::of(d))?;
    Ok(())
}

fn bias_gelu(rng: &mut rand::rngs::StdRng, d: DType) -> Result<()> {
    for shape in [&[5usize, 7][..], &[3, 700], &[0, 4], &[2, 3, 40]] {
        let n = shape[shape.len() - 1];
        for (view, l, len) in views(shape).into_iter().take(4) {
            let x = plain(rng, d, len);
            let b = plain(rng, d, n);
            let g = plain(rng, d, shape.iter().product());
            let (bl, gl) = (Layout::contiguous(n), Layout::contiguous(shape.to_vec()));
            for erf in [false, true] {
                let what = format!("bias_gelu {d} {shape:?} {view} erf {erf}");
                check(&what, &BiasGelu { erf }, &[(&x, &l), (&b, &bl)], Tol::sum(d, 4, 4.0))?;
                let back = [(&x, &l), (&b, &bl), (&g, &gl)];
                check(&format!("{what} backward"), &BiasGeluBackward { erf }, &back, Tol::sum(d, 4, 4.0))?;
            }
        }
    }
    Ok(())
}

/// Every kernel of the three families.
pub(super) fn fused_nn() {
    let mut rng = rng(11);
    for d in FLOATS {
        norms(&mut rng, d).expect("norms");
        for k in ID_DTYPES {
            cross_entropy(&mut rng, d, k).expect("cross entropy");
        }
        bias_gelu(&mut rng, d).expect("bias_gelu");
    }
}

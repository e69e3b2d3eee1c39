//! The op families, each run on the emulator and on the CPU with the same inputs.

use super::{compare, random, rng, small_ints, up, views, Tol, SHAPES};
use crate::cpu::CpuStorage;
use crate::emu::{set_epilogues, EmuStorage};
use crate::fused::linear::Linear;
use crate::fused::softmax::Softmax;
use crate::gpu::variants::ID_DTYPES;
use crate::op_table::{BinaryOp, CmpOp, Epilogue, ReduceOp, UnaryOp};
use crate::storage::BackendStorage;
use crate::window::Window2d;
use crate::{DType, Error, Layout, Result};

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// Random values without NaN or infinities, in [-4, 4] (sums, products).
fn plain(rng: &mut rand::rngs::StdRng, dtype: DType, n: usize) -> CpuStorage {
    use rand::Rng;
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(-4.0..4.0f64)).collect();
    CpuStorage::F64(v).to_dtype(&Layout::contiguous(n), dtype).expect("cast")
}

pub(super) fn elementwise() {
    let mut rng = rng(1);
    for &d in &DType::ALL {
        for value in [0.0, -1.5, 300.0, 3e38, f64::NAN, f64::NEG_INFINITY] {
            for n in [0, 5, 3000] {
                let got = <EmuStorage as BackendStorage>::full(value, n, d, 0);
                compare(&format!("full({value}) {d} x {n}"), got, CpuStorage::full(value, n, d), Tol::of(d));
            }
        }
        for shape in SHAPES {
            for (view, l, len) in views(shape) {
                let x = random(&mut rng, d, len);
                for &to in &DType::ALL {
                    let what = format!("to_dtype {d} -> {to} {shape:?} {view}");
                    compare(&what, up(&x).to_dtype(&l, to), x.to_dtype(&l, to), Tol::of(to));
                }
                compare(&format!("copy {d} {shape:?} {view}"), up(&x).copy_strided(&l), x.copy_strided(&l), Tol::of(d));
                if d.is_float() {
                    for &op in UnaryOp::ALL {
                        let what = format!("{} {d} {shape:?} {view}", op.name());
                        compare(&what, up(&x).unary(&l, op), x.unary(&l, op), Tol::of(d));
                    }
                }
            }
        }
        binary_family(&mut rng, d);
        where_family(&mut rng, d);
    }
}

/// Binary ops and comparisons, each operand in every view with the other contiguous.
fn binary_family(rng: &mut rand::rngs::StdRng, d: DType) {
    for shape in SHAPES {
        let contiguous = Layout::contiguous(shape.to_vec());
        for (view, l, len) in views(shape) {
            let (a, b) = (random(rng, d, len), random(rng, d, contiguous.shape().elem_count()));
            for (lhs, ll, rhs, rl) in [(&a, &l, &b, &contiguous), (&b, &contiguous, &a, &l)] {
                for &op in BinaryOp::ALL {
                    let what = format!("{} {d} {shape:?} {view}", op.name());
                    compare(&what, up(lhs).binary(ll, &up(rhs), rl, op), lhs.binary(ll, rhs, rl, op), Tol::of(d));
                }
                for &op in CmpOp::ALL {
                    let what = format!("{} {d} {shape:?} {view}", op.name());
                    compare(&what, up(lhs).cmp(ll, &up(rhs), rl, op), lhs.cmp(ll, rhs, rl, op), Tol::of(DType::U8));
                }
            }
        }
    }
    // Integer edge cases the random values rarely reach: MIN / -1, division by zero, wrap.
    if !d.is_float() {
        let edge = CpuStorage::I64(vec![i64::MIN, 7, -7, i64::MAX, 0, 255]).to_dtype(&Layout::contiguous(6), d);
        let by = CpuStorage::I64(vec![-1, 0, 2, 2, 0, 1]).to_dtype(&Layout::contiguous(6), d);
        let (a, b, l) = (edge.expect("cast"), by.expect("cast"), Layout::contiguous(6));
        for &op in BinaryOp::ALL {
            compare(
                &format!("{} {d} edges", op.name()),
                up(&a).binary(&l, &up(&b), &l, op),
                a.binary(&l, &b, &l, op),
                Tol::of(d),
            );
        }
    }
}

fn where_family(rng: &mut rand::rngs::StdRng, d: DType) {
    for cond in ID_DTYPES {
        for shape in SHAPES {
            let n: usize = shape.iter().product();
            let c = small_ints(rng, cond, n, 3);
            let cl = Layout::contiguous(shape.to_vec());
            for (view, l, len) in views(shape) {
                let (t, f) = (random(rng, d, len), random(rng, d, n));
                let what = format!("where {cond} {d} {shape:?} {view}");
                let got = up(&c).where_cond(&cl, &up(&t), &l, &up(&f), &cl);
                compare(&what, got, c.where_cond(&cl, &t, &l, &f, &cl), Tol::of(d));
            }
        }
    }
}

/// Reductions in every work split: (shape, reduced dims), small to large.
const REDUCTIONS: &[(&[usize], &[usize])] = &[
    (&[5, 7], &[1]),       // one thread per output
    (&[5, 300], &[1]),     // one warp per output
    (&[3, 2000], &[1]),    // one block per output
    (&[1, 40_000], &[1]),  // parts, then merge
    (&[40, 17_000], &[0]), // outputs adjacent in memory: one thread per output
    (&[4, 5, 6], &[0, 2]), // several dims
    (&[3, 0], &[1]),       // empty reductions: the identity
    (&[6, 9], &[0, 1]),
];

pub(super) fn reductions() {
    let mut rng = rng(2);
    let ops = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin];
    for &d in &DType::ALL {
        for &(shape, dims) in REDUCTIONS {
            for (view, l, len) in views(shape).into_iter().take(if shape.len() > 2 { 5 } else { 3 }) {
                let r: usize = dims.iter().map(|&i| shape[i]).product();
                for op in ops {
                    // Sums get ordinary values (their rounding is compared); max / min the specials.
                    let x = if op == ReduceOp::Sum && d.is_float() {
                        plain(&mut rng, d, len)
                    } else {
                        random(&mut rng, d, len)
                    };
                    let tol = if op == ReduceOp::Sum { Tol::sum(d, r, 4.0) } else { Tol::of(d) };
                    let what = format!("{} {d} {shape:?} over {dims:?} {view}", op.name());
                    compare(&what, up(&x).reduce(&l, op, dims), x.reduce(&l, op, dims), tol);
                }
            }
        }
    }
}

/// A fused op's output on the emulator and on the CPU.
fn fused(
    op: &dyn crate::fused::FusedOp,
    inputs: &[(&CpuStorage, &Layout)],
) -> (Result<EmuStorage>, Result<CpuStorage>) {
    let (got, want) = fused_outputs(op, inputs);
    (got.map(|mut v| v.swap_remove(0)), want.map(|mut v| v.swap_remove(0)))
}

/// A fused op's output and saved extra outputs on the emulator and on the CPU.
pub(super) fn fused_outputs(
    op: &dyn crate::fused::FusedOp,
    inputs: &[(&CpuStorage, &Layout)],
) -> (Result<Vec<EmuStorage>>, Result<Vec<CpuStorage>>) {
    let ups: Vec<EmuStorage> = inputs.iter().map(|(s, _)| up(s)).collect();
    let emu: Vec<(&EmuStorage, &Layout)> = ups.iter().zip(inputs).map(|(s, (_, l))| (s, *l)).collect();
    let none = || Error::Msg(format!("{} composed", op.name()));
    let got = <EmuStorage as BackendStorage>::fused(op, &emu).and_then(|r| r.ok_or_else(none));
    let want = <CpuStorage as BackendStorage>::fused(op, inputs).and_then(|r| r.ok_or_else(none));
    (got, want)
}

pub(super) fn softmax() {
    let mut rng = rng(3);
    for d in FLOATS {
        for shape in [&[5usize, 7][..], &[4, 300], &[3, 1000], &[2, 2500], &[2, 0], &[9], &[2, 3, 40]] {
            for (view, l, len) in views(shape) {
                let x = plain(&mut rng, d, len);
                for log in [false, true] {
                    let (got, want) = fused(&Softmax { log }, &[(&x, &l)]);
                    compare(&format!("softmax(log {log}) {d} {shape:?} {view}"), got, want, Tol::sum(d, 4, 1.0));
                }
            }
        }
        // Rows with NaN or infinities give NaN where the CPU does.
        let x = random(&mut rng, d, 400);
        let (got, want) = fused(&Softmax { log: false }, &[(&x, &Layout::contiguous(vec![20, 20]))]);
        compare(&format!("softmax {d} specials"), got, want, Tol::sum(d, 4, 1.0));
    }
}

/// The ids as the CPU reads them, with one bad index at `bad` when given.
fn ids(rng: &mut rand::rngs::StdRng, k: DType, n: usize, size: usize, bad: Option<usize>) -> CpuStorage {
    let mut s = small_ints(rng, k, n, size as i64);
    match (bad, &mut s) {
        (Some(at), CpuStorage::I64(v)) => v[at] = if at % 2 == 0 { -1 } else { size as i64 + 3 },
        (Some(at), CpuStorage::U32(v)) => v[at] = size as u32,
        (Some(at), CpuStorage::U8(v)) => v[at] = 255,
        _ => {}
    }
    s
}

pub(super) fn index_ops() {
    let mut rng = rng(4);
    for &d in &DType::ALL {
        for k in ID_DTYPES {
            for (shape, dim, m) in
                [([6usize, 50], 0usize, 30usize), ([6, 50], 1, 20), ([30, 300], 1, 250), ([0, 5], 1, 3)]
            {
                for bad in [None, Some(m.min(3) / 2), Some(m - 1)] {
                    if shape[0] == 0 && bad.is_some() {
                        continue;
                    }
                    for (view, l, len) in views(&shape).into_iter().take(4) {
                        let x = random(&mut rng, d, len);
                        index_cases(
                            &mut rng,
                            (&x, &l),
                            k,
                            (shape, dim, m),
                            bad,
                            &format!("{d} ids {k} {shape:?} dim {dim} {view} bad {bad:?}"),
                        );
                    }
                }
            }
        }
    }
}

fn index_cases(
    rng: &mut rand::rngs::StdRng,
    (x, l): (&CpuStorage, &Layout),
    k: DType,
    (shape, dim, m): ([usize; 2], usize, usize),
    bad: Option<usize>,
    what: &str,
) {
    let size = shape[dim].max(1);
    let select = ids(rng, k, m, size, bad);
    let il = Layout::contiguous(m);
    compare(
        &format!("index_select {what}"),
        up(x).index_select(l, &up(&select), &il, dim),
        x.index_select(l, &select, &il, dim),
        Tol::of(x.dtype()),
    );
    let mut gdims = shape.to_vec();
    gdims[dim] = m;
    let n: usize = gdims.iter().product();
    let gathered = ids(rng, k, n, size, bad);
    let gl = Layout::contiguous(gdims.clone());
    compare(
        &format!("gather {what}"),
        up(x).gather(l, &up(&gathered), &gl, dim),
        x.gather(l, &gathered, &gl, dim),
        Tol::of(x.dtype()),
    );
    let src = if x.dtype().is_float() { plain(rng, x.dtype(), n) } else { random(rng, x.dtype(), n) };
    let base = if x.dtype().is_float() { plain(rng, x.dtype(), x.len()) } else { x.clone() };
    let got = up(&base).scatter_add(l, &up(&gathered), &gl, &up(&src), &gl, dim);
    // Atomic adds land in any order: float sums round differently.
    let tol = Tol::sum(x.dtype(), n.div_ceil(size) + 1, 8.0);
    compare(&format!("scatter_add {what}"), got, base.scatter_add(l, &gathered, &gl, &src, &gl, dim), tol);
}

pub(super) fn windows() {
    let mut rng = rng(5);
    let window = Window2d { kernel: (3, 2), stride: (2, 1), padding: (1, 2), dilation: (1, 2) };
    for &d in &DType::ALL {
        for shape in [[2usize, 3, 9, 11], [1, 2, 40, 40]] {
            for (view, l, len) in views(&shape).into_iter().take(4) {
                let x = random(&mut rng, d, len);
                let what = format!("unfold2d {d} {shape:?} {view}");
                compare(&what, up(&x).unfold2d(&l, &window, 7.0), x.unfold2d(&l, &window, 7.0), Tol::of(d));
                let (ho, wo) = window.output_size("test", (shape[2], shape[3])).expect("window fits");
                let cols = [shape[0], shape[1], window.taps(), ho * wo];
                for (cview, cl, clen) in views(&cols).into_iter().take(3) {
                    let c = if d.is_float() { plain(&mut rng, d, clen) } else { random(&mut rng, d, clen) };
                    let what = format!("fold2d {d} {cols:?} {cview}");
                    let out_hw = (shape[2], shape[3]);
                    compare(
                        &what,
                        up(&c).fold2d(&cl, out_hw, &window),
                        c.fold2d(&cl, out_hw, &window),
                        Tol::sum(d, 6, 4.0),
                    );
                }
            }
        }
    }
}

/// The CPU's `act(x @ wᵀ + b)`, composed of storage ops.
fn cpu_linear(
    x: (&CpuStorage, &Layout),
    w: (&CpuStorage, &Layout),
    b: (&CpuStorage, &Layout),
    act: Epilogue,
) -> Result<CpuStorage> {
    let (m, n) = (x.1.dims()[0], w.1.dims()[0]);
    let z = x.0.matmul(x.1, w.0, &w.1.transpose(0, 1)?)?;
    let out = Layout::contiguous(vec![m, n]);
    let rows = Layout::new(out.shape().clone(), vec![0, b.1.strides()[0]], b.1.start_offset());
    let z = z.binary(&out, b.0, &rows, BinaryOp::Add)?;
    match act.unary() {
        Some(op) => z.unary(&out, op),
        None => Ok(z),
    }
}

pub(super) fn products() {
    let mut rng = rng(6);
    for d in FLOATS {
        for (m, k, n, batch) in
            [(3, 4, 5, vec![]), (17, 33, 9, vec![2]), (1, 7, 1, vec![3, 2]), (4, 0, 3, vec![]), (0, 3, 2, vec![2])]
        {
            let with = |x: usize, y: usize| [batch.clone(), vec![x, y]].concat();
            for (va, la, lena) in views(&with(m, k)) {
                for (vb, lb, lenb) in views(&with(k, n)).into_iter().take(4) {
                    let (a, b) = (plain(&mut rng, d, lena), plain(&mut rng, d, lenb));
                    let what = format!("matmul {d} {m}x{k}x{n} batch {batch:?} {va} @ {vb}");
                    compare(&what, up(&a).matmul(&la, &up(&b), &lb), a.matmul(&la, &b, &lb), Tol::sum(d, k, 16.0));
                }
            }
        }
        for epilogues in [true, false] {
            set_epilogues(epilogues);
            linear_cases(&mut rng, d, epilogues);
        }
        set_epilogues(true);
    }
}

fn linear_cases(rng: &mut rand::rngs::StdRng, d: DType, epilogues: bool) {
    let (m, k, n) = (6, 10, 7);
    for &act in Epilogue::ALL {
        for (vx, xl, lenx) in views(&[m, k]).into_iter().take(4) {
            for (vw, wl, lenw) in views(&[n, k]).into_iter().take(4) {
                // Bias views: contiguous, at an odd offset (not 16-byte aligned), strided.
                for (vb, bl, lenb) in [
                    ("contiguous", Layout::contiguous(n), n),
                    ("odd offset", Layout::contiguous_with_offset(n, 1), n + 1),
                    ("strided", Layout::new(vec![n].into(), vec![2], 0), 2 * n),
                ] {
                    let (x, w, b) = (plain(rng, d, lenx), plain(rng, d, lenw), plain(rng, d, lenb));
                    let (got, _) = fused(&Linear { act }, &[(&x, &xl), (&w, &wl), (&b, &bl)]);
                    let want = cpu_linear((&x, &xl), (&w, &wl), (&b, &bl), act);
                    let what = format!("linear {act:?} {d} x {vx} w {vw} bias {vb} (epilogues {epilogues})");
                    compare(&what, got, want, Tol::sum(d, k, 16.0));
                }
            }
        }
    }
}

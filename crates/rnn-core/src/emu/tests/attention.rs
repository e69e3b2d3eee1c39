//! Fused attention's kernels (forward, backward dq and dk / dv passes, and the 16-bit
//! kernels' single backward pass with atomic dq) on the emulator,
//! against attention's composition of primitives run on the CPU with the same inputs: every
//! dtype and feature bucket, sizes of one row, of a tile plus one and of no multiple of a
//! tile, Nq != Nk, each mask kind, NaN and infinities, strided and broadcast views, empty
//! problems.

use rand::rngs::StdRng;
use rand::Rng;

use super::{compare, rng, up, Tol, TURING};
use crate::cpu::CpuStorage;
use crate::emu::EmuStorage;
use crate::fused::attention::{Attention, AttentionBackward};
use crate::fused::FusedOp;
use crate::storage::{BackendStorage, Storage};
use crate::{DType, Layout, Result, Tensor};

/// One attention problem: sizes, mask and input views.
#[derive(Clone, Debug)]
struct Case {
    dims: [usize; 6], // batch, heads, nq, nk, d, dv
    causal: bool,
    lengths: Option<Vec<u32>>,
    /// The bias as `[Nq, Nk]` broadcast over batch and heads (stride 0), or full.
    bias: Option<BiasKind>,
    bias_grad: bool,
    /// q transposed from `[B, Nq, H, D]`, k narrowed from wider rows, v at an offset.
    strided: bool,
    /// Special values: a NaN in q, +inf in k, a bias row of -inf.
    specials: bool,
    /// Keys growing along the sequence (row j times 1 + j / 16), so that a row's max rises
    /// far above the shift the 16-bit forward took its first probabilities against, and
    /// later key tiles must rescale what it accumulated (RESCALE_SLACK in attention_mma.cu).
    rising: bool,
    /// Every score lowered by 200 (the bias is full and near -200): a row's first finite max
    /// lies far below 0, where the 16-bit forward's shift starts, and moving the shift down
    /// to it must not rescale the empty sums by exp2(200 log2(e)) = inf (0 * inf is NaN).
    sunk: bool,
}

#[derive(Clone, Copy, Debug)]
enum BiasKind {
    Broadcast,
    Full,
}

impl Case {
    fn new(dims: [usize; 6]) -> Case {
        Case {
            dims,
            causal: false,
            lengths: None,
            bias: None,
            bias_grad: false,
            strided: false,
            specials: false,
            rising: false,
            sunk: false,
        }
    }
}

fn values(rng: &mut StdRng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.random_range(-2.0..2.0)).collect()
}

fn storage(v: Vec<f64>, dtype: DType) -> CpuStorage {
    let n = v.len();
    CpuStorage::F64(v).to_dtype(&Layout::contiguous(n), dtype).expect("cast")
}

/// A random `dims` tensor as a buffer and a view of it (strided when asked).
fn input(rng: &mut StdRng, dtype: DType, dims: [usize; 4], how: &str) -> (CpuStorage, Layout) {
    let [b, h, n, f] = dims;
    let (layout, len) = match how {
        "transposed" => (Layout::contiguous(vec![b, n, h, f]).transpose(1, 2).expect("dims"), b * h * n * f),
        "narrowed" => (Layout::contiguous(vec![b, h, n, f + 3]).narrow(3, 2, f).expect("dims"), b * h * n * (f + 3)),
        "offset" => (Layout::contiguous_with_offset(vec![b, h, n, f], 5), b * h * n * f + 5),
        _ => (Layout::contiguous(dims.to_vec()), b * h * n * f),
    };
    (storage(values(rng, len), dtype), layout)
}

/// Puts `value` at storage element `at` (when there is one).
fn set(s: CpuStorage, at: usize, value: f64) -> CpuStorage {
    let mut v: Vec<f64> = crate::cpu_each!(&s, x => x.iter().map(|e| crate::WithDType::to_f64(*e)).collect());
    if let Some(e) = v.get_mut(at) {
        *e = value;
    }
    storage(v, s.dtype())
}

/// The inputs of the forward: (storage, layout) of q, k, v, [lengths], [bias].
fn inputs(rng: &mut StdRng, c: &Case, dtype: DType) -> Vec<(CpuStorage, Layout)> {
    let [b, h, nq, nk, d, dv] = c.dims;
    let pick = |s: &'static str| if c.strided { s } else { "contiguous" };
    let (mut q, ql) = input(rng, dtype, [b, h, nq, d], pick("transposed"));
    let (mut k, kl) = input(rng, dtype, [b, h, nk, d], pick("narrowed"));
    if c.rising {
        assert!(!c.strided, "rising keys are written contiguous");
        let grown =
            values(rng, b * h * nk * d).into_iter().enumerate().map(|(e, x)| x * (1.0 + (e / d % nk) as f64 / 16.0));
        k = storage(grown.collect(), dtype);
    }
    let v = input(rng, dtype, [b, h, nk, dv], pick("offset"));
    if c.specials {
        q = set(q, 1, f64::NAN);
        k = set(k, kl.start_offset() + 2 * kl.strides()[2], f64::INFINITY);
    }
    let mut all = vec![(q, ql), (k, kl), v];
    if let Some(lengths) = &c.lengths {
        all.push((CpuStorage::U32(lengths.clone()), Layout::contiguous(lengths.len())));
    }
    match c.bias {
        Some(BiasKind::Broadcast) => {
            let mut bias = storage(values(rng, nq * nk), dtype);
            if c.specials {
                // Row 1 fully masked, and one more hidden score.
                for j in 0..nk {
                    bias = set(bias, nk + j, f64::NEG_INFINITY);
                }
                bias = set(bias, 0, f64::NEG_INFINITY);
            }
            all.push((bias, Layout::new(vec![b, h, nq, nk].into(), vec![0, 0, nk, 1], 0)));
        }
        Some(BiasKind::Full) => {
            let sink = if c.sunk { -200.0 } else { 0.0 };
            let bias = values(rng, b * h * nq * nk).into_iter().map(|x| x + sink).collect();
            all.push((storage(bias, dtype), Layout::contiguous(vec![b, h, nq, nk])))
        }
        None => {}
    }
    all
}

fn tensor(s: &CpuStorage, l: &Layout) -> Tensor {
    Tensor::from_parts(Storage::Cpu(s.clone()), l.clone(), None)
}

fn host(t: &Tensor) -> Result<CpuStorage> {
    match &*t.storage() {
        Storage::Cpu(s) => s.copy_strided(t.layout()),
        _ => Err(crate::Error::Msg("not a CPU tensor".into())),
    }
}

/// The composition on the CPU: the reference results. Without keys (which the composition's
/// max rejects) every row is fully masked: output and gradients 0, log-sum-exp -inf.
fn reference(op: &dyn FusedOp, inputs: &[(CpuStorage, Layout)]) -> Result<Vec<CpuStorage>> {
    let tensors: Vec<Tensor> = inputs.iter().map(|(s, l)| tensor(s, l)).collect();
    if tensors[1].dims()[2] == 0 {
        let refs: Vec<&Tensor> = tensors.iter().collect();
        let (shape, dtype) = op.output(&refs)?;
        let mut all = vec![(shape, dtype)];
        all.extend(op.saved(&refs)?);
        // The forward's second result is the log-sum-exp.
        let forward = op.name() == "scaled_dot_product_attention";
        return all
            .iter()
            .enumerate()
            .map(|(n, (shape, dtype))| {
                let value = if forward && n == 1 { f64::NEG_INFINITY } else { 0.0 };
                CpuStorage::full(value, shape.elem_count(), *dtype)
            })
            .collect();
    }
    op.compose(&tensors)?.iter().map(host).collect()
}

/// The fused kernels on the emulator.
fn emulated(op: &dyn FusedOp, inputs: &[(CpuStorage, Layout)]) -> Result<Vec<EmuStorage>> {
    let ups: Vec<EmuStorage> = inputs.iter().map(|(s, _)| up(s)).collect();
    let parts: Vec<(&EmuStorage, &Layout)> = ups.iter().zip(inputs).map(|(s, (_, l))| (s, l)).collect();
    let none = || crate::Error::Msg(format!("{} composed on the emulator", op.name()));
    <EmuStorage as BackendStorage>::fused(op, &parts)?.ok_or_else(none)
}

/// Results of sums over `terms` values of order one, in `dtype` (a half result is rounded
/// once from f32, as the composition's).
fn tol(dtype: DType, terms: usize) -> Tol {
    let terms = terms.max(1) as f64;
    match dtype {
        DType::F64 => Tol { rtol: 1e-10, atol: 1e-11 * terms },
        DType::F32 => Tol { rtol: 1e-4, atol: 2e-6 * terms },
        DType::F16 => Tol { rtol: 4e-3, atol: 1e-3 + 2e-6 * terms },
        _ => Tol { rtol: 2e-2, atol: 1e-2 + 2e-6 * terms },
    }
}

fn compare_all(what: &str, got: Result<Vec<EmuStorage>>, want: Result<Vec<CpuStorage>>, tols: &[Tol]) {
    let (got, want) = match (got, want) {
        (Ok(g), Ok(w)) => (g, w),
        (g, w) => panic!("{what}: emulator {:?}, CPU {:?}", g.err(), w.err()),
    };
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (n, (g, w)) in got.into_iter().zip(want).enumerate() {
        compare(&format!("{what} output {n}"), Ok(g), Ok(w), tols[n.min(tols.len() - 1)]);
    }
}

/// The forward and the backward of one case in one dtype.
fn check(rng: &mut StdRng, c: &Case, dtype: DType) {
    let [b, h, nq, nk, d, dv] = c.dims;
    let fwd = Attention {
        scale: 1.0 / (d.max(1) as f64).sqrt(),
        causal: c.causal,
        lengths: c.lengths.is_some(),
        bias: c.bias.is_some(),
        saves_lse: true,
    };
    let ins = inputs(rng, c, dtype);
    let what = format!("attention {dtype} {c:?}");
    let stat = crate::fused::attention::stat_dtype(dtype);
    let want = reference(&fwd, &ins).expect("the composition runs");
    compare_all(&format!("{what} forward"), emulated(&fwd, &ins), Ok(want.clone()), &[tol(dtype, nk), tol(stat, nk)]);
    // The backward from the reference forward's output and log-sum-exp, so both sides see
    // the same values.
    let d_o = storage(values(rng, b * h * nq * dv), dtype);
    let mut bwd_ins = ins[..3].to_vec();
    bwd_ins.push((want[0].clone(), Layout::contiguous(vec![b, h, nq, dv])));
    bwd_ins.push((d_o, Layout::contiguous(vec![b, h, nq, dv])));
    bwd_ins.push((want[1].clone(), Layout::contiguous(vec![b, h, nq])));
    bwd_ins.extend(ins[3..].iter().cloned());
    let terms = nq.max(nk) * d.max(dv).max(1);
    // Rising keys make the softmax rows nearly one-hot, where dS = P (dP - delta) cancels,
    // and the gradients grow with the keys: their rounding errors grow alike.
    let growth = if c.rising { 1.0 + nk as f64 / 16.0 } else { 1.0 };
    let bwd_tol = tol(dtype, terms);
    let bwd_tol = Tol { atol: bwd_tol.atol * growth, ..bwd_tol };
    // The 16-bit kernels' two backward designs: two passes, and one with atomic dq.
    let designs: &[bool] = if matches!(dtype, DType::F16 | DType::BF16) { &[false, true] } else { &[false] };
    for &atomic_dq in designs {
        let bwd = AttentionBackward { fwd, bias_grad: c.bias_grad, atomic_dq };
        let got = emulated(&bwd, &bwd_ins);
        let want = reference(&bwd, &bwd_ins);
        compare_all(&format!("{what} backward (atomic dq: {atomic_dq})"), got, want, &[bwd_tol]);
    }
}

/// Every dtype and feature bucket (so every kernel variant), then the edge cases in every
/// dtype.
pub(super) fn attention() {
    let mut rng = rng(11);
    let floats = [DType::F32, DType::F64, DType::F16, DType::BF16];
    // One case per bucket (32, 64, 128), with D != Dv in the larger two.
    let buckets = [[1, 2, 5, 7, 32, 32], [2, 1, 9, 6, 40, 64], [1, 1, 4, 3, 128, 96]];
    for dtype in floats {
        for (n, dims) in buckets.into_iter().enumerate() {
            let mut c = Case::new(dims);
            c.causal = n == 1;
            c.bias = (n == 2).then_some(BiasKind::Full);
            c.bias_grad = n == 2;
            check(&mut rng, &c, dtype);
        }
    }
    for dtype in floats {
        for c in edge_cases() {
            check(&mut rng, &c, dtype);
        }
    }
    // A device without the tensor-core kernels' instructions: 16-bit attention on the scalar
    // kernels (variants ending in `/scalar`).
    super::super::as_device_of(TURING, || {
        for dtype in [DType::F16, DType::BF16] {
            for c in buckets.into_iter().map(Case::new).chain(edge_cases()) {
                check(&mut rng, &c, dtype);
            }
        }
    });
}

fn edge_cases() -> Vec<Case> {
    let with = |dims: [usize; 6], f: &dyn Fn(&mut Case)| {
        let mut c = Case::new(dims);
        f(&mut c);
        c
    };
    vec![
        Case::new([1, 1, 1, 1, 8, 8]),
        // A forward tile (16 queries, 32 keys) plus one; 8 queries per dk / dv tile.
        with([1, 2, 17, 33, 16, 16], &|c| c.causal = true),
        with([2, 1, 20, 9, 32, 20], &|c| c.causal = true),
        with([1, 2, 9, 21, 24, 32], &|c| c.causal = true),
        with([3, 2, 6, 11, 16, 16], &|c| c.lengths = Some(vec![0, 4, 100])),
        with([2, 2, 7, 10, 16, 8], &|c| {
            c.bias = Some(BiasKind::Broadcast);
            c.bias_grad = true;
        }),
        with([2, 1, 12, 12, 16, 16], &|c| {
            c.causal = true;
            c.lengths = Some(vec![5, 12]);
            c.bias = Some(BiasKind::Full);
        }),
        with([2, 2, 5, 6, 16, 16], &|c| {
            c.bias = Some(BiasKind::Broadcast);
            c.bias_grad = true;
            c.specials = true;
        }),
        with([1, 2, 5, 6, 16, 16], &|c| c.specials = true),
        with([2, 3, 7, 9, 16, 12], &|c| {
            c.strided = true;
            c.causal = true;
            c.bias = Some(BiasKind::Broadcast);
        }),
        // The 16-bit kernels' tiles (forward: 128 queries, 64 keys; backward: 64 and 64)
        // plus one, on 16-byte row loads (contiguous, D a multiple of 8) and on element
        // loads (strided views); causal ones, where warps skip the key tiles past their rows.
        with([1, 2, 65, 130, 64, 64], &|c| c.causal = true),
        with([1, 1, 129, 131, 64, 64], &|c| c.causal = true),
        with([1, 1, 130, 96, 128, 128], &|c| {
            c.causal = true;
            c.lengths = Some(vec![90]);
        }),
        with([2, 1, 70, 67, 32, 32], &|c| c.lengths = Some(vec![66, 3])),
        with([1, 1, 64, 65, 128, 128], &|_| {}),
        with([1, 2, 66, 64, 64, 64], &|c| {
            c.strided = true;
            c.causal = true;
        }),
        // Keys growing along the sequence: later key tiles raise the rows' maxima past the
        // forward's rescaling slack.
        with([1, 1, 129, 200, 64, 64], &|c| c.rising = true),
        with([1, 2, 30, 140, 32, 32], &|c| {
            c.rising = true;
            c.causal = true;
        }),
        with([1, 1, 20, 150, 128, 128], &|c| c.rising = true),
        // Scores far below 0 from the first key tile on.
        with([1, 2, 20, 70, 64, 64], &|c| {
            c.bias = Some(BiasKind::Full);
            c.sunk = true;
        }),
        with([1, 1, 18, 40, 128, 128], &|c| {
            c.bias = Some(BiasKind::Full);
            c.sunk = true;
            c.causal = true;
        }),
        Case::new([1, 2, 0, 5, 16, 16]),
        Case::new([1, 2, 4, 0, 16, 16]),
        Case::new([0, 2, 4, 5, 16, 16]),
    ]
}

#[test]
fn attention_kernels_match_the_composition() {
    attention();
}

//! `scaled_dot_product_attention` on every device: the output and the gradients of q, k, v
//! and the bias against a naive f64 attention written here (`attention/reference.rs`), for
//! every mask kind (none, causal, key padding with an empty row and lengths past Nk, bias
//! broadcast and full, combinations), shapes around the kernels' tile sizes, Nq != Nk,
//! D != Dv, strided inputs, and every float dtype the device has. Then a finite-difference
//! gradient check, PyTorch fixtures (`golden/attention.json`), NaN / inf propagation, empty
//! tensors and the errors of bad input. The 16-bit cases run again with the CUDA backward
//! that adds dq with atomics switched on.

#[path = "attention/reference.rs"]
mod reference;

use rand::Rng;
use reference::Problem;
use rnn_core::{scaled_dot_product_attention, AttentionMask, DType, Device, Result, Tensor};
use rnn_testutil::{
    check_gradients, diff_summary, floats, max_rel_err, rng, test_device, tol_on, tolerance, values, widest_float,
};

const CPU: Device = Device::Cpu;

/// How an input is laid out in memory (its logical values are the same).
#[derive(Clone, Copy, Debug, PartialEq)]
enum View {
    Plain,
    /// `[B, N, H, D]` in memory, seen as `[B, H, N, D]` (heads split from a projection).
    HeadsInner,
    /// A slice of a wider last dim: a row stride larger than D and a non-zero offset.
    Narrowed,
}

#[derive(Clone, Debug)]
struct Case {
    name: &'static str,
    p: Problem,
    bias_grad: bool,
    /// Some bias entries (and all of query row 0's) set to `-inf`.
    bias_neg_inf: bool,
    /// Layouts of q, k, v.
    views: [View; 3],
    /// Lengths passed as i64 instead of u32.
    i64_lengths: bool,
}

fn problem(dims: [usize; 6]) -> Problem {
    let [batch, heads, nq, nk, d, dv] = dims;
    Problem {
        batch,
        heads,
        nq,
        nk,
        d,
        dv,
        scale: 1.0 / (d as f64).sqrt(),
        causal: false,
        lengths: None,
        bias_dims: None,
    }
}

fn case(name: &'static str, dims: [usize; 6]) -> Case {
    Case { name, p: problem(dims), bias_grad: false, bias_neg_inf: false, views: [View::Plain; 3], i64_lengths: false }
}

impl Case {
    fn causal(mut self) -> Self {
        self.p.causal = true;
        self
    }
    fn lengths(mut self, l: &[usize]) -> Self {
        self.p.lengths = Some(l.to_vec());
        self
    }
    fn bias(mut self, dims: &[usize], grad: bool) -> Self {
        self.p.bias_dims = Some(dims.to_vec());
        self.bias_grad = grad;
        self
    }
    fn views(mut self, views: [View; 3]) -> Self {
        self.views = views;
        self
    }
    fn scale(mut self, s: f64) -> Self {
        self.p.scale = s;
        self
    }
}

/// The cases: sizes straddle the CPU kernels' 64-row tiles and the 32-row tiles of other
/// kernels (1, 17, 33, 65, 70, 90, 150). On the CPU, f32 products whose result has whole
/// 16-column blocks (D, Dv in 16, 32, 48, 64, 128) run on the AVX2 micro-kernel where the CPU
/// has it, the others (D = 5, 8, 24, 40) and every f64 product on the `gemm` crate.
fn cases() -> Vec<Case> {
    use View::*;
    let all = vec![
        case("single", [1, 1, 1, 1, 32, 32]),
        case("tile_plus_one", [2, 2, 65, 65, 64, 64]),
        case("causal_tile_plus_one", [1, 2, 65, 65, 64, 64]).causal(),
        case("nq_ne_nk_dv_ne_d", [1, 2, 37, 90, 32, 48]).views([HeadsInner, Narrowed, HeadsInner]),
        case("causal_nq_gt_nk_d128", [1, 1, 70, 20, 128, 128]).causal(),
        case("causal_nq_lt_nk", [1, 2, 17, 33, 16, 16]).causal().views([Narrowed, HeadsInner, Plain]),
        // One head: the CPU backward splits its key tiles over the threads.
        case("one_head_long_keys", [1, 1, 40, 150, 32, 40]),
        case("one_head_causal", [1, 1, 150, 150, 16, 16]).causal().bias(&[150, 150], true),
        case("padding", [3, 2, 33, 40, 32, 32]).lengths(&[0, 17, 99]),
        case("padding_i64", [2, 1, 9, 13, 5, 7]).lengths(&[13, 1]),
        case("causal_padding", [2, 2, 40, 40, 64, 64]).causal().lengths(&[7, 40]),
        case("bias_full_grad", [2, 2, 33, 21, 32, 32]).bias(&[2, 2, 33, 21], true),
        case("bias_broadcast_grad", [2, 3, 18, 35, 64, 32]).bias(&[3, 1, 35], true).causal(),
        case("bias_no_grad_scale", [1, 2, 20, 20, 24, 24]).bias(&[1, 1, 20, 20], false).scale(0.5),
        case("bias_neg_inf_padding", [2, 1, 16, 19, 8, 8]).bias(&[2, 1, 16, 19], true).lengths(&[19, 5]),
        // Eight heads: the CPU forward runs four query blocks per task (one transposed key
        // tile for all); 150 rows end in a 22-row block, 77 keys in a 13-key tile.
        case("grouped_blocks_causal_padding", [4, 2, 150, 77, 32, 16]).causal().lengths(&[77, 50, 3, 0]),
        case("grouped_blocks_bias", [2, 4, 131, 131, 48, 32]).bias(&[4, 131, 131], true),
        // The CPU forward takes 128-key tiles from 2048 keys on (at every length where the
        // AVX-512 kernels run, where 131 and 150 keys above cross one): 2100 keys padded to
        // 2050 end in a 2-key tile; the causal rows stop in the first tile.
        case("wide_key_tiles", [2, 1, 20, 2100, 16, 16]).lengths(&[2050, 2100]).bias(&[1, 1, 2100], true),
        case("wide_key_tiles_causal", [1, 1, 150, 2100, 16, 16]).causal(),
    ]
    .into_iter()
    .map(|c| {
        let name = c.name;
        Case { i64_lengths: name == "padding_i64", bias_neg_inf: name == "bias_neg_inf_padding", ..c }
    })
    .collect();
    selected(all)
}

/// The environment variable that names the cases to run, comma-separated (all when unset):
/// for the tools too slow for every case, like compute-sanitizer's racecheck
/// (`scripts/gpu/run.sh`).
const CASES_ENV: &str = "RNN_ATTENTION_CASES";

/// The cases `RNN_ATTENTION_CASES` names; a name that is no case is an error, so that a typo
/// cannot leave nothing to check.
fn selected(all: Vec<Case>) -> Vec<Case> {
    let Ok(list) = std::env::var(CASES_ENV) else { return all };
    let names: Vec<&str> = list.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    for name in &names {
        assert!(all.iter().any(|c| c.name == *name), "{CASES_ENV}: no case is named {name:?}");
    }
    all.into_iter().filter(|c| names.contains(&c.name)).collect()
}

fn rand_vec(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut r = rng(seed);
    (0..n).map(|_| r.random_range(lo..hi)).collect()
}

/// `data` rounded to `dtype` (and back to f64): the values a `dtype` tensor holds.
fn rounded(data: &[f64], dtype: DType) -> Result<Vec<f64>> {
    Ok(values(&Tensor::from_vec(data.to_vec(), data.len(), CPU)?.to_dtype(dtype)?))
}

/// A `[B, H, N, D]` tensor of `dtype` on `device` with logical values `data`, laid out as
/// `view` says, tracking gradients.
fn build(data: &[f64], dims: [usize; 4], view: View, dtype: DType, device: Device) -> Result<Tensor> {
    let [b, h, n, d] = dims;
    let t = Tensor::from_vec(data.to_vec(), dims.to_vec(), CPU)?;
    let t = match view {
        View::Plain => t.to_dtype(dtype)?.to_device(device)?,
        View::HeadsInner => {
            let inner = t.transpose(1, 2)?.contiguous()?; // [B, N, H, D] in memory
            inner.to_dtype(dtype)?.to_device(device)?.transpose(1, 2)?
        }
        View::Narrowed => {
            let wide =
                Tensor::cat(&[Tensor::zeros((b, h, n, 1), DType::F64, CPU)?, t.clone(), t.narrow(3, 0, d.min(2))?], 3)?;
            wide.to_dtype(dtype)?.to_device(device)?.narrow(3, 1, d)?
        }
    };
    Ok(t.requires_grad())
}

/// The inputs of one case in `dtype`: q, k, v, bias data (rounded to `dtype`) and weights.
struct Data {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    bias: Vec<f64>,
    w: Vec<f64>,
}

fn data(c: &Case, dtype: DType) -> Result<Data> {
    let p = &c.p;
    let (nq, nk) = (p.batch * p.heads * p.nq, p.batch * p.heads * p.nk);
    let bias_n: usize = p.bias_dims.as_ref().map_or(0, |d| d.iter().product());
    let mut bias = rand_vec(4, bias_n, -1.0, 1.0);
    if c.bias_neg_inf {
        let dims = p.bias_dims.as_ref().expect("a bias");
        let row = dims[dims.len() - 1];
        for (i, x) in bias.iter_mut().enumerate() {
            if i % row == i / row % row || i < row {
                *x = f64::NEG_INFINITY;
            }
        }
    }
    Ok(Data {
        q: rounded(&rand_vec(1, nq * p.d, -1.5, 1.5), dtype)?,
        k: rounded(&rand_vec(2, nk * p.d, -1.5, 1.5), dtype)?,
        v: rounded(&rand_vec(3, nk * p.dv, -1.0, 1.0), dtype)?,
        bias: rounded(&bias, dtype)?,
        w: rand_vec(5, nq * p.dv, 0.5, 1.5),
    })
}

fn lengths_tensor(c: &Case, device: Device) -> Result<Option<Tensor>> {
    let Some(l) = &c.p.lengths else { return Ok(None) };
    let t = if c.i64_lengths {
        Tensor::from_vec(l.iter().map(|&x| x as i64).collect::<Vec<_>>(), l.len(), CPU)?
    } else {
        Tensor::from_vec(l.iter().map(|&x| x as u32).collect::<Vec<_>>(), l.len(), CPU)?
    };
    Ok(Some(t.to_device(device)?))
}

fn check(what: &str, got: &Tensor, want: &[f64], tol: f64) {
    let got = values(got);
    let err = max_rel_err(&got, want);
    assert!(err <= tol, "{what}: error {err:.3e} > {tol:.1e}: {}", diff_summary(&got, want));
}

/// Runs one case in `dtype` on `device` and compares the output and gradients with the
/// reference computed from the same (rounded) inputs.
fn run_case(c: &Case, dtype: DType, device: Device) -> Result<()> {
    let p = &c.p;
    let x = data(c, dtype)?;
    let want = p.run(&x.q, &x.k, &x.v, &x.bias, &x.w);
    let q = build(&x.q, [p.batch, p.heads, p.nq, p.d], c.views[0], dtype, device)?;
    let k = build(&x.k, [p.batch, p.heads, p.nk, p.d], c.views[1], dtype, device)?;
    let v = build(&x.v, [p.batch, p.heads, p.nk, p.dv], c.views[2], dtype, device)?;
    let bias = match &p.bias_dims {
        Some(dims) => {
            let t = Tensor::from_vec(x.bias.clone(), dims.clone(), CPU)?.to_dtype(dtype)?.to_device(device)?;
            Some(if c.bias_grad { t.requires_grad() } else { t })
        }
        None => None,
    };
    let mask = AttentionMask { causal: p.causal, key_lengths: lengths_tensor(c, device)?, bias: bias.clone() };
    let o = scaled_dot_product_attention(&q, &k, &v, &mask, Some(p.scale))?;
    assert_eq!((o.dims(), o.dtype(), o.device()), (&[p.batch, p.heads, p.nq, p.dv][..], dtype, device));
    let on = format!("{} in {dtype} on {device}", c.name);
    let tol = tolerance(dtype);
    check(&format!("{on}: output"), &o, &want.o, tol_on(device, tol.result));
    // With no gradient to take, the CPU forward keeps no log-sum-exp; the output is the same.
    let inference = rnn_core::no_grad(|| scaled_dot_product_attention(&q, &k, &v, &mask, Some(p.scale)))?;
    let bits = |t: &Tensor| values(t).iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&inference), bits(&o), "{on}: output without gradients");
    let w = Tensor::from_vec(x.w.clone(), o.dims(), CPU)?.to_dtype(dtype)?.to_device(device)?;
    // Where q has its heads inside the rows, so does the loss: the output's gradient then
    // arrives as the `[B, H, N, D]` view of a `[B, N, H, D]` tensor, as in a transformer.
    let loss = match c.views[0] {
        View::HeadsInner => o.transpose(1, 2)?.mul(&w.transpose(1, 2)?)?,
        _ => o.mul(&w)?,
    };
    let grads = loss.sum_all()?.backward()?;
    let gtol = tol_on(device, tol.grad);
    for (name, t, want) in [("q", &q, &want.dq), ("k", &k, &want.dk), ("v", &v, &want.dv)] {
        let g = grads.get(t).unwrap_or_else(|| panic!("{on}: no gradient for {name}"));
        assert_eq!((g.dims(), g.dtype()), (t.dims(), dtype), "{on}: gradient of {name}");
        check(&format!("{on}: gradient of {name}"), g, want, gtol);
    }
    match (&bias, c.bias_grad) {
        (Some(b), true) => {
            let g = grads.get(b).unwrap_or_else(|| panic!("{on}: no gradient for the bias"));
            assert_eq!(g.dims(), b.dims(), "{on}: gradient of the bias");
            check(&format!("{on}: gradient of the bias"), g, &want.dbias, gtol);
        }
        (Some(b), false) => assert!(grads.get(b).is_none(), "{on}: a bias without grad got one"),
        _ => {}
    }
    Ok(())
}

fn matches_reference(device: Device) -> Result<()> {
    for c in cases() {
        for dtype in floats(device) {
            run_case(&c, dtype, device)?;
        }
    }
    Ok(())
}
test_device!(matches_reference_test, matches_reference);

/// The same cases in f16 / bf16 with `set_attention_atomic_dq(true)`: on CUDA the single-pass
/// backward that adds dq with atomics; other devices ignore the switch. Tests running beside
/// this one may take that backward too while it is on; they check against the same
/// references, so they hold either way.
fn atomic_dq_matches_reference(device: Device) -> Result<()> {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            rnn_core::set_attention_atomic_dq(self.0);
        }
    }
    let _restore = Restore(rnn_core::attention_atomic_dq());
    rnn_core::set_attention_atomic_dq(true);
    for c in cases() {
        for dtype in floats(device).into_iter().filter(|d| matches!(d, DType::F16 | DType::BF16)) {
            run_case(&c, dtype, device)?;
        }
    }
    Ok(())
}
test_device!(atomic_dq_matches_reference_test, atomic_dq_matches_reference);

/// Finite differences of q, k, v and a broadcast bias under a causal + padding mask (f64 on
/// the CPU; f32 against those gradients on a GPU).
fn gradcheck(device: Device) -> Result<()> {
    let inputs = [
        rnn_testutil::rand64(11, &[2, 2, 5, 4])?,
        rnn_testutil::rand64(12, &[2, 2, 6, 4])?,
        rnn_testutil::rand64(13, &[2, 2, 6, 3])?,
        rnn_testutil::rand64(14, &[2, 1, 5, 6])?,
    ];
    let lengths = Tensor::from_vec(vec![4u32, 6], 2, CPU)?;
    check_gradients(device, &inputs, |xs| {
        let mask = AttentionMask {
            causal: true,
            key_lengths: Some(rnn_testutil::like(&lengths, &xs[0])?),
            bias: Some(xs[3].clone()),
        };
        scaled_dot_product_attention(&xs[0], &xs[1], &xs[2], &mask, Some(0.7))
    })?;
    // Unmasked, default scale, a key longer than the query block.
    let inputs = [
        rnn_testutil::rand64(15, &[1, 1, 3, 8])?,
        rnn_testutil::rand64(16, &[1, 1, 7, 8])?,
        rnn_testutil::rand64(17, &[1, 1, 7, 5])?,
    ];
    check_gradients(device, &inputs, |xs| {
        scaled_dot_product_attention(&xs[0], &xs[1], &xs[2], &AttentionMask::none(), None)
    })
}
test_device!(gradcheck_test, gradcheck);

/// NaN in a key poisons every row that sees it (as PyTorch); a masked NaN key does not
/// reach a row that cannot see it. +inf in a score gives NaN for that row (inf - inf).
fn nan_inf(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let (nq, nk, d) = (4, 6, 8);
    let mut k = rand_vec(21, nk * d, -1.0, 1.0);
    k[3 * d] = f64::NAN; // key 3
    let q = Tensor::from_vec(rand_vec(22, nq * d, -1.0, 1.0), (1, 1, nq, d), CPU)?;
    let v = Tensor::from_vec(rand_vec(23, nk * d, -1.0, 1.0), (1, 1, nk, d), CPU)?;
    let k = Tensor::from_vec(k, (1, 1, nk, d), CPU)?;
    let [q, k, v] = [q, k, v].map(|t| rnn_testutil::to(&t, dtype, device).expect("move"));
    let o = values(&scaled_dot_product_attention(&q, &k, &v, &AttentionMask::causal(), None)?);
    for i in 0..nq {
        let row = &o[i * d..][..d];
        // Causal: rows 0..3 never see key 3.
        assert_eq!(row.iter().all(|x| x.is_nan()), i >= 3, "row {i}: {row:?}");
        assert!(i >= 3 || row.iter().all(|x| x.is_finite()), "row {i}: {row:?}");
    }
    let mut bias = vec![0.0; nq * nk];
    bias[nk + 2] = f64::INFINITY; // row 1, key 2
    let bias = rnn_testutil::to(&Tensor::from_vec(bias, (1, 1, nq, nk), CPU)?, dtype, device)?;
    let o = values(&scaled_dot_product_attention(&q, &k, &v, &AttentionMask::bias(&bias), None)?);
    assert!(o[d..2 * d].iter().all(|x| x.is_nan()), "a +inf score: {:?}", &o[d..2 * d]);
    Ok(())
}
test_device!(nan_inf_test, nan_inf);

/// The output's gradient may arrive broadcast: the gradient of `o.sum()` (one value over all
/// of o) or of a weighted sum over the rows (row stride 0). The CPU backward reads such a
/// gradient as it is; the gradients equal those of the same gradient materialized.
fn broadcast_output_gradient(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let (b, h, nq, nk, d) = (2, 3, 70, 33, 8);
    let t = |seed, dims: [usize; 4]| -> Result<Tensor> {
        let n = dims.iter().product();
        Tensor::from_vec(rand_vec(seed, n, -1.0, 1.0), dims, CPU)?.to_dtype(dtype)?.to_device(device)
    };
    let (q, k, v) = (t(1, [b, h, nq, d])?.requires_grad(), t(2, [b, h, nk, d])?.requires_grad(), t(3, [b, h, nk, d])?);
    let v = v.requires_grad();
    let w = t(4, [b, h, 1, d])?;
    for mask in [AttentionMask::none(), AttentionMask::causal()] {
        let attend = || scaled_dot_product_attention(&q, &k, &v, &mask, None);
        let o = attend()?;
        let seeds = [o.ones_like()?, w.broadcast_as(o.shape())?.contiguous()?];
        let broadcast = [o.sum_all()?, o.sum_keepdim(2)?.mul(&w)?.sum_all()?];
        for (loss, seed) in broadcast.iter().zip(&seeds) {
            let got = loss.backward()?;
            let want = attend()?.mul(seed)?.sum_all()?.backward()?;
            for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
                let (g, w) = (got.get(x).expect("a gradient"), want.get(x).expect("a gradient"));
                check(&format!("{dtype} on {device}: gradient of {name}"), g, &values(w), tol_on(device, 1e-6));
            }
        }
    }
    Ok(())
}
test_device!(broadcast_output_gradient_test, broadcast_output_gradient);

/// Results do not depend on what freed buffers held. The CPU hands an op that writes all
/// of an output a reused buffer as it is (no zeroing pass), and the attention's output and
/// its dq, dk and dv are such outputs: each task zeroes the rows it owns. With freed
/// buffers full of NaN in every size the calls ask for, a second run equals the first.
fn reused_buffers(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let (b, h, nq, nk, d) = (2, 3, 70, 150, 16);
    let t = |seed, n: usize| -> Result<Tensor> {
        Tensor::from_vec(rand_vec(seed, b * h * n * d, -1.0, 1.0), [b, h, n, d], CPU)?
            .to_dtype(dtype)?
            .to_device(device)
    };
    let (q, k, v) = (t(31, nq)?.requires_grad(), t(32, nk)?.requires_grad(), t(33, nk)?.requires_grad());
    for mask in [AttentionMask::none(), AttentionMask::causal()] {
        let run = || -> Result<Vec<Vec<f64>>> {
            let o = scaled_dot_product_attention(&q, &k, &v, &mask, None)?;
            let grads = o.sum_all()?.backward()?;
            let mut out = vec![values(&o)];
            out.extend([&q, &k, &v].map(|x| values(grads.get(x).expect("a gradient"))));
            Ok(out)
        };
        let first = run()?;
        assert!(first.iter().flatten().all(|x| x.is_finite()), "{dtype} on {device}: finite results");
        let sizes = [[b, h, nq, d], [b, h, nk, d], [b, h, nq, 1]];
        let dirty =
            (0..4).flat_map(|_| sizes.map(|s| Tensor::full(f64::NAN, s, dtype, device))).collect::<Result<Vec<_>>>()?;
        drop(dirty);
        assert_eq!(run()?, first, "{dtype} on {device}: the run after NaN buffers were freed");
    }
    Ok(())
}
test_device!(reused_buffers_test, reused_buffers);

/// Empty batch, heads or sequences give empty (or zero) results and gradients, no error.
fn empty(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    for (b, h, nq, nk) in [(0, 2, 3, 3), (1, 0, 3, 3), (1, 2, 0, 3), (1, 2, 3, 0)] {
        let q = Tensor::zeros((b, h, nq, 4), dtype, device)?.requires_grad();
        let k = Tensor::zeros((b, h, nk, 4), dtype, device)?.requires_grad();
        let v = Tensor::zeros((b, h, nk, 5), dtype, device)?.requires_grad();
        let o = scaled_dot_product_attention(&q, &k, &v, &AttentionMask::causal(), None)?;
        assert_eq!(o.dims(), [b, h, nq, 5]);
        assert!(values(&o).iter().all(|&x| x == 0.0), "no keys: zero output");
        let grads = o.sum_all()?.backward()?;
        for t in [&q, &k, &v] {
            let g = grads.get(t).expect("a gradient");
            assert_eq!(g.dims(), t.dims());
            assert!(values(g).iter().all(|&x| x == 0.0));
        }
    }
    Ok(())
}
test_device!(empty_test, empty);

/// Bad input is an error naming the problem, never a panic.
fn errors(device: Device) -> Result<()> {
    let dtype = widest_float(device);
    let t = |dims: &[usize]| Tensor::zeros(dims.to_vec(), dtype, device);
    let (q, k, v) = (t(&[2, 2, 3, 4])?, t(&[2, 2, 5, 4])?, t(&[2, 2, 5, 6])?);
    let none = AttentionMask::none();
    let err = |r: Result<Tensor>, needle: &str| rnn_testutil::expect_err(r, needle);
    err(scaled_dot_product_attention(&t(&[2, 3, 4])?, &k, &v, &none, None), "rank");
    err(scaled_dot_product_attention(&q, &t(&[2, 2, 5, 3])?, &v, &none, None), "shape");
    err(scaled_dot_product_attention(&q, &k, &t(&[2, 2, 4, 6])?, &none, None), "shape");
    err(scaled_dot_product_attention(&q, &t(&[2, 1, 5, 4])?, &v, &none, None), "shape");
    let other = rnn_testutil::other_dtype(device, dtype);
    err(scaled_dot_product_attention(&q, &k.to_dtype(other)?, &v, &none, None), "dtype");
    let ints = Tensor::zeros((2, 2, 3, 4), DType::U32, device)?;
    err(scaled_dot_product_attention(&ints, &ints, &ints, &none, None), "float");
    err(scaled_dot_product_attention(&q, &k, &v, &none, Some(f64::NAN)), "scale");
    let lengths = |dims: &[usize], dtype: DType| Tensor::zeros(dims.to_vec(), dtype, device);
    for bad in [lengths(&[3], DType::U32)?, lengths(&[2, 1], DType::U32)?] {
        err(scaled_dot_product_attention(&q, &k, &v, &AttentionMask::key_padding(&bad), None), "lengths");
    }
    err(scaled_dot_product_attention(&q, &k, &v, &AttentionMask::key_padding(&lengths(&[2], dtype)?), None), "lengths");
    err(scaled_dot_product_attention(&q, &k, &v, &AttentionMask::bias(&t(&[2, 2, 3, 4])?), None), "broadcast");
    err(scaled_dot_product_attention(&q, &k, &v, &AttentionMask::bias(&t(&[3, 5])?.to_dtype(other)?), None), "dtype");
    // The gradients are computed without recording, so differentiating them again is an
    // error (nothing to differentiate), not a panic.
    let qg = q.requires_grad();
    let grads = scaled_dot_product_attention(&qg, &k, &v, &none, None)?.sum_all()?.backward()?;
    let dq = grads.get(&qg).expect("dq");
    assert!(dq.mul(dq)?.sum_all()?.backward().is_err(), "double backward");
    Ok(())
}
test_device!(errors_test, errors);

/// The cases of `golden/attention.json` (PyTorch's `scaled_dot_product_attention` in f64,
/// written by `golden/attention_fixtures.py`), in f32 and, where the device has it, f64.
fn golden_fixtures(device: Device) -> Result<()> {
    use rnn_testutil::golden::{check_outputs_and_grads, get, run_cases, tensor, Check};
    let doc: serde_json::Value = serde_json::from_str(include_str!("golden/attention.json")).expect("attention.json");
    let cases = doc["cases"].as_array().expect("cases").clone();
    for dtype in floats(device).into_iter().filter(|d| matches!(d, DType::F32 | DType::F64)) {
        let run = |c: &serde_json::Value| -> Check<f64> {
            let e = |e: rnn_core::Error| e.to_string();
            let inputs = get(c, "inputs")?;
            let bias_grad = c["bias_grad"].as_bool().unwrap_or(false);
            let mut vars = Vec::new();
            for name in ["q", "k", "v"] {
                vars.push((name.to_string(), tensor(get(inputs, name)?, dtype, device)?.requires_grad()));
            }
            let bias = match inputs.get("bias") {
                Some(b) => {
                    let t = tensor(b, dtype, device)?;
                    let t = if bias_grad { t.requires_grad() } else { t };
                    vars.push(("bias".to_string(), t.clone()));
                    Some(t)
                }
                None => None,
            };
            let lengths = match c["lengths"].as_array() {
                Some(l) => {
                    let l: Vec<u32> = l.iter().map(|x| x.as_u64().unwrap_or(0) as u32).collect();
                    let n = l.len();
                    Some(Tensor::from_vec(l, n, device).map_err(e)?)
                }
                None => None,
            };
            let mask = AttentionMask { causal: c["causal"].as_bool().unwrap_or(false), key_lengths: lengths, bias };
            let o = scaled_dot_product_attention(&vars[0].1, &vars[1].1, &vars[2].1, &mask, c["scale"].as_f64())
                .map_err(e)?;
            let tol = tolerance(dtype);
            check_outputs_and_grads(c, &[("o", &o)], &vars, tol_on(device, tol.result), tol_on(device, tol.grad))
        };
        run_cases(&format!("attention {dtype} on {device}"), &cases, run);
    }
    Ok(())
}
test_device!(golden_fixtures_test, golden_fixtures);

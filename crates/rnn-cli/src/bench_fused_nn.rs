//! The fused-vs-composed cases of `rnn bench cpu` (and `bench/cpu_bench.py`): LayerNorm,
//! RMSNorm, bias + GELU and softmax-cross-entropy, forward and backward, each as the fused op and as the composition
//! of primitives it replaces (the rule: a fused kernel replaces a composition only when a
//! benchmark shows the gain).

use rnn::{DType, Device, Tensor};

use crate::bench_cpu::{Bench, Score};
use crate::CliResult;

/// `[rows, n]` of the LayerNorm input and `[rows, classes]` of the logits; the names keep
/// the full sizes in a quick run.
pub struct FusedSizes {
    pub norm: (usize, usize),
    pub logits: (usize, usize),
}

pub const FULL: FusedSizes = FusedSizes { norm: (8192, 1024), logits: (2048, 8192) };
pub const QUICK: FusedSizes = FusedSizes { norm: (1024, 1024), logits: (256, 8192) };

fn randn(shape: (usize, usize)) -> rnn::Result<Tensor> {
    Tensor::randn(0.0, 1.0, shape, DType::F32, Device::Cpu)
}

/// LayerNorm with weight and bias as PyTorch composes it by hand.
fn layer_norm_composed(x: &Tensor, w: &Tensor, b: &Tensor) -> rnn::Result<Tensor> {
    let centered = x.sub(&x.mean_keepdim(-1)?)?;
    let var = centered.sqr()?.mean_keepdim(-1)?;
    centered.div(&var.add_scalar(1e-5)?.sqrt()?)?.mul(w)?.add(b)
}

/// RMSNorm with a weight, composed.
fn rms_norm_composed(x: &Tensor, w: &Tensor) -> rnn::Result<Tensor> {
    x.div(&x.sqr()?.mean_keepdim(-1)?.add_scalar(1e-6)?.sqrt()?)?.mul(w)
}

/// Mean cross entropy through log_softmax and gather.
fn cross_entropy_composed(logits: &Tensor, ids: &Tensor) -> rnn::Result<Tensor> {
    let picked = logits.log_softmax(-1)?.gather(&ids.unsqueeze(1)?, 1)?;
    picked.neg()?.mean_all()
}

pub fn bench_fused_nn(bench: &mut Bench, sizes: &FusedSizes) -> CliResult<()> {
    let n = sizes.norm.1;
    let x = randn(sizes.norm)?.requires_grad();
    let w = Tensor::ones(n, DType::F32, Device::Cpu)?.requires_grad();
    let b = Tensor::zeros(n, DType::F32, Device::Cpu)?.requires_grad();
    let label = |name: &str, (r, c): (usize, usize)| format!("{name}_{r}x{c}");
    bench.measure(&label("layer_norm_fused", FULL.norm), Score::Millis, || {
        x.layer_norm(Some(&w), Some(&b), 1e-5)?.sum_all()?.backward().map(drop)
    })?;
    bench.measure(&label("layer_norm_composed", FULL.norm), Score::Millis, || {
        layer_norm_composed(&x, &w, &b)?.sum_all()?.backward().map(drop)
    })?;
    bench.measure(&label("rms_norm_fused", FULL.norm), Score::Millis, || {
        x.rms_norm(Some(&w), Some(1e-6))?.sum_all()?.backward().map(drop)
    })?;
    bench.measure(&label("rms_norm_composed", FULL.norm), Score::Millis, || {
        rms_norm_composed(&x, &w)?.sum_all()?.backward().map(drop)
    })?;
    // The MLP's hidden activation: the bias is the [n] vector b, the input x.
    bench.measure(&label("bias_gelu_fused", FULL.norm), Score::Millis, || {
        x.bias_gelu(&b, true)?.sum_all()?.backward().map(drop)
    })?;
    bench.measure(&label("bias_gelu_composed", FULL.norm), Score::Millis, || {
        x.add(&b)?.gelu()?.sum_all()?.backward().map(drop)
    })?;
    let (batch, classes) = sizes.logits;
    let logits = randn(sizes.logits)?.requires_grad();
    let ids = crate::bench_cpu::random_targets(batch, classes)?;
    bench.measure(&label("cross_entropy_fused", FULL.logits), Score::Millis, || {
        let per_row = logits.cross_entropy_logits(&ids, 0.0, None)?;
        per_row.mean_all()?.backward().map(drop)
    })?;
    bench.measure(&label("cross_entropy_composed", FULL.logits), Score::Millis, || {
        cross_entropy_composed(&logits, &ids)?.backward().map(drop)
    })
}

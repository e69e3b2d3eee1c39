//! The bf16 and f16 rows of `rnn bench cpu`: square matmuls at the f32 rows' sizes, twins of
//! `bench_matmul_low_precision` in bench/cpu_bench.py. Without AVX512-BF16 or AVX512-FP16
//! the multiply-adds run in f32 either way, so these rows measure what the narrower
//! operands cost or save (conversion while packing against half the bytes read).

use rnn::{DType, Device, Tensor};

use crate::bench_cpu::{Bench, Score, MATMUL_LABELS};
use crate::CliResult;

/// `matmul_{bf16,f16}_{n}` for each size of the f32 matmul rows (`sizes` in label order).
pub(crate) fn bench_matmul_low_precision(bench: &mut Bench, sizes: [usize; 4]) -> CliResult<()> {
    for (dtype, tag) in [(DType::BF16, "bf16"), (DType::F16, "f16")] {
        for (label, n) in MATMUL_LABELS.into_iter().zip(sizes) {
            let operand = || Tensor::randn(0.0, 1.0, (n, n), DType::F32, Device::Cpu)?.to_dtype(dtype);
            let (a, b) = (operand()?, operand()?);
            let flops = 2.0 * (n as f64).powi(3);
            bench.measure(&format!("matmul_{tag}_{label}"), Score::Flops(flops), || a.matmul(&b).map(drop))?;
        }
    }
    Ok(())
}

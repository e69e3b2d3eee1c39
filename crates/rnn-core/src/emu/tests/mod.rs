//! Every CUDA kernel variant, executed by the emulator and compared with the CPU backend on
//! fresh random inputs (with NaN, infinities and extreme values among them): empty tensors,
//! broadcast, transposed, offset and narrowed layouts, sizes that cross block and grid
//! boundaries, index ops with bad ids (the same error as the CPU). The last check is
//! coverage: every variant the NVRTC compile test lists must have run here.
//!
//! `cargo test -p rnn-core --features cuda-emu --lib emu::` (prints the variant count).

mod attention;
mod families;
mod fused_nn;
mod optim;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::EmuStorage;
use crate::cpu::CpuStorage;
use crate::gpu::GpuStorage;
use crate::storage::BackendStorage;
use crate::{DType, Layout, Result};

/// A random host tensor of `n` elements: mostly ordinary values, a few special ones (NaN,
/// infinities, huge values, -0; the extremes of integer types).
pub(super) fn random(rng: &mut StdRng, dtype: DType, n: usize) -> CpuStorage {
    let floats: Vec<f64> = (0..n).map(|_| float_value(rng)).collect();
    let ints: Vec<i64> = (0..n).map(|_| int_value(rng, dtype)).collect();
    match dtype {
        DType::F32 => CpuStorage::F32(floats.iter().map(|&x| x as f32).collect()),
        DType::F64 => CpuStorage::F64(floats),
        DType::F16 => CpuStorage::F16(floats.iter().map(|&x| half::f16::from_f64(x)).collect()),
        DType::BF16 => CpuStorage::BF16(floats.iter().map(|&x| half::bf16::from_f64(x)).collect()),
        DType::U8 => CpuStorage::U8(ints.iter().map(|&x| x as u8).collect()),
        DType::U32 => CpuStorage::U32(ints.iter().map(|&x| x as u32).collect()),
        DType::I64 => CpuStorage::I64(ints),
    }
}

fn float_value(rng: &mut StdRng) -> f64 {
    match rng.random_range(0..100) {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => -0.0,
        4 => rng.random_range(-1e30..1e30),
        _ => rng.random_range(-4.0..4.0),
    }
}

fn int_value(rng: &mut StdRng, dtype: DType) -> i64 {
    let special = rng.random_range(0..50) == 0;
    match dtype {
        DType::U8 if special => 255,
        DType::U8 => rng.random_range(0..256),
        DType::U32 if special => u32::MAX as i64,
        DType::U32 => rng.random_range(0..100_000),
        _ if special => [i64::MIN, i64::MAX, -1, 0][rng.random_range(0..4)],
        _ => rng.random_range(-100_000..100_000),
    }
}

/// Small non-negative values: ids, exponents.
pub(super) fn small_ints(rng: &mut StdRng, dtype: DType, n: usize, below: i64) -> CpuStorage {
    let v: Vec<i64> = (0..n).map(|_| rng.random_range(0..below.max(1))).collect();
    match dtype {
        DType::U8 => CpuStorage::U8(v.iter().map(|&x| x as u8).collect()),
        DType::U32 => CpuStorage::U32(v.iter().map(|&x| x as u32).collect()),
        _ => CpuStorage::I64(v),
    }
}

/// Views of a fresh buffer with logical `dims`: (name, layout, storage length).
pub(super) fn views(dims: &[usize]) -> Vec<(&'static str, Layout, usize)> {
    let r = dims.len();
    let count: usize = dims.iter().product();
    let mut v = vec![
        ("contiguous", Layout::contiguous(dims.to_vec()), count),
        ("offset", Layout::contiguous_with_offset(dims.to_vec(), 3), count + 3),
    ];
    if r >= 2 {
        let mut swapped = dims.to_vec();
        swapped.swap(r - 2, r - 1);
        let t = Layout::contiguous(swapped).transpose(r - 2, r - 1).expect("valid dims");
        v.push(("transposed", t, count));
        let mut wide = dims.to_vec();
        wide[r - 1] += 2;
        let n = Layout::contiguous(wide.clone()).narrow(r - 1, 1, dims[r - 1]).expect("valid dims");
        v.push(("narrowed", n.clone(), wide.iter().product()));
    }
    if r >= 1 && dims[0] > 1 {
        let mut strides = Layout::contiguous(dims.to_vec()).strides().to_vec();
        strides[0] = 0;
        let b = Layout::new(dims.to_vec().into(), strides, 1);
        let len = b.storage_extent().max(1);
        v.push(("broadcast", b, len));
    }
    v
}

/// The compute capability of a Turing GPU (T4, RTX 20xx): the newest without the 16-bit
/// attention kernels' instructions.
pub(super) const TURING: (u32, u32) = (7, 5);

/// Shapes that are small, cross a block (256 threads), cross the emulated grid
/// (`MAX_GRID` blocks), or are empty.
pub(super) const SHAPES: &[&[usize]] = &[&[3, 5], &[7, 77], &[3, 1000], &[0, 4], &[2, 3, 4]];

/// How close a result must be: `|got - want| <= atol + rtol * |want|` for floats, equal for
/// integers, NaN matching NaN.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tol {
    pub rtol: f64,
    pub atol: f64,
}

impl Tol {
    /// Elementwise results: a few ulps of the dtype.
    pub fn of(dtype: DType) -> Tol {
        match dtype {
            DType::F64 => Tol { rtol: 1e-12, atol: 1e-12 },
            DType::F32 => Tol { rtol: 2e-5, atol: 1e-6 },
            DType::F16 => Tol { rtol: 2e-3, atol: 1e-3 },
            DType::BF16 => Tol { rtol: 1.6e-2, atol: 1e-2 },
            _ => Tol { rtol: 0.0, atol: 0.0 },
        }
    }

    /// Sums of `r` values of magnitude up to `scale`: rounding grows with both.
    pub fn sum(dtype: DType, r: usize, scale: f64) -> Tol {
        let t = Tol::of(dtype);
        Tol { rtol: t.rtol, atol: t.atol + t.rtol * scale * r as f64 }
    }
}

fn as_f64(s: &CpuStorage) -> Vec<f64> {
    crate::cpu_each!(s, v => v.iter().map(|x| crate::WithDType::to_f64(*x)).collect())
}

/// Whether `got` matches `want` within `tol`.
fn close(got: &CpuStorage, want: &CpuStorage, tol: Tol) -> std::result::Result<(), String> {
    if got.dtype() != want.dtype() || got.len() != want.len() {
        return Err(format!("{:?} x {} against {:?} x {}", got.dtype(), got.len(), want.dtype(), want.len()));
    }
    let (g, w) = (as_f64(got), as_f64(want));
    for (i, (&g, &w)) in g.iter().zip(&w).enumerate() {
        let same = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol.atol + tol.rtol * w.abs();
        if !same {
            return Err(format!("element {i}: got {g}, want {w}"));
        }
    }
    Ok(())
}

/// Compares an op's result on the emulator with the CPU's: equal errors, or close values.
/// The emulator's result is read back through `to_cpu`, the sync point where a bad id of an
/// index op is reported (`gpu/deferred.rs`).
pub(super) fn compare(what: &str, got: Result<EmuStorage>, want: Result<CpuStorage>, tol: Tol) {
    match (got.and_then(|g| g.to_cpu()), want) {
        (Ok(g), Ok(w)) => {
            if let Err(msg) = close(&g, &w, tol) {
                panic!("{what}: {msg}");
            }
        }
        (Err(g), Err(w)) => assert_eq!(g.to_string(), w.to_string(), "{what}: different errors"),
        (Ok(_), Err(w)) => panic!("{what}: the CPU fails ({w}), the emulator does not"),
        (Err(g), Ok(_)) => panic!("{what}: the emulator fails: {g}"),
    }
}

/// The same host data on the emulated device.
pub(super) fn up(s: &CpuStorage) -> EmuStorage {
    EmuStorage::upload(s, 0).expect("upload")
}

pub(super) fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

#[test]
fn every_cuda_kernel_variant_runs_on_the_emulator_and_matches_the_cpu() {
    use crate::gpu::target::Target;
    let mut listed = crate::gpu::variants::all(&Target::cuda());
    // The kernels only a device before sm_80 plans (16-bit attention on the scalar kernels).
    let names: std::collections::HashSet<String> = listed.iter().map(|(n, _)| n.clone()).collect();
    listed.extend(crate::gpu::variants::all(&Target::cuda_on(TURING)).into_iter().filter(|(n, _)| !names.contains(n)));
    let turing = super::as_device_of(TURING, super::target);
    let sources: Vec<_> =
        [super::target(), turing].iter().flat_map(crate::gpu::variants::all).map(|(_, s)| s).collect();
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    super::precompile(&sources, jobs).expect("the kernels compile with the shim");
    families::elementwise();
    families::reductions();
    families::softmax();
    families::index_ops();
    families::windows();
    families::products();
    optim::optimizers();
    fused_nn::fused_nn();
    attention::attention();
    let executed = super::executed_variants();
    let missing: Vec<&String> = listed.iter().map(|(name, _)| name).filter(|n| !executed.contains(*n)).collect();
    let distinct: std::collections::BTreeSet<&str> = listed.iter().map(|(_, s)| s.key()).collect();
    eprintln!(
        "cuda emulator: variants executed / listed: {} / {} ({} distinct sources compiled)",
        listed.len() - missing.len(),
        listed.len(),
        distinct.len()
    );
    assert!(missing.is_empty(), "{} variants never ran, e.g. {:?}", missing.len(), &missing[..missing.len().min(10)]);
}

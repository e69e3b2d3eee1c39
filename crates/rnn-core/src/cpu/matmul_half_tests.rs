//! Every bf16 / f16 GEMM path this CPU can run, against an f64 product of the same
//! 16-bit inputs, on fresh random inputs (the seed is printed on failure). The AVX512-BF16
//! and AVX-512F paths run only where the CPU has the instructions; elsewhere their checks
//! are skipped and say so (f16 has no pair kernel: asked for AVX512-BF16, it runs the next
//! path the CPU has).

use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::matmul_half::{matmul, GemmInput, Mat, Path};

/// A 16-bit type under test: conversions, its rounding unit (half an ulp, relative) and
/// its smallest normal value (below it the ulp is absolute: subnormals).
trait Sample: GemmInput + std::fmt::Debug {
    const HALF_ULP: f64;
    const MIN_NORMAL: f64;
    fn from(x: f64) -> Self;
    fn value(self) -> f64;
}

impl Sample for bf16 {
    const HALF_ULP: f64 = 1.0 / 256.0;
    const MIN_NORMAL: f64 = 1.1754943508222875e-38;
    fn from(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn value(self) -> f64 {
        self.to_f64()
    }
}

impl Sample for f16 {
    const HALF_ULP: f64 = 1.0 / 2048.0;
    const MIN_NORMAL: f64 = 6.103515625e-5;
    fn from(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn value(self) -> f64 {
        self.to_f64()
    }
}

const SIZES: [usize; 4] = [1, 7, 33, 129];

/// A random `rows x cols` matrix stored row-major or, when `transposed`, column-major.
fn operand<E: Sample>(rng: &mut StdRng, (rows, cols): (usize, usize), transposed: bool) -> (Vec<E>, usize, usize) {
    let data = (0..rows * cols).map(|_| E::from(rng.random_range(-1.0..1.0))).collect();
    if transposed {
        (data, 1, rows)
    } else {
        (data, cols, 1)
    }
}

/// Runs `path` on one problem and checks each output against the f64 product: the only
/// errors allowed are f32 accumulation and one final rounding.
fn check<E: Sample>(path: Path, seed: u64, dims: (usize, usize, usize), transposed: (bool, bool)) {
    check_at::<E>(path, seed, dims, transposed, 0);
}

/// [`check`] with both operands' views starting `skip` elements into their storage (an odd
/// `skip` puts bf16 pairs off 4-byte alignment).
fn check_at<E: Sample>(path: Path, seed: u64, (m, n, k): (usize, usize, usize), (ta, tb): (bool, bool), skip: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut a, a_rs, a_cs) = operand::<E>(&mut rng, (m, k), ta);
    let (mut b, b_rs, b_cs) = operand::<E>(&mut rng, (k, n), tb);
    let (stored_a, stored_b) =
        ([vec![E::default(); skip], a.clone()].concat(), [vec![E::default(); skip], b.clone()].concat());
    let ma = Mat { data: &stored_a[skip..], rs: a_rs, cs: a_cs };
    let mb = Mat { data: &stored_b[skip..], rs: b_rs, cs: b_cs };
    (a, b) = (stored_a[skip..].to_vec(), stored_b[skip..].to_vec());
    let mut out = vec![E::default(); m * n];
    matmul(path, ma, mb, (m, n, k), &mut out).unwrap();
    for i in 0..m {
        for j in 0..n {
            let terms = (0..k).map(|p| a[i * a_rs + p * a_cs].value() * b[p * b_rs + j * b_cs].value());
            let (exact, magnitude) = terms.fold((0.0, 0.0), |(s, g), t| (s + t, g + t.abs()));
            let got = out[i * n + j].value();
            // f32 accumulation error bound, then one rounding to E.
            let acc_err = magnitude * k as f64 * f64::powi(2.0, -23);
            let tol = (exact.abs().max(E::MIN_NORMAL) + acc_err) * E::HALF_ULP + acc_err;
            assert!(
                (got - exact).abs() <= tol,
                "{path:?} {} seed {seed} m,n,k {m},{n},{k} transposed {ta},{tb}: [{i},{j}] = {got}, want {exact}",
                std::any::type_name::<E>()
            );
        }
    }
}

fn check_path<E: Sample>(path: Path) {
    if !path.available() {
        eprintln!("{path:?}: this CPU lacks the instructions, this GEMM path is not tested here");
        return;
    }
    let seed: u64 = rand::rng().random();
    for (s, &m) in SIZES.iter().enumerate() {
        for &n in &SIZES {
            for &k in &SIZES {
                let t = (s + n + k) % 4;
                check::<E>(path, seed ^ (m * 1_000_000 + n * 1000 + k) as u64, (m, n, k), (t & 1 == 1, t & 2 == 2));
            }
        }
    }
    // Several KC blocks deep, several MC blocks tall (threads), all transposes; even
    // strides, with views aligned and not (the bf16-pair packers copy 32-bit words where
    // they can).
    for t in 0..4 {
        let transposed = (t & 1 == 1, t & 2 == 2);
        check::<E>(path, seed.wrapping_add(t), (200, 45, 530), transposed);
        check_at::<E>(path, seed.wrapping_add(t + 4), (24, 66, 514), transposed, 1);
        check_at::<E>(path, seed.wrapping_add(t + 8), (17, 40, 301), transposed, 2);
    }
}

#[test]
fn bf16_gemm_avx512bf16_matches_f64() {
    check_path::<bf16>(Path::Avx512Bf16);
}

#[test]
fn bf16_gemm_avx512_matches_f64() {
    check_path::<bf16>(Path::Avx512);
}

#[test]
fn f16_gemm_avx512_matches_f64() {
    check_path::<f16>(Path::Avx512);
}

#[test]
fn bf16_gemm_avx2_matches_f64() {
    check_path::<bf16>(Path::Avx2);
}

#[test]
fn bf16_gemm_scalar_matches_f64() {
    check_path::<bf16>(Path::Scalar);
}

#[test]
fn f16_gemm_avx2_matches_f64() {
    check_path::<f16>(Path::Avx2);
}

#[test]
fn f16_gemm_scalar_matches_f64() {
    check_path::<f16>(Path::Scalar);
}

/// k = 0 with empty operands whose views start past their (empty) storage: zeros, no panic.
#[test]
fn half_gemm_of_empty_depth_is_zeros() {
    let mut out = vec![bf16::ONE; 6];
    super::matmul_half::batched::<bf16>((&[], &[]), (&[1], &[2]), ((0, 1), (3, 1)), (2, 3, 0), &mut out).unwrap();
    assert!(out.iter().all(|x| x.to_f32() == 0.0), "k = 0 gives zeros");
}

/// NaN and inf propagate as in an f64 product: a NaN poisons its row, inf times zero is
/// NaN, inf times a nonzero value is an infinity of the product's sign.
#[test]
fn half_gemm_propagates_nan_and_inf() {
    nan_and_inf::<bf16>();
    nan_and_inf::<f16>();
}

fn nan_and_inf<E: Sample>() {
    let (m, n, k) = (9, 20, 5);
    let mut a = vec![E::from(1.0); m * k];
    let b: Vec<E> = (0..k * n).map(|i| E::from((i % 3) as f64 - 1.0)).collect();
    a[0] = E::from(f64::NAN);
    a[k + 2] = E::from(f64::INFINITY);
    for path in Path::ALL.into_iter().filter(|p| p.available()) {
        let mut out = vec![E::default(); m * n];
        let (ma, mb) = (Mat { data: &a, rs: k, cs: 1 }, Mat { data: &b, rs: n, cs: 1 });
        matmul(path, ma, mb, (m, n, k), &mut out).unwrap();
        for j in 0..n {
            assert!(out[j].value().is_nan(), "{path:?}: NaN in row 0 reaches column {j}");
            let want_inf = b[2 * n + j].value() != 0.0;
            assert_eq!(out[n + j].value().is_infinite(), want_inf, "{path:?}: row 1 column {j}");
            assert_eq!(out[n + j].value().is_nan(), !want_inf, "{path:?}: inf x 0 at column {j}");
            assert!(out[2 * n + j].value().is_finite(), "{path:?}: row 2 column {j}");
        }
    }
}

/// The slice casts between f32 and f16 / bf16 (F16C where the CPU has it) give the bits of
/// the elementwise f32 conversions, on random bit patterns (NaN, infinities, subnormals,
/// values past f16's range) and on exact ties, both ways. (Not the f64 route: `half`'s
/// `bf16::from_f64` rounds 0x22348001 down to 0x2234, where round-to-nearest of the f32,
/// PyTorch's rule, gives 0x2235: the f64 conversion misses the low sticky bit.)
#[test]
fn half_slice_casts_match_elementwise_rounding() {
    use super::CpuStorage;
    use crate::{DType, Layout};
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut x: Vec<f32> = (0..5000).map(|_| f32::from_bits(rng.random())).collect();
    // Ties of both types (f16 rounds bit 13, bf16 bit 16) and 70000 (past f16's max).
    x.extend([1.0 + f32::EPSILON * 4096.0, 1.0 + f32::EPSILON * 12288.0, 1.0 + f32::EPSILON * 65536.0, 70000.0]);
    // Just above a bf16 tie: rounds up.
    x.push(f32::from_bits(0x2234_8001));
    let l = Layout::contiguous(x.len());
    let wide = CpuStorage::F32(x.clone());
    let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let narrow = |dtype| wide.to_dtype(&l, dtype).unwrap();
    let (h, b) = (narrow(DType::F16), narrow(DType::BF16));
    let (CpuStorage::F16(h16), CpuStorage::BF16(b16)) = (&h, &b) else { panic!("cast dtype") };
    for (i, &v) in x.iter().enumerate() {
        assert!(same(h16[i].to_f64(), f16::from_f32(v).to_f64()), "seed {seed}: f16 of {v:e}");
        assert!(same(b16[i].to_f64(), bf16::from_f32(v).to_f64()), "seed {seed}: bf16 of {v:e}");
    }
    assert_eq!(b16[x.len() - 1].to_bits(), 0x2235, "above a tie rounds up");
    for half in [h, b] {
        let widened = half.to_dtype(&l, DType::F32).unwrap();
        let CpuStorage::F32(back) = &widened else { panic!("cast dtype") };
        let want: Vec<f64> = match &half {
            CpuStorage::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            CpuStorage::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            _ => unreachable!(),
        };
        assert!(back.iter().zip(&want).all(|(&g, &w)| same(g as f64, w)), "seed {seed}: widening");
    }
}

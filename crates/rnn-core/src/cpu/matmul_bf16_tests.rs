//! Every bf16 GEMM path this CPU can run, against an f64 product of the same bf16 inputs,
//! on fresh random inputs (the seed is printed on failure). The AVX512-BF16 path runs only
//! where the CPU has the instructions; elsewhere its check is skipped and says so.

use half::bf16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::matmul_bf16::{matmul, Mat, Path};

const SIZES: [usize; 4] = [1, 7, 33, 129];

/// A random `rows x cols` matrix stored row-major or, when `transposed`, column-major.
fn operand(rng: &mut StdRng, (rows, cols): (usize, usize), transposed: bool) -> (Vec<bf16>, usize, usize) {
    let data = (0..rows * cols).map(|_| bf16::from_f64(rng.random_range(-1.0..1.0))).collect();
    if transposed {
        (data, 1, rows)
    } else {
        (data, cols, 1)
    }
}

/// Runs `path` on one problem and checks each output against the f64 product: the only
/// errors allowed are the final bf16 rounding and f32 accumulation.
fn check(path: Path, seed: u64, (m, n, k): (usize, usize, usize), (ta, tb): (bool, bool)) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (a, a_rs, a_cs) = operand(&mut rng, (m, k), ta);
    let (b, b_rs, b_cs) = operand(&mut rng, (k, n), tb);
    let ma = Mat { data: &a, rs: a_rs, cs: a_cs };
    let mb = Mat { data: &b, rs: b_rs, cs: b_cs };
    let mut out = vec![bf16::ZERO; m * n];
    matmul(path, ma, mb, (m, n, k), &mut out).unwrap();
    for i in 0..m {
        for j in 0..n {
            let terms = (0..k).map(|p| a[i * a_rs + p * a_cs].to_f64() * b[p * b_rs + j * b_cs].to_f64());
            let (exact, magnitude) = terms.fold((0.0, 0.0), |(s, g), t| (s + t, g + t.abs()));
            let got = out[i * n + j].to_f64();
            // f32 accumulation error bound, then one bf16 rounding (half an ulp: 2^-8 relative).
            let acc_err = magnitude * k as f64 * f64::powi(2.0, -23);
            let tol = (exact.abs() + acc_err) / 256.0 + acc_err;
            assert!(
                (got - exact).abs() <= tol,
                "{path:?} seed {seed} m,n,k {m},{n},{k} transposed {ta},{tb}: [{i},{j}] = {got}, want {exact}"
            );
        }
    }
}

fn check_path(path: Path) {
    if !path.available() {
        eprintln!("{path:?}: this CPU lacks the instructions, its bf16 GEMM is not tested here");
        return;
    }
    let seed: u64 = rand::rng().random();
    for (s, &m) in SIZES.iter().enumerate() {
        for &n in &SIZES {
            for &k in &SIZES {
                let t = (s + n + k) % 4;
                check(path, seed ^ (m * 1_000_000 + n * 1000 + k) as u64, (m, n, k), (t & 1 == 1, t & 2 == 2));
            }
        }
    }
    // Several KC blocks deep, several MC blocks tall (threads), all transposes.
    for t in 0..4 {
        check(path, seed.wrapping_add(t), (200, 45, 530), (t & 1 == 1, t & 2 == 2));
    }
}

#[test]
fn bf16_gemm_avx512bf16_matches_f64() {
    check_path(Path::Avx512Bf16);
}

#[test]
fn bf16_gemm_avx2_matches_f64() {
    check_path(Path::Avx2);
}

#[test]
fn bf16_gemm_scalar_matches_f64() {
    check_path(Path::Scalar);
}

/// NaN and inf propagate as in an f64 product: a NaN poisons its row, inf times zero is
/// NaN, inf times a nonzero value is an infinity of the product's sign.
#[test]
fn bf16_gemm_propagates_nan_and_inf() {
    let (m, n, k) = (9, 20, 5);
    let mut a = vec![bf16::ONE; m * k];
    let mut b: Vec<bf16> = (0..k * n).map(|i| bf16::from_f32(i as f32 % 3.0 - 1.0)).collect();
    a[0] = bf16::NAN;
    a[k + 2] = bf16::INFINITY;
    b[2 * n + 3] = bf16::ZERO;
    for path in Path::ALL.into_iter().filter(|p| p.available()) {
        let mut out = vec![bf16::ZERO; m * n];
        let (ma, mb) = (Mat { data: &a, rs: k, cs: 1 }, Mat { data: &b, rs: n, cs: 1 });
        matmul(path, ma, mb, (m, n, k), &mut out).unwrap();
        for j in 0..n {
            assert!(out[j].is_nan(), "{path:?}: NaN in row 0 reaches column {j}");
            let scale = b[2 * n + j].to_f32();
            let want_inf = scale != 0.0;
            assert_eq!(out[n + j].is_infinite(), want_inf, "{path:?}: row 1 column {j}");
            assert_eq!(out[n + j].is_nan(), !want_inf, "{path:?}: inf x 0 at column {j}");
            assert!(out[2 * n + j].is_finite(), "{path:?}: row 2 column {j}");
        }
    }
}

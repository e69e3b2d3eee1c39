//! The f32 packed GEMM (AVX-512 and AVX2 where the CPU has them, and the portable kernel) against an f64
//! product of the same inputs, on fresh random inputs (the seed is printed on failure):
//! edge tiles, several depth / row / column blocks, every transpose, threads with row and
//! column splits, and accumulation into an existing output.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::matmul_half::Path;
use super::matmul_half_kernels::{Avx2, Avx512, Scalar};
use super::packed_gemm::{gemm, Mat};

/// A random `rows x cols` matrix, row-major or (when `transposed`) column-major.
fn operand(rng: &mut StdRng, (rows, cols): (usize, usize), transposed: bool) -> (Vec<f32>, usize, usize) {
    let data = (0..rows * cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    if transposed {
        (data, 1, rows)
    } else {
        (data, cols, 1)
    }
}

/// The packed GEMM with `path`'s f32 kernel (the portable one for any other path).
fn run(path: Path, (a, b): (Mat<f32>, Mat<f32>), dims: (usize, usize, usize), c: &mut [f32], (par, add): (bool, bool)) {
    match path {
        Path::Avx512 => gemm::<f32, Avx512>(a, b, dims, c, par, add),
        Path::Avx2 => gemm::<f32, Avx2>(a, b, dims, c, par, add),
        _ => gemm::<f32, Scalar>(a, b, dims, c, par, add),
    }
}

/// One problem on `path`; `c` starts random and is added to when `accumulate`.
fn check(path: Path, seed: u64, (m, n, k): (usize, usize, usize), (ta, tb): (bool, bool), par: bool, accumulate: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (a, a_rs, a_cs) = operand(&mut rng, (m, k), ta);
    let (b, b_rs, b_cs) = operand(&mut rng, (k, n), tb);
    let c0: Vec<f32> = (0..m * n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let mut c = c0.clone();
    let (ma, mb) = (Mat { data: &a, rs: a_rs, cs: a_cs }, Mat { data: &b, rs: b_rs, cs: b_cs });
    run(path, (ma, mb), (m, n, k), &mut c, (par, accumulate));
    for i in 0..m {
        for j in 0..n {
            let terms = (0..k).map(|p| a[i * a_rs + p * a_cs] as f64 * b[p * b_rs + j * b_cs] as f64);
            let (dot, magnitude) = terms.fold((0.0, 0.0), |(s, g), t| (s + t, g + f64::abs(t)));
            let base = if accumulate { c0[i * n + j] as f64 } else { 0.0 };
            let want = base + dot;
            let tol = (magnitude + base.abs()) * (k + 2) as f64 * f64::powi(2.0, -24);
            let got = c[i * n + j] as f64;
            assert!(
                (got - want).abs() <= tol,
                "{path:?} seed {seed} m,n,k {m},{n},{k} t {ta},{tb} par {par} acc {accumulate}: [{i},{j}] = {got}, want {want}"
            );
        }
    }
}

fn check_path(path: Path) {
    if !path.available() {
        eprintln!("{path:?}: this CPU lacks the instructions, its f32 GEMM is not tested here");
        return;
    }
    let seed: u64 = rand::rng().random();
    let sizes = [1, 5, 6, 17, 33];
    for (s, &m) in sizes.iter().enumerate() {
        for &n in &sizes {
            for &k in &[1, 7, 64] {
                let t = (s + n + k) % 4;
                let case = seed ^ (m * 1_000_000 + n * 1000 + k) as u64;
                check(path, case, (m, n, k), (t & 1 == 1, t & 2 == 2), false, t == 3);
            }
        }
    }
    // Several KC blocks deep and MC blocks tall; few rows and many columns (a column split);
    // more than one NC block wide; each with threads, every transpose, both modes.
    let big = [(200, 45, 530), (20, 300, 70), (50, 1100, 40)];
    for (i, &dims) in big.iter().enumerate() {
        for t in 0..4 {
            check(path, seed.wrapping_add((4 * i + t) as u64), dims, (t & 1 == 1, t & 2 == 2), true, t % 2 == 0);
        }
    }
}

#[test]
fn f32_packed_gemm_avx512_matches_f64() {
    check_path(Path::Avx512);
}

#[test]
fn f32_packed_gemm_avx2_matches_f64() {
    check_path(Path::Avx2);
}

#[test]
fn f32_packed_gemm_scalar_matches_f64() {
    check_path(Path::Scalar);
}

/// k = 0: zeros when writing, the output unchanged when accumulating.
#[test]
fn f32_packed_gemm_of_empty_depth() {
    let empty = Mat::<f32> { data: &[], rs: 0, cs: 1 };
    let mut c = vec![3.0f32; 6];
    gemm::<f32, Scalar>(empty, empty, (2, 3, 0), &mut c, false, true);
    assert!(c.iter().all(|&x| x == 3.0), "accumulating an empty sum keeps the output");
    gemm::<f32, Scalar>(empty, empty, (2, 3, 0), &mut c, false, false);
    assert!(c.iter().all(|&x| x == 0.0), "an empty sum is zero");
}

/// NaN and inf propagate as in an f64 product (a NaN poisons its row; inf x 0 is NaN).
#[test]
fn f32_packed_gemm_propagates_nan_and_inf() {
    let (m, n, k) = (9, 20, 5);
    let mut a = vec![1.0f32; m * k];
    let b: Vec<f32> = (0..k * n).map(|i| (i % 3) as f32 - 1.0).collect();
    a[0] = f32::NAN;
    a[k + 2] = f32::INFINITY;
    for path in [Path::Avx512, Path::Avx2, Path::Scalar].into_iter().filter(|p| p.available()) {
        let mut c = vec![0.0f32; m * n];
        let (ma, mb) = (Mat { data: &a, rs: k, cs: 1 }, Mat { data: &b, rs: n, cs: 1 });
        run(path, (ma, mb), (m, n, k), &mut c, (false, false));
        for j in 0..n {
            assert!(c[j].is_nan(), "{path:?}: NaN in row 0 reaches column {j}");
            let want_inf = b[2 * n + j] != 0.0;
            assert_eq!(c[n + j].is_infinite(), want_inf, "{path:?}: row 1 column {j}");
            assert_eq!(c[n + j].is_nan(), !want_inf, "{path:?}: inf x 0 at column {j}");
            assert!(c[2 * n + j].is_finite(), "{path:?}: row 2 column {j}");
        }
    }
}

//! Naive references for tests of forward ops: row-major index math in f64, sharing nothing
//! with the library's code.

/// Row-major multi-index of the linear position `i` in `dims`.
pub fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
    idx
}

/// Row-major linear position of `idx` in `dims`.
pub fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// numpy broadcasting of two shapes (panics when incompatible: tests pass valid shapes).
pub fn broadcast_dims(a: &[usize], b: &[usize]) -> Vec<usize> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], k: usize| if k < rank - s.len() { 1 } else { s[k - (rank - s.len())] };
    (0..rank)
        .map(|k| match (at(a, k), at(b, k)) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => panic!("shapes {a:?} and {b:?} do not broadcast ({x} vs {y})"),
        })
        .collect()
}

/// The element of `x` (shape `dims`) that position `out_idx` of a broadcast result reads.
pub fn broadcast_get(x: &[f64], dims: &[usize], out_idx: &[usize]) -> f64 {
    let skip = out_idx.len() - dims.len();
    let idx: Vec<usize> = dims.iter().enumerate().map(|(k, &d)| if d == 1 { 0 } else { out_idx[k + skip] }).collect();
    x[ravel(&idx, dims)]
}

/// `f(a, b)` elementwise with broadcasting; returns the output shape and values.
pub fn zip_ref(
    a: &[f64],
    ad: &[usize],
    b: &[f64],
    bd: &[usize],
    f: impl Fn(f64, f64) -> f64,
) -> (Vec<usize>, Vec<f64>) {
    let od = broadcast_dims(ad, bd);
    let n: usize = od.iter().product();
    let out = (0..n)
        .map(|i| {
            let idx = unravel(i, &od);
            f(broadcast_get(a, ad, &idx), broadcast_get(b, bd, &idx))
        })
        .collect();
    (od, out)
}

/// Reduces `x` over `red` (sorted dims): each output (keepdim shape) is `f` of its group of
/// elements, listed in row-major order (so a position in the group is the flattened index
/// over the reduced dims).
pub fn reduce_ref(x: &[f64], dims: &[usize], red: &[usize], f: impl Fn(&[f64]) -> f64) -> (Vec<usize>, Vec<f64>) {
    let out_dims: Vec<usize> = dims.iter().enumerate().map(|(d, &s)| if red.contains(&d) { 1 } else { s }).collect();
    let mut groups = vec![Vec::new(); out_dims.iter().product()];
    for (i, &v) in x.iter().enumerate() {
        let mut idx = unravel(i, dims);
        red.iter().for_each(|&d| idx[d] = 0);
        groups[ravel(&idx, &out_dims)].push(v);
    }
    (out_dims, groups.iter().map(|g| f(g)).collect())
}

/// Batched matmul `[.., m, k] @ [.., k, n]` with broadcast batch dims (both rank >= 2).
pub fn matmul_ref(a: &[f64], ad: &[usize], b: &[f64], bd: &[usize]) -> (Vec<usize>, Vec<f64>) {
    let (ra, rb) = (ad.len(), bd.len());
    let (m, k, n) = (ad[ra - 2], ad[ra - 1], bd[rb - 1]);
    assert_eq!(k, bd[rb - 2], "inner dims");
    let batch = broadcast_dims(&ad[..ra - 2], &bd[..rb - 2]);
    let nb: usize = batch.iter().product();
    let offset = |bi: &[usize], d: &[usize]| {
        let own = &d[..d.len() - 2];
        let skip = bi.len() - own.len();
        let idx: Vec<usize> = own.iter().enumerate().map(|(j, &s)| if s == 1 { 0 } else { bi[j + skip] }).collect();
        ravel(&idx, own) * d[d.len() - 2] * d[d.len() - 1]
    };
    let mut out = Vec::with_capacity(nb * m * n);
    for bi in 0..nb {
        let idx = unravel(bi, &batch);
        let (oa, ob) = (offset(&idx, ad), offset(&idx, bd));
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|l| a[oa + i * k + l] * b[ob + l * n + j]).sum());
            }
        }
    }
    (batch.into_iter().chain([m, n]).collect(), out)
}

//! The naive attention of the tests, in f64 on plain vectors: every score is computed, the
//! softmax is taken row by row, and the gradients of `sum(o * w)` follow from the textbook
//! formulas. Written from scratch (not through `Tensor` ops) so that it shares no code with
//! the kernels or with the composed fallback.

/// One attention problem's sizes and mask.
#[derive(Clone, Debug)]
pub struct Problem {
    pub batch: usize,
    pub heads: usize,
    pub nq: usize,
    pub nk: usize,
    pub d: usize,
    pub dv: usize,
    pub scale: f64,
    pub causal: bool,
    /// Valid keys per batch element.
    pub lengths: Option<Vec<usize>>,
    /// The dims of the additive bias (right-aligned, broadcast to `[B, H, Nq, Nk]`).
    pub bias_dims: Option<Vec<usize>>,
}

/// The output and the gradients of `sum(o * w)`.
pub struct Reference {
    pub o: Vec<f64>,
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    /// The bias gradient, summed over the broadcast dims (the bias's own shape).
    pub dbias: Vec<f64>,
}

impl Problem {
    /// Where element `(b, h, i, j)` of the broadcast bias lives in the bias's own data.
    fn bias_index(&self, dims: &[usize], idx: [usize; 4]) -> usize {
        let skip = 4 - dims.len();
        dims.iter().enumerate().fold(0, |acc, (k, &n)| acc * n + if n == 1 { 0 } else { idx[k + skip] })
    }

    /// Whether query `i` of batch element `b` may see key `j`.
    fn visible(&self, b: usize, i: usize, j: usize) -> bool {
        let causal_ok = !self.causal || j <= i;
        let length_ok = self.lengths.as_ref().is_none_or(|l| j < l[b]);
        causal_ok && length_ok
    }

    /// The masked scaled scores of row `(b, h, i)`, `-inf` where masked.
    fn scores(&self, q: &[f64], k: &[f64], bias: &[f64], (b, h, i): (usize, usize, usize)) -> Vec<f64> {
        let (d, bh) = (self.d, b * self.heads + h);
        let qi = &q[(bh * self.nq + i) * d..][..d];
        (0..self.nk)
            .map(|j| {
                if !self.visible(b, i, j) {
                    return f64::NEG_INFINITY;
                }
                let kj = &k[(bh * self.nk + j) * d..][..d];
                let dot: f64 = qi.iter().zip(kj).map(|(a, c)| a * c).sum();
                let extra = self.bias_dims.as_ref().map_or(0.0, |dims| bias[self.bias_index(dims, [b, h, i, j])]);
                dot * self.scale + extra
            })
            .collect()
    }

    /// The softmax of a row of scores; all zeros for a row with every key masked (as
    /// PyTorch >= 2.5).
    fn softmax(s: &[f64]) -> Vec<f64> {
        let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            return vec![0.0; s.len()];
        }
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        e.iter().map(|x| x / sum).collect()
    }

    /// The output and gradients for row-major contiguous `q`, `k`, `v`, `bias` (its own
    /// dims) and loss weights `w` (`[B, H, Nq, Dv]`).
    pub fn run(&self, q: &[f64], k: &[f64], v: &[f64], bias: &[f64], w: &[f64]) -> Reference {
        let (d, dv) = (self.d, self.dv);
        let rows = self.batch * self.heads * self.nq;
        let mut r = Reference {
            o: vec![0.0; rows * dv],
            dq: vec![0.0; q.len()],
            dk: vec![0.0; k.len()],
            dv: vec![0.0; v.len()],
            dbias: vec![0.0; bias.len()],
        };
        for b in 0..self.batch {
            for h in 0..self.heads {
                let bh = b * self.heads + h;
                for i in 0..self.nq {
                    let row = bh * self.nq + i;
                    let p = Self::softmax(&self.scores(q, k, bias, (b, h, i)));
                    let kv = |j: usize| ((bh * self.nk + j) * d, (bh * self.nk + j) * dv);
                    let (o, go) = (&mut r.o[row * dv..][..dv], &w[row * dv..][..dv]);
                    for (j, &pj) in p.iter().enumerate() {
                        for (oc, vc) in o.iter_mut().zip(&v[kv(j).1..][..dv]) {
                            *oc += pj * vc;
                        }
                    }
                    // dP_j = w_i . v_j; dS_j = P_j (dP_j - sum_l P_l dP_l).
                    let dp: Vec<f64> =
                        (0..self.nk).map(|j| go.iter().zip(&v[kv(j).1..][..dv]).map(|(a, c)| a * c).sum()).collect();
                    let delta: f64 = p.iter().zip(&dp).map(|(a, c)| a * c).sum();
                    for j in 0..self.nk {
                        let ds = p[j] * (dp[j] - delta);
                        for (x, g) in r.dv[kv(j).1..][..dv].iter_mut().zip(go) {
                            *x += p[j] * g;
                        }
                        for (x, kc) in r.dq[row * d..][..d].iter_mut().zip(&k[kv(j).0..][..d]) {
                            *x += self.scale * ds * kc;
                        }
                        for (x, qc) in r.dk[kv(j).0..][..d].iter_mut().zip(&q[row * d..][..d]) {
                            *x += self.scale * ds * qc;
                        }
                        if let Some(dims) = &self.bias_dims {
                            r.dbias[self.bias_index(dims, [b, h, i, j])] += ds;
                        }
                    }
                }
            }
        }
        r
    }
}

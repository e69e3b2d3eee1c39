//! Host buffers that travel through a collective, the element types they may hold, and the
//! description of one collective call that every rank compares before moving data.

use rnn_core::{DType, Error, Result};

/// How `all_reduce` and `reduce_scatter` combine the ranks' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The element-wise sum over ranks.
    Sum,
    /// The sum divided by the world size (gradient averaging).
    Mean,
}

/// A host buffer of one of the element types collectives carry.
#[derive(Clone, Debug, PartialEq)]
pub enum Buf {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// An element type that collectives carry: `f32` and `f64` (cast other dtypes first).
pub trait CommElem: Copy + Send + Sync + std::fmt::Debug + 'static + sealed::Sealed {
    const DTYPE: DType;
    /// `x` rounded to this type.
    fn from_f64(x: f64) -> Self;
    #[doc(hidden)]
    fn into_buf(v: Vec<Self>) -> Buf;
    #[doc(hidden)]
    fn from_buf(b: Buf) -> Option<Vec<Self>>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

macro_rules! comm_elem {
    ($t:ty, $variant:ident, $dtype:expr) => {
        impl CommElem for $t {
            const DTYPE: DType = $dtype;
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn into_buf(v: Vec<Self>) -> Buf {
                Buf::$variant(v)
            }
            fn from_buf(b: Buf) -> Option<Vec<Self>> {
                match b {
                    Buf::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
comm_elem!(f32, F32, DType::F32);
comm_elem!(f64, F64, DType::F64);

/// Runs `$body` with `$v` bound to the buffer's vector, whatever its element type.
macro_rules! with_buf {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            $crate::buffer::Buf::F32($v) => $body,
            $crate::buffer::Buf::F64($v) => $body,
        }
    };
}

impl Buf {
    pub fn len(&self) -> usize {
        with_buf!(self, v => v.len())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        match self {
            Buf::F32(_) => DType::F32,
            Buf::F64(_) => DType::F64,
        }
    }

    /// Adds `other` element-wise (same type and length, checked by the caller's header).
    pub(crate) fn add_assign(&mut self, other: &Buf) {
        match (self, other) {
            (Buf::F32(a), Buf::F32(b)) => a.iter_mut().zip(b).for_each(|(x, y)| *x += *y),
            (Buf::F64(a), Buf::F64(b)) => a.iter_mut().zip(b).for_each(|(x, y)| *x += *y),
            _ => {} // unreachable once headers agree; a mismatch never reaches here
        }
    }

    /// Divides every element by `n` (the mean of a sum over `n` ranks). For a power of two
    /// it multiplies by `1 / n` instead: that reciprocal is exact, so every result (NaN,
    /// infinities and subnormals included) is the quotient's, bit for bit, and the pass no
    /// longer waits on divisions (a tenth of the communication thread's time with 2 ranks
    /// on 2.1 MB of gradients, on the critical path of every step).
    pub(crate) fn divide(&mut self, n: usize) {
        if n == 1 {
            return; // x / 1 is x: no pass over the buffer
        }
        match (self, n.is_power_of_two()) {
            (Buf::F32(v), true) => v.iter_mut().for_each(|x| *x *= 1.0 / n as f32),
            (Buf::F32(v), false) => v.iter_mut().for_each(|x| *x /= n as f32),
            (Buf::F64(v), true) => v.iter_mut().for_each(|x| *x *= 1.0 / n as f64),
            (Buf::F64(v), false) => v.iter_mut().for_each(|x| *x /= n as f64),
        }
    }

    /// Overwrites this buffer with `from`'s elements `start..start + self.len()` (same
    /// element type, checked by the caller's header).
    pub(crate) fn copy_from(&mut self, from: &Buf, start: usize) {
        match (self, from) {
            (Buf::F32(a), Buf::F32(b)) => {
                let n = a.len();
                a.copy_from_slice(&b[start..start + n])
            }
            (Buf::F64(a), Buf::F64(b)) => {
                let n = a.len();
                a.copy_from_slice(&b[start..start + n])
            }
            _ => {} // unreachable once headers agree
        }
    }

    /// Elements `start..start + len`, as a new buffer.
    pub(crate) fn slice(&self, start: usize, len: usize) -> Buf {
        match self {
            Buf::F32(v) => Buf::F32(v[start..start + len].to_vec()),
            Buf::F64(v) => Buf::F64(v[start..start + len].to_vec()),
        }
    }

    /// Keeps the first `len` elements.
    pub(crate) fn truncate(&mut self, len: usize) {
        with_buf!(self, v => v.truncate(len))
    }

    /// The buffers one after the other (all of one element type, checked by the header).
    pub(crate) fn concat(parts: &[&Buf]) -> Buf {
        match parts.first() {
            Some(Buf::F64(_)) => Buf::F64(parts.iter().flat_map(|p| as_f64(p)).copied().collect()),
            _ => Buf::F32(parts.iter().flat_map(|p| as_f32(p)).copied().collect()),
        }
    }
}

fn as_f32(b: &Buf) -> &[f32] {
    match b {
        Buf::F32(v) => v,
        Buf::F64(_) => &[],
    }
}
fn as_f64(b: &Buf) -> &[f64] {
    match b {
        Buf::F64(v) => v,
        Buf::F32(_) => &[],
    }
}

/// The collective a call performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    AllReduce(ReduceOp),
    Broadcast { root: usize },
    AllGather,
    ReduceScatter(ReduceOp),
    Barrier,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce(_) => "all_reduce",
            Collective::Broadcast { .. } => "broadcast",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter(_) => "reduce_scatter",
            Collective::Barrier => "barrier",
        }
    }
}

/// One collective call on one rank: what it does and the buffer it brings (none for a
/// barrier), or the reason this rank's arguments are invalid. A rank with invalid arguments
/// still takes part in the header exchange, so that every rank fails together instead of the
/// others waiting for it.
#[derive(Debug)]
pub struct Call {
    pub collective: Collective,
    pub buf: Option<Buf>,
    pub invalid: Option<String>,
}

/// The words every rank compares before a collective moves data: the same collective, root,
/// element type and length everywhere, and no rank with invalid arguments. Exchanging them
/// costs one small collective per call; it turns a mismatch (which MPI answers with garbage,
/// a truncation or a hang) into an error on every rank.
pub const HEADER_WORDS: usize = 5;

impl Call {
    pub fn header(&self) -> [i64; HEADER_WORDS] {
        let len = self.buf.as_ref().map_or(0, Buf::len);
        header_of(self.collective, self.buf.as_ref().map(Buf::dtype), len, self.invalid.is_some())
    }

    /// The error for this rank once the headers have been compared: its own invalid
    /// arguments first, else a description of the disagreement (`lo`/`hi`: the smallest and
    /// largest header over all ranks), else none.
    pub fn check_agreement(&self, lo: &[i64; HEADER_WORDS], hi: &[i64; HEADER_WORDS]) -> Result<()> {
        let op = self.collective.name();
        if let Some(msg) = &self.invalid {
            return Err(Error::invalid(op, msg.clone()));
        }
        if hi[4] != 0 {
            return Err(Error::invalid(
                op,
                "another rank gave invalid arguments (see its error); no data was exchanged",
            ));
        }
        if lo == hi {
            return Ok(());
        }
        let what = if lo[0] != hi[0] {
            "ranks called different collectives at the same point (every rank must make the same calls in the same order)"
                .to_string()
        } else if lo[1] != hi[1] {
            "ranks disagree on the reduce op or the root".to_string()
        } else if lo[2] != hi[2] {
            "ranks gave different dtypes".to_string()
        } else {
            format!("ranks gave different element counts (from {} to {})", lo[3], hi[3])
        };
        Err(Error::invalid(op, format!("{what}; no data was exchanged")))
    }
}

/// The header of a call of `collective` on `len` elements of `dtype` (none for a barrier).
pub fn header_of(collective: Collective, dtype: Option<DType>, len: usize, invalid: bool) -> [i64; HEADER_WORDS] {
    let (kind, detail) = match collective {
        Collective::AllReduce(op) => (1, op as i64),
        Collective::Broadcast { root } => (2, root as i64),
        Collective::AllGather => (3, 0),
        Collective::ReduceScatter(op) => (4, op as i64),
        Collective::Barrier => (5, 0),
    };
    let dtype = match dtype {
        Some(DType::F32) => 1,
        Some(DType::F64) => 2,
        _ => 0,
    };
    [kind, detail, dtype, len as i64, invalid as i64]
}

#[cfg(test)]
mod tests {
    use super::Buf;

    /// The mean's division matches `x / n` bit for bit, for powers of two (multiplied by the
    /// reciprocal) and others, on edge values.
    #[test]
    fn divide_is_the_quotient_bit_for_bit() {
        let f32s =
            [1.0f32, -3.0, 0.1, f32::MAX, f32::MIN_POSITIVE, 1e-45, -7e-39, 0.0, -0.0, f32::INFINITY, f32::NAN, 3.4e38];
        let f64s: Vec<f64> = f32s.iter().map(|&x| x as f64).chain([5e-324, f64::MAX, 2.2e-308]).collect();
        for n in [1, 2, 3, 4, 6, 8, 1024, 1 << 20] {
            let mut b = Buf::F32(f32s.to_vec());
            b.divide(n);
            let Buf::F32(got) = b else { unreachable!() };
            for (g, x) in got.iter().zip(f32s) {
                assert_eq!(g.to_bits(), (x / n as f32).to_bits(), "f32 {x:e} / {n}");
            }
            let mut b = Buf::F64(f64s.clone());
            b.divide(n);
            let Buf::F64(got) = b else { unreachable!() };
            for (g, x) in got.iter().zip(&f64s) {
                assert_eq!(g.to_bits(), (x / n as f64).to_bits(), "f64 {x:e} / {n}");
            }
        }
    }
}

//! Embedding: a lookup table from integer ids to learned vectors.

use rnn_core::{DType, Error, Result, Tensor};

use crate::init::bad_config;
use crate::{Init, Module, VarBuilder};

/// Maps each id in `[0, num_embeddings)` to a row of the weight `[num_embeddings, dim]`.
#[derive(Clone, Debug)]
pub struct Embedding {
    weight: Tensor,
}

impl Embedding {
    /// PyTorch's default initialization: weight ~ N(0, 1).
    pub fn new(num_embeddings: usize, embedding_dim: usize, vb: &mut VarBuilder) -> Result<Self> {
        if num_embeddings == 0 || embedding_dim == 0 {
            let msg = format!("num_embeddings {num_embeddings} and embedding_dim {embedding_dim} must be > 0");
            return Err(bad_config("Embedding", msg));
        }
        let weight = vb.var(&[num_embeddings, embedding_dim], Init::Normal { mean: 0.0, std: 1.0 })?;
        Ok(Embedding { weight })
    }

    /// A layer from an existing weight `[num_embeddings, dim]`.
    pub fn from_tensors(weight: Tensor) -> Result<Self> {
        if weight.rank() != 2 {
            let shape = weight.shape().clone();
            return Err(Error::RankMismatch { op: "Embedding", expected: 2, got: weight.rank(), shape });
        }
        Ok(Embedding { weight })
    }

    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    pub fn num_embeddings(&self) -> usize {
        self.weight.dims()[0]
    }

    pub fn embedding_dim(&self) -> usize {
        self.weight.dims()[1]
    }
}

/// Checks ids of any dtype on the host: each must be an integer in `0..limit`. NaN, ±inf, a
/// fraction, a negative or a too large value is an `Error::InvalidArgument` naming the value
/// and its flat position (`what` names an element: "id", "label", "input"), where a cast to
/// an integer dtype would silently turn it into some valid-looking id (NaN into 0, 1.5 into
/// 1). Reads the ids back: a synchronization when they are on a GPU.
pub fn check_ids(op: &'static str, what: &str, ids: &Tensor, limit: usize) -> Result<()> {
    let values = ids.to_f64_vec()?;
    let is_id = |v: f64| v.fract() == 0.0 && v >= 0.0 && v < limit as f64;
    if let Some((pos, v)) = values.iter().enumerate().find(|(_, v)| !is_id(**v)) {
        let msg = format!("{what} {pos} is {v}; ids must be integers in 0..{limit}");
        return Err(Error::invalid(op, msg));
    }
    Ok(())
}

impl Module for Embedding {
    /// Ids of any shape -> `ids.shape + [dim]`. Integer ids (u8, u32 or i64) out of range are
    /// an `Error::IndexOutOfRange`: at once on the CPU, at the next sync point (a read-back
    /// or `Device::synchronize`) on a GPU, which checks the ids on the device without
    /// waiting for it. Float ids are accepted when they hold integers: they are checked on
    /// the host first (`check_ids`, a read-back), so NaN or 1.5 is an error, not id 0 or 1.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let ids = if xs.dtype().is_float() {
            check_ids("Embedding", "id", xs, self.num_embeddings())?;
            xs.to_dtype(DType::I64)?
        } else {
            xs.clone()
        };
        let rows = self.weight.index_select(&ids.flatten_all()?, 0)?;
        let mut shape = xs.dims().to_vec();
        shape.push(self.embedding_dim());
        rows.reshape(shape)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".to_string(), self.weight.clone())]
    }
}

//! Embedding: a lookup table from integer ids to learned vectors.

use rnn_core::{Error, Result, Tensor};

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

impl Module for Embedding {
    /// Integer ids (u8, u32 or i64) of any shape -> `ids.shape + [dim]`; an id out of range
    /// is an `Error::IndexOutOfRange`: at once on the CPU, at the next sync point (a
    /// read-back or `Device::synchronize`) on a GPU, which checks the ids on the device
    /// without waiting for it.
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        if xs.dtype().is_float() {
            let hint = ": ids must be an integer tensor (u8, u32 or i64)";
            return Err(Error::UnsupportedDType { op: "Embedding", dtype: xs.dtype(), hint });
        }
        let rows = self.weight.index_select(&xs.flatten_all()?, 0)?;
        let mut shape = xs.dims().to_vec();
        shape.push(self.embedding_dim());
        rows.reshape(shape)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".to_string(), self.weight.clone())]
    }
}

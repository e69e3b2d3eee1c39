//! Datasets: an in-memory [`Dataset`] of inputs and class labels, MNIST IDX files
//! ([`mnist`]), a built-in set of procedurally drawn digits that needs no download
//! ([`digits`]), shuffled mini-batch indices ([`Batches`]) and character-level text for
//! language models ([`text`]).

mod batches;
pub mod digits;
pub mod mnist;
mod source;
pub mod text;

pub use batches::Batches;
pub use digits::{render_ascii, synthetic_digits, synthetic_digits_with_shape};
pub use mnist::{
    load_mnist, load_mnist_with_shape, mnist_split_present, read_idx_images, read_idx_images_with_shape,
    read_idx_labels,
};
pub use mnist::{ImageShape, MnistSplit};
pub use text::{TextDataset, TextSplit, Vocab, WindowSampler};

use rnn_core::{DType, Device, Error, Result, Tensor};

/// A labelled classification dataset held in memory.
#[derive(Clone)]
pub struct Dataset {
    /// Samples, f32, `[n, ...]` (e.g. `[n, 784]` or `[n, 1, 28, 28]`).
    pub inputs: Tensor,
    /// Class ids, u32, `[n]`, each below `num_classes`.
    pub labels: Tensor,
    pub num_classes: usize,
    /// A short name for messages, e.g. `"mnist-test"`.
    pub name: String,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("name", &self.name)
            .field("inputs", &self.inputs.dims())
            .field("labels", &self.labels.dims())
            .field("num_classes", &self.num_classes)
            .finish()
    }
}

impl Dataset {
    /// A dataset from inputs `[n, ...]` and u32 labels `[n]`, checking that the sizes agree
    /// and that every label is below `num_classes`.
    pub fn new(inputs: Tensor, labels: Tensor, num_classes: usize, name: impl Into<String>) -> Result<Dataset> {
        const OP: &str = "Dataset::new";
        if labels.dtype() != DType::U32 {
            return Err(Error::DTypeMismatch { op: OP, lhs: labels.dtype(), rhs: DType::U32 });
        }
        if labels.rank() != 1 {
            return Err(Error::RankMismatch { op: OP, expected: 1, got: labels.rank(), shape: labels.shape().clone() });
        }
        if inputs.rank() == 0 || inputs.dims()[0] != labels.dims()[0] {
            return Err(Error::invalid(
                OP,
                format!("inputs {:?} and labels {:?} must have the same first dim", inputs.dims(), labels.dims()),
            ));
        }
        if num_classes == 0 {
            return Err(Error::invalid(OP, "num_classes must be > 0"));
        }
        let labels_host = labels.to_vec::<u32>()?;
        if let Some((i, bad)) = labels_host.iter().enumerate().find(|(_, &l)| l as usize >= num_classes) {
            return Err(Error::invalid(OP, format!("label {bad} at index {i} is not below num_classes {num_classes}")));
        }
        Ok(Dataset { inputs, labels, num_classes, name: name.into() })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.dims().first().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shape of one sample (the input dims after the first).
    pub fn sample_shape(&self) -> &[usize] {
        self.inputs.dims().get(1..).unwrap_or(&[])
    }

    /// The first `n` samples and the rest (e.g. a validation split). `n` may be 0 or `len()`.
    pub fn split_at(&self, n: usize) -> Result<(Dataset, Dataset)> {
        let len = self.len();
        if n > len {
            return Err(Error::invalid("Dataset::split_at", format!("cannot split {len} samples at {n}")));
        }
        Ok((self.slice(0, n)?, self.slice(n, len - n)?))
    }

    /// At most the first `n` samples (all of them when `n >= len()`).
    pub fn take(&self, n: usize) -> Result<Dataset> {
        self.slice(0, n.min(self.len()))
    }

    /// The inputs and labels of the samples at `indices`, in that order (rows gathered with
    /// `index_select`), on the dataset's device.
    pub fn batch(&self, indices: &[u32]) -> Result<(Tensor, Tensor)> {
        let len = self.len();
        if let Some(&bad) = indices.iter().find(|&&i| i as usize >= len) {
            return Err(Error::IndexOutOfRange {
                op: "Dataset::batch",
                index: bad as i64,
                size: len,
                shape: self.inputs.shape().clone(),
            });
        }
        let ids = Tensor::from_slice(indices, indices.len(), self.inputs.device())?;
        let inputs = self.inputs.index_select(&ids, 0)?;
        let ids = ids.to_device(self.labels.device())?;
        Ok((inputs, self.labels.index_select(&ids, 0)?))
    }

    /// The same dataset with inputs and labels on `device`.
    pub fn to_device(&self, device: Device) -> Result<Dataset> {
        Ok(Dataset {
            inputs: self.inputs.to_device(device)?,
            labels: self.labels.to_device(device)?,
            num_classes: self.num_classes,
            name: self.name.clone(),
        })
    }

    /// Samples `start..start + len` (views, no copy).
    fn slice(&self, start: usize, len: usize) -> Result<Dataset> {
        Ok(Dataset {
            inputs: self.inputs.narrow(0, start, len)?,
            labels: self.labels.narrow(0, start, len)?,
            num_classes: self.num_classes,
            name: self.name.clone(),
        })
    }
}

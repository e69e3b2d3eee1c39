//! Checkpoints: named tensors plus string metadata in the safetensors format, readable by
//! PyTorch (`safetensors.torch.load_file`), candle and the `safetensors` Python package.
//!
//! Saving is atomic: the file is written next to its destination under a temporary name,
//! flushed to disk and renamed, so a crash or a full disk never leaves a half-written
//! checkpoint at the destination; a link is followed and a destination that is not a
//! regular file is refused (see [`crate::atomic_file`]). Loading into a model checks every name, shape and dtype
//! before changing anything, so a checkpoint of another model leaves the model as it was.
//!
//! ```
//! use std::collections::BTreeMap;
//! use rnn_core::{DType, Device, Tensor};
//! use rnn_train::checkpoint;
//! # fn main() -> rnn_core::Result<()> {
//! let weight = Tensor::ones((2, 3), DType::F32, Device::Cpu)?;
//! let path = std::env::temp_dir().join(format!("doc-ckpt-{}.safetensors", std::process::id()));
//! let meta = BTreeMap::from([("epoch".to_string(), "3".to_string())]);
//! checkpoint::save(&path, &[("fc.weight".to_string(), weight.clone())], &meta)?;
//!
//! let model = [("fc.weight".to_string(), Tensor::zeros((2, 3), DType::F32, Device::Cpu)?)];
//! let ckpt = checkpoint::load(&path)?;
//! checkpoint::apply(&model, &ckpt)?;
//! assert_eq!(model[0].1.to_vec::<f32>()?, vec![1.0; 6]);
//! assert_eq!(ckpt.metadata["epoch"], "3");
//! # std::fs::remove_file(&path).ok();
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use half::{bf16, f16};
use rnn_core::{no_grad, DType, Device, Error, Result, Tensor, WithDType};
use safetensors::tensor::{Dtype as StDtype, SafeTensors, TensorView};

/// The contents of a checkpoint file: its tensors (on the CPU, sorted by name) and metadata.
#[derive(Clone, Default)]
pub struct Checkpoint {
    pub tensors: Vec<(String, Tensor)>,
    pub metadata: BTreeMap<String, String>,
}

impl Checkpoint {
    /// The tensor saved under `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The names of the saved tensors.
    pub fn names(&self) -> Vec<&str> {
        self.tensors.iter().map(|(n, _)| n.as_str()).collect()
    }
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shapes: Vec<(&str, &[usize])> = self.tensors.iter().map(|(n, t)| (n.as_str(), t.dims())).collect();
        f.debug_struct("Checkpoint").field("tensors", &shapes).field("metadata", &self.metadata).finish()
    }
}

/// Writes `tensors` (any dtype, any device, views allowed) and `metadata` to `path`
/// atomically. Names must be unique.
pub fn save(path: impl AsRef<Path>, tensors: &[(String, Tensor)], metadata: &BTreeMap<String, String>) -> Result<()> {
    let mut seen = BTreeSet::new();
    if let Some((dup, _)) = tensors.iter().find(|(name, _)| !seen.insert(name.as_str())) {
        return Err(Error::invalid("checkpoint::save", format!("the name '{dup}' appears twice")));
    }
    let encoded: Vec<(String, StDtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, t)| Ok((name.clone(), st_dtype(t.dtype()), t.dims().to_vec(), le_bytes(t)?)))
        .collect::<Result<_>>()?;
    let views = encoded
        .iter()
        .map(|(name, dtype, shape, bytes)| Ok((name.as_str(), TensorView::new(*dtype, shape.clone(), bytes)?)))
        .collect::<std::result::Result<Vec<_>, safetensors::SafeTensorError>>()
        .map_err(|e| Error::Msg(format!("checkpoint::save: {e}")))?;
    let info: Option<HashMap<String, String>> =
        (!metadata.is_empty()).then(|| metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
    let bytes =
        safetensors::tensor::serialize(views, info).map_err(|e| Error::Msg(format!("checkpoint::save: {e}")))?;
    crate::atomic_file::write_atomic(path, &bytes)
}

/// Reads a checkpoint: `Error::Io` when the file cannot be read, `Error::BadFile` when it is
/// not a complete safetensors file or holds a dtype this library does not have.
pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |e: safetensors::SafeTensorError| Error::bad_file(path, format!("not a valid safetensors file: {e}"));
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(bad)?;
    let file = SafeTensors::deserialize(&bytes).map_err(bad)?;
    let mut tensors = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let tensor = from_view(&view).map_err(|msg| Error::bad_file(path, format!("tensor '{name}': {msg}")))?;
            Ok((name, tensor))
        })
        .collect::<Result<Vec<_>>>()?;
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let metadata = header.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
    Ok(Checkpoint { tensors, metadata })
}

/// Copies the checkpoint's tensors into `targets` (e.g. a model's named parameters and
/// buffers), matched by name, moved to each target's device.
///
/// Everything is checked first: every target must be in the checkpoint with the same shape
/// and dtype, and the checkpoint must hold nothing else. On a mismatch the error lists the
/// missing and unexpected names and the differing shapes, and no target has changed.
pub fn apply(targets: &[(String, Tensor)], ckpt: &Checkpoint) -> Result<()> {
    let problems = mismatches(targets, ckpt);
    if !problems.is_empty() {
        let msg = format!("the checkpoint does not match the model: {}", problems.join("; "));
        return Err(Error::invalid("checkpoint", msg));
    }
    no_grad(|| {
        for (name, target) in targets {
            let src = ckpt.get(name).ok_or_else(|| Error::invalid("checkpoint", format!("'{name}' is missing")))?;
            target.assign(&src.to_device(target.device())?)?;
        }
        Ok(())
    })
}

/// [`load`] then [`apply`]; a checkpoint that does not match is reported as
/// `Error::BadFile` naming the file.
pub fn load_into(path: impl AsRef<Path>, targets: &[(String, Tensor)]) -> Result<Checkpoint> {
    let path = path.as_ref();
    let ckpt = load(path)?;
    apply(targets, &ckpt).map_err(|e| match e {
        Error::InvalidArgument { msg, .. } => Error::bad_file(path, msg),
        other => other,
    })?;
    Ok(ckpt)
}

/// Every reason `targets` cannot take the checkpoint's values; empty when they can.
fn mismatches(targets: &[(String, Tensor)], ckpt: &Checkpoint) -> Vec<String> {
    let mut problems = Vec::new();
    let mut target_names = BTreeSet::new();
    for (name, target) in targets {
        if !target_names.insert(name.as_str()) {
            problems.push(format!("the model has two tensors named '{name}'"));
        }
        if !target.is_contiguous() {
            problems.push(format!("the model's '{name}' is a non-contiguous view and cannot be overwritten"));
        }
    }
    let missing: Vec<&str> = targets.iter().map(|(n, _)| n.as_str()).filter(|n| ckpt.get(n).is_none()).collect();
    let unexpected: Vec<&str> = ckpt.names().into_iter().filter(|n| !target_names.contains(n)).collect();
    if !missing.is_empty() {
        problems.push(format!("missing in the checkpoint: {}", missing.join(", ")));
    }
    if !unexpected.is_empty() {
        problems.push(format!("unexpected in the checkpoint: {}", unexpected.join(", ")));
    }
    for (name, target) in targets {
        let Some(src) = ckpt.get(name) else { continue };
        if src.dims() != target.dims() || src.dtype() != target.dtype() {
            problems.push(format!(
                "'{name}' is {:?} {} in the checkpoint but {:?} {} in the model",
                src.dims(),
                src.dtype(),
                target.dims(),
                target.dtype()
            ));
        }
    }
    problems
}

fn st_dtype(dtype: DType) -> StDtype {
    match dtype {
        DType::U8 => StDtype::U8,
        DType::U32 => StDtype::U32,
        DType::I64 => StDtype::I64,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
    }
}

/// The elements of `t` in row-major order as little-endian bytes (copied to the host).
fn le_bytes(t: &Tensor) -> Result<Vec<u8>> {
    fn bytes<T: WithDType, const N: usize>(t: &Tensor, to_le: fn(T) -> [u8; N]) -> Result<Vec<u8>> {
        Ok(t.to_vec::<T>()?.into_iter().flat_map(to_le).collect())
    }
    match t.dtype() {
        DType::U8 => t.to_vec::<u8>(),
        DType::U32 => bytes(t, u32::to_le_bytes),
        DType::I64 => bytes(t, i64::to_le_bytes),
        DType::F16 => bytes(t, f16::to_le_bytes),
        DType::BF16 => bytes(t, bf16::to_le_bytes),
        DType::F32 => bytes(t, f32::to_le_bytes),
        DType::F64 => bytes(t, f64::to_le_bytes),
    }
}

/// A CPU tensor from a safetensors view, or why it cannot be one.
fn from_view(view: &TensorView<'_>) -> std::result::Result<Tensor, String> {
    fn decode<T: WithDType, const N: usize>(
        view: &TensorView<'_>,
        from_le: fn([u8; N]) -> T,
    ) -> std::result::Result<Tensor, String> {
        let data: Vec<T> = view
            .data()
            .chunks_exact(N)
            .map(|c| c.try_into().map(from_le))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| e.to_string())?;
        Tensor::from_vec(data, view.shape().to_vec(), Device::Cpu).map_err(|e| e.to_string())
    }
    match view.dtype() {
        StDtype::U8 => {
            Tensor::from_vec(view.data().to_vec(), view.shape().to_vec(), Device::Cpu).map_err(|e| e.to_string())
        }
        StDtype::U32 => decode(view, u32::from_le_bytes),
        StDtype::I64 => decode(view, i64::from_le_bytes),
        StDtype::F16 => decode(view, f16::from_le_bytes),
        StDtype::BF16 => decode(view, bf16::from_le_bytes),
        StDtype::F32 => decode(view, f32::from_le_bytes),
        StDtype::F64 => decode(view, f64::from_le_bytes),
        other => Err(format!("dtype {other} is not supported (u8, u32, i64, f16, bf16, f32, f64 are)")),
    }
}

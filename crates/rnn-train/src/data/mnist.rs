//! MNIST in its original IDX format (gzip-compressed or raw; detected from the file's
//! first bytes, not its name).
//!
//! An IDX file is a big-endian header — two zero bytes, a type byte (0x08: u8), the number
//! of dims, then each dim as a u32 — followed by the elements. Images are `0x00000803`
//! (`[n, rows, cols]`), labels `0x00000801` (`[n]`).

use std::io::Read;
use std::path::{Path, PathBuf};

use rnn_core::{Device, Error, Result, Tensor};

use super::Dataset;

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const NUM_CLASSES: usize = 10;

/// Which half of MNIST to load: 60,000 training or 10,000 test images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MnistSplit {
    Train,
    Test,
}

impl MnistSplit {
    /// The prefix of the split's file names (`train-…`, `t10k-…`).
    fn file_prefix(self) -> &'static str {
        match self {
            MnistSplit::Train => "train",
            MnistSplit::Test => "t10k",
        }
    }

    fn name(self) -> &'static str {
        match self {
            MnistSplit::Train => "train",
            MnistSplit::Test => "test",
        }
    }
}

/// How images are laid out in the returned tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ImageShape {
    /// `[n, rows * cols]`, for dense layers.
    #[default]
    Flat,
    /// `[n, 1, rows, cols]` (NCHW with one channel), for convolutions.
    Image,
}

/// Reads an IDX image file as f32 in `[0, 1]`, shape `[n, rows * cols]`.
pub fn read_idx_images(path: impl AsRef<Path>) -> Result<Tensor> {
    read_idx_images_with_shape(path, ImageShape::Flat)
}

/// Reads an IDX image file as f32 in `[0, 1]`, flat or image-shaped.
pub fn read_idx_images_with_shape(path: impl AsRef<Path>, shape: ImageShape) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = read_maybe_gzip(path)?;
    let (dims, pixels) = parse_idx(path, &bytes, IMAGES_MAGIC, "images")?;
    let (n, rows, cols) = (dims[0], dims[1], dims[2]);
    // Checked even though the file length matched: with n = 0 the pixel count says nothing.
    let per_image =
        rows.checked_mul(cols).ok_or_else(|| Error::bad_file(path, format!("image size {rows}x{cols} overflows")))?;
    let data: Vec<f32> = pixels.iter().map(|&p| f32::from(p) / 255.0).collect();
    match shape {
        ImageShape::Flat => Tensor::from_vec(data, (n, per_image), Device::Cpu),
        ImageShape::Image => Tensor::from_vec(data, (n, 1, rows, cols), Device::Cpu),
    }
}

/// Reads an IDX label file as u32 `[n]`; every label must be a digit (below 10).
pub fn read_idx_labels(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = read_maybe_gzip(path)?;
    let (dims, labels) = parse_idx(path, &bytes, LABELS_MAGIC, "labels")?;
    if let Some((i, bad)) = labels.iter().enumerate().find(|(_, &l)| l as usize >= NUM_CLASSES) {
        return Err(Error::bad_file(path, format!("label {bad} at index {i} is not a digit 0-9")));
    }
    Tensor::from_vec(labels.iter().map(|&l| u32::from(l)).collect::<Vec<u32>>(), dims[0], Device::Cpu)
}

/// Loads one split of MNIST from `dir` as flat images `[n, 784]`.
///
/// Looks for `train-images-idx3-ubyte` / `train-labels-idx1-ubyte` (test: `t10k-…`),
/// also spelled `train-images.idx3-ubyte`, each raw or with a `.gz` suffix.
pub fn load_mnist(dir: impl AsRef<Path>, split: MnistSplit) -> Result<Dataset> {
    load_mnist_with_shape(dir, split, ImageShape::Flat)
}

/// Loads one split of MNIST from `dir`, images flat or `[n, 1, 28, 28]`.
pub fn load_mnist_with_shape(dir: impl AsRef<Path>, split: MnistSplit, shape: ImageShape) -> Result<Dataset> {
    let dir = dir.as_ref();
    let images_path = find_file(dir, split, "images", 3)?;
    let labels_path = find_file(dir, split, "labels", 1)?;
    let images = read_idx_images_with_shape(&images_path, shape)?;
    let labels = read_idx_labels(&labels_path)?;
    if images.dims()[0] != labels.dims()[0] {
        let msg = format!(
            "holds {} labels but {} holds {} images",
            labels.dims()[0],
            images_path.display(),
            images.dims()[0]
        );
        return Err(Error::bad_file(&labels_path, msg));
    }
    Dataset::new(images, labels, NUM_CLASSES, format!("mnist-{}", split.name()))
}

/// The first existing file among the accepted spellings, or an error listing them all.
fn find_file(dir: &Path, split: MnistSplit, kind: &str, rank: usize) -> Result<PathBuf> {
    let prefix = split.file_prefix();
    let stems = [format!("{prefix}-{kind}-idx{rank}-ubyte"), format!("{prefix}-{kind}.idx{rank}-ubyte")];
    let candidates: Vec<PathBuf> =
        stems.iter().flat_map(|stem| [dir.join(stem), dir.join(format!("{stem}.gz"))]).collect();
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let names: Vec<String> =
        candidates.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into()).collect();
    Err(Error::Io {
        path: dir.display().to_string(),
        msg: format!("no MNIST {} {kind} file found (looked for {})", split.name(), names.join(", ")),
    })
}

/// The file's bytes, decompressed when they start with the gzip magic.
pub(crate) fn read_maybe_gzip(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    gunzip_if_gzip(path, raw)
}

/// `raw` decompressed when it starts with the gzip magic, else as it is; `origin` names the
/// data in errors.
pub(crate) fn gunzip_if_gzip(origin: &Path, raw: Vec<u8>) -> Result<Vec<u8>> {
    if !raw.starts_with(&GZIP_MAGIC) {
        return Ok(raw);
    }
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(raw.as_slice())
        .read_to_end(&mut out)
        .map_err(|e| Error::bad_file(origin, format!("corrupt gzip data: {e}")))?;
    Ok(out)
}

/// Checks the header against `magic` and the file length against the dims; returns the
/// dims and the element bytes.
fn parse_idx<'a>(path: &Path, bytes: &'a [u8], magic: u32, what: &str) -> Result<(Vec<usize>, &'a [u8])> {
    let found = read_be_u32(bytes, 0)
        .ok_or_else(|| Error::bad_file(path, format!("{} bytes is too short for an IDX header", bytes.len())))?;
    if found != magic {
        let msg = format!("bad magic number 0x{found:08x}, expected 0x{magic:08x} for IDX {what}");
        return Err(Error::bad_file(path, msg));
    }
    let rank = (magic & 0xff) as usize;
    let header_len = 4 + 4 * rank;
    let dims: Vec<usize> =
        (0..rank).map(|i| read_be_u32(bytes, 4 + 4 * i).map(|d| d as usize)).collect::<Option<_>>().ok_or_else(
            || Error::bad_file(path, format!("truncated header: {} bytes, {header_len} needed", bytes.len())),
        )?;
    let body_len = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::bad_file(path, format!("dims {dims:?} overflow")))?;
    let expected = header_len + body_len;
    if bytes.len() != expected {
        let problem = if bytes.len() < expected { "truncated" } else { "extra bytes after the data" };
        let msg = format!("{problem}: header promises dims {dims:?} = {expected} bytes, file has {}", bytes.len());
        return Err(Error::bad_file(path, msg));
    }
    Ok((dims, &bytes[header_len..]))
}

fn read_be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let word: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(word))
}

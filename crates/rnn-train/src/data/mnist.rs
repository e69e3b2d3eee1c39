//! MNIST in its original IDX format (gzip-compressed or raw; detected from the file's
//! first bytes, not its name). Compressed files are inflated as a stream that stops at the
//! size the header promises.
//!
//! An IDX file is a big-endian header — two zero bytes, a type byte (0x08: u8), the number
//! of dims, then each dim as a u32 — followed by the elements. Images are `0x00000803`
//! (`[n, rows, cols]`), labels `0x00000801` (`[n]`).

use std::path::{Path, PathBuf};

use rnn_core::{try_vec, Device, Error, Result, Tensor};

use super::source::DataReader;
use super::Dataset;

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;
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
    let (dims, pixels) = read_idx(path, IMAGES_MAGIC, "images")?;
    let (n, rows, cols) = (dims[0], dims[1], dims[2]);
    // Checked even though the file length matched: with n = 0 the pixel count says nothing.
    let per_image =
        rows.checked_mul(cols).ok_or_else(|| Error::bad_file(path, format!("image size {rows}x{cols} overflows")))?;
    let mut data = try_vec(pixels.len())?;
    data.extend(pixels.iter().map(|&p| f32::from(p) / 255.0));
    match shape {
        ImageShape::Flat => Tensor::from_vec(data, (n, per_image), Device::Cpu),
        ImageShape::Image => Tensor::from_vec(data, (n, 1, rows, cols), Device::Cpu),
    }
}

/// Reads an IDX label file as u32 `[n]`; every label must be a digit (below 10).
pub fn read_idx_labels(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let (dims, labels) = read_idx(path, LABELS_MAGIC, "labels")?;
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

/// Whether `dir` holds any file of `split` (images or labels, in any accepted spelling,
/// readable or not). A caller can fall back to another split when this is false, and must
/// report the error of [`load_mnist`] when it is true.
pub fn mnist_split_present(dir: impl AsRef<Path>, split: MnistSplit) -> bool {
    let dir = dir.as_ref();
    [("images", 3), ("labels", 1)]
        .iter()
        .flat_map(|&(kind, rank)| candidate_files(dir, split, kind, rank))
        .any(|p| p.symlink_metadata().is_ok())
}

/// Every accepted spelling of a split's file, raw then gzip.
fn candidate_files(dir: &Path, split: MnistSplit, kind: &str, rank: usize) -> Vec<PathBuf> {
    let prefix = split.file_prefix();
    let stems = [format!("{prefix}-{kind}-idx{rank}-ubyte"), format!("{prefix}-{kind}.idx{rank}-ubyte")];
    stems.iter().flat_map(|stem| [dir.join(stem), dir.join(format!("{stem}.gz"))]).collect()
}

/// The first existing file among the accepted spellings, or an error listing them all.
fn find_file(dir: &Path, split: MnistSplit, kind: &str, rank: usize) -> Result<PathBuf> {
    let candidates = candidate_files(dir, split, kind, rank);
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

/// Reads the IDX header, checks it against `magic`, then reads exactly the element bytes
/// the dims promise: a stream with fewer or more bytes is an error, and decompression stops
/// one byte past the promised size. Returns the dims and the element bytes.
fn read_idx(path: &Path, magic: u32, what: &str) -> Result<(Vec<usize>, Vec<u8>)> {
    read_idx_from(DataReader::open(path)?, magic, what)
}

fn read_idx_from(mut reader: DataReader, magic: u32, what: &str) -> Result<(Vec<usize>, Vec<u8>)> {
    let path = &reader.origin().to_path_buf();
    let rank = (magic & 0xff) as usize;
    let header_len = 4 + 4 * rank;
    let mut header = vec![0u8; header_len];
    let got = reader.read_up_to(&mut header)?;
    let found = read_be_u32(&header[..got], 0)
        .ok_or_else(|| Error::bad_file(path, format!("{got} bytes is too short for an IDX header")))?;
    if found != magic {
        let msg = format!("bad magic number 0x{found:08x}, expected 0x{magic:08x} for IDX {what}");
        return Err(Error::bad_file(path, msg));
    }
    if got < header_len {
        return Err(Error::bad_file(path, format!("truncated header: {got} bytes, {header_len} needed")));
    }
    let dims: Vec<usize> = (0..rank).filter_map(|i| read_be_u32(&header, 4 + 4 * i)).map(|d| d as usize).collect();
    let body_len = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::bad_file(path, format!("dims {dims:?} overflow")))?;
    let expected = header_len.saturating_add(body_len);
    let body = reader.read_at_most(body_len)?;
    if body.len() < body_len {
        let msg = format!(
            "truncated: header promises dims {dims:?} = {expected} bytes, the data ends after {}",
            header_len + body.len()
        );
        return Err(Error::bad_file(path, msg));
    }
    if !reader.at_end()? {
        let msg = format!("extra bytes after the data: header promises dims {dims:?} = {expected} bytes");
        return Err(Error::bad_file(path, msg));
    }
    Ok((dims, body))
}

fn read_be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let word: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::source::tests::{gzip_bomb, CountingReader};

    #[test]
    fn a_gzip_bomb_is_inflated_only_up_to_the_promised_size() {
        let header: Vec<u8> = [IMAGES_MAGIC, 3, 2, 2].iter().flat_map(|w| w.to_be_bytes()).collect();
        let (bomb, inflated) = gzip_bomb(&header);
        let counter = CountingReader::new(bomb.clone());
        let reader = DataReader::new(Path::new("bomb-idx3-ubyte.gz"), counter.clone()).unwrap();
        let err = read_idx_from(reader, IMAGES_MAGIC, "images").unwrap_err().to_string();
        assert!(err.contains("bomb-idx3-ubyte.gz") && err.contains("extra bytes"), "{err}");
        // Inflating all of it would read every compressed byte.
        assert!(
            counter.consumed() < bomb.len() / 4,
            "read {} of {} bytes ({inflated} inflated)",
            counter.consumed(),
            bomb.len()
        );
    }
}

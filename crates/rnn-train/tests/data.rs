//! Datasets: `Dataset`, `Batches`, the MNIST IDX reader and the synthetic digits.

use rnn_testutil::temp_dir;
use std::io::Write;
use std::path::{Path, PathBuf};

use rnn_core::{no_grad, DType, Device, Error, Result, Tensor};
use rnn_nn::{cross_entropy, Linear, Module, VarBuilder};
use rnn_train::data::{
    load_mnist, load_mnist_with_shape, read_idx_images, read_idx_images_with_shape, read_idx_labels, render_ascii,
    synthetic_digits, Batches, Dataset, ImageShape, MnistSplit,
};

fn idx_bytes(magic: u32, dims: &[u32], body: &[u8]) -> Vec<u8> {
    let mut out = magic.to_be_bytes().to_vec();
    dims.iter().for_each(|d| out.extend(d.to_be_bytes()));
    out.extend_from_slice(body);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).expect("gzip");
    enc.finish().expect("gzip")
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}

/// Three 2x2 images with pixels 0, 51, ... and labels 3, 1, 4.
fn tiny_mnist_files() -> (Vec<u8>, Vec<u8>) {
    let pixels: Vec<u8> = (0..12u8).map(|i| i * 20).collect();
    (idx_bytes(0x803, &[3, 2, 2], &pixels), idx_bytes(0x801, &[3], &[3, 1, 4]))
}

fn small_dataset() -> Result<Dataset> {
    let inputs = Tensor::from_vec((0..12).map(|v| v as f32).collect::<Vec<_>>(), (6, 2), Device::Cpu)?;
    let labels = Tensor::from_vec(vec![0u32, 1, 2, 0, 1, 2], 6, Device::Cpu)?;
    Dataset::new(inputs, labels, 3, "small")
}

#[test]
fn dataset_split_take_and_batch() -> Result<()> {
    let data = small_dataset()?;
    assert_eq!(data.len(), 6);
    assert_eq!(data.sample_shape(), &[2]);
    let (head, tail) = data.split_at(4)?;
    assert_eq!((head.len(), tail.len()), (4, 2));
    assert_eq!(tail.inputs.to_vec2::<f32>()?, vec![vec![8.0, 9.0], vec![10.0, 11.0]]);
    assert_eq!(tail.labels.to_vec1::<u32>()?, vec![1, 2]);
    let (all, none) = data.split_at(6)?;
    assert_eq!((all.len(), none.len()), (6, 0));
    assert!(none.is_empty());
    assert_eq!(data.take(2)?.labels.to_vec1::<u32>()?, vec![0, 1]);
    assert_eq!(data.take(100)?.len(), 6);

    let (x, y) = data.batch(&[5, 0, 3])?;
    assert_eq!(x.to_vec2::<f32>()?, vec![vec![10.0, 11.0], vec![0.0, 1.0], vec![6.0, 7.0]]);
    assert_eq!(y.to_vec1::<u32>()?, vec![2, 0, 0]);
    let (x, y) = data.batch(&[])?;
    assert_eq!((x.dims(), y.dims()), (&[0, 2][..], &[0][..]));
    // Batches of a split index into the split, not into the whole set.
    let (_, y) = tail.batch(&[1])?;
    assert_eq!(y.to_vec1::<u32>()?, vec![2]);
    let moved = data.to_device(Device::Cpu)?;
    assert_eq!(moved.inputs.to_vec::<f32>()?, data.inputs.to_vec::<f32>()?);
    Ok(())
}

#[test]
fn dataset_rejects_bad_input() -> Result<()> {
    let data = small_dataset()?;
    assert!(matches!(data.batch(&[6]), Err(Error::IndexOutOfRange { index: 6, .. })));
    assert!(data.split_at(7).is_err());
    let inputs = Tensor::zeros((3, 2), DType::F32, Device::Cpu)?;
    let too_few = Tensor::from_vec(vec![0u32, 1], 2, Device::Cpu)?;
    assert!(Dataset::new(inputs.clone(), too_few, 2, "x").is_err());
    let big_label = Tensor::from_vec(vec![0u32, 1, 2], 3, Device::Cpu)?;
    let err = Dataset::new(inputs.clone(), big_label, 2, "x").unwrap_err();
    assert!(err.to_string().contains("label 2 at index 2"), "{err}");
    let float_labels = Tensor::zeros(3, DType::F32, Device::Cpu)?;
    assert!(matches!(Dataset::new(inputs, float_labels, 2, "x"), Err(Error::DTypeMismatch { .. })));
    Ok(())
}

#[test]
fn batches_cover_every_index_once() -> Result<()> {
    for shuffle in [false, true] {
        let batches = Batches::new(10, 4, shuffle, 3)?;
        assert_eq!(batches.num_batches(), 3);
        assert_eq!(batches.len(), 3);
        let all: Vec<Vec<u32>> = batches.collect();
        assert_eq!(all.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4, 2]);
        let mut seen: Vec<u32> = all.concat();
        if !shuffle {
            assert_eq!(seen, (0..10).collect::<Vec<u32>>());
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..10).collect::<Vec<u32>>());
    }
    assert_eq!(Batches::new(0, 4, true, 0)?.count(), 0);
    assert_eq!(Batches::new(3, 8, false, 0)?.collect::<Vec<_>>(), vec![vec![0, 1, 2]]);
    assert!(matches!(Batches::new(10, 0, true, 0), Err(Error::InvalidArgument { .. })));
    Ok(())
}

#[test]
fn batches_shuffle_per_seed_and_epoch() -> Result<()> {
    let order =
        |seed, epoch| -> Result<Vec<u32>> { Ok(Batches::epoch(100, 7, true, seed, epoch)?.flatten().collect()) };
    assert_eq!(order(1, 0)?, order(1, 0)?);
    assert_eq!(Batches::new(100, 7, true, 1)?.flatten().collect::<Vec<_>>(), order(1, 0)?);
    assert_ne!(order(1, 0)?, order(1, 1)?);
    assert_ne!(order(1, 0)?, order(2, 0)?);
    // seed + epoch is not what identifies an order.
    assert_ne!(order(1, 1)?, order(2, 0)?);
    assert_ne!(order(1, 0)?, (0..100).collect::<Vec<u32>>());
    Ok(())
}

#[test]
fn idx_raw_and_gzip_read_the_same() -> Result<()> {
    let dir = temp_dir("idx-ok");
    let (images, labels) = tiny_mnist_files();
    // Compression is recognized by content: the gzip file has no .gz suffix and vice versa.
    let raw_images = write(&dir, "images.gz", &images);
    let gz_images = write(&dir, "images", &gzip(&images));
    let flat = read_idx_images(&raw_images)?;
    assert_eq!(flat.dims(), &[3, 4]);
    assert_eq!(flat.to_vec::<f32>()?, (0..12).map(|i| (i * 20) as f32 / 255.0).collect::<Vec<_>>());
    assert_eq!(read_idx_images(&gz_images)?.to_vec::<f32>()?, flat.to_vec::<f32>()?);
    let shaped = read_idx_images_with_shape(&gz_images, ImageShape::Image)?;
    assert_eq!(shaped.dims(), &[3, 1, 2, 2]);
    let labels = read_idx_labels(write(&dir, "labels", &gzip(&labels)))?;
    assert_eq!((labels.dtype(), labels.to_vec1::<u32>()?), (DType::U32, vec![3, 1, 4]));
    Ok(())
}

fn bad_file_message(result: Result<Tensor>) -> String {
    match result {
        Err(Error::BadFile { path, msg }) => format!("{path}: {msg}"),
        Err(other) => panic!("expected Error::BadFile, got {other:?}"),
        Ok(t) => panic!("expected Error::BadFile, got a tensor of shape {:?}", t.dims()),
    }
}

#[test]
fn idx_errors_name_the_file_and_the_problem() {
    let dir = temp_dir("idx-bad");
    let (images, labels) = tiny_mnist_files();
    let cases: Vec<(&str, Vec<u8>, bool, &str)> = vec![
        ("labels-as-images", labels.clone(), true, "bad magic number 0x00000801, expected 0x00000803"),
        ("images-as-labels", images.clone(), false, "bad magic number 0x00000803, expected 0x00000801"),
        ("truncated", images[..images.len() - 1].to_vec(), true, "truncated"),
        ("extra", [images.as_slice(), &[0]].concat(), true, "extra bytes"),
        ("short-header", images[..10].to_vec(), true, "truncated header"),
        ("tiny", vec![0, 0], true, "too short"),
        ("label-10", idx_bytes(0x801, &[2], &[3, 10]), false, "label 10 at index 1"),
        ("truncated-gzip", gzip(&images)[..20].to_vec(), true, "corrupt gzip"),
        ("huge-dims", idx_bytes(0x803, &[u32::MAX, u32::MAX, u32::MAX], &[]), true, "overflow"),
    ];
    for (name, bytes, is_images, expected) in cases {
        let path = write(&dir, name, &bytes);
        let result = if is_images { read_idx_images(&path) } else { read_idx_labels(&path) };
        let msg = bad_file_message(result);
        assert!(msg.contains(expected) && msg.contains(name), "{name}: {msg}");
    }
    let missing = read_idx_images(dir.join("missing"));
    assert!(matches!(missing, Err(Error::Io { .. })), "{missing:?}");
}

#[test]
fn load_mnist_finds_both_spellings() -> Result<()> {
    let dir = temp_dir("load");
    let (images, labels) = tiny_mnist_files();
    write(&dir, "t10k-images-idx3-ubyte.gz", &gzip(&images));
    write(&dir, "t10k-labels-idx1-ubyte", &labels);
    write(&dir, "train-images.idx3-ubyte", &images);
    write(&dir, "train-labels.idx1-ubyte.gz", &gzip(&labels));
    for split in [MnistSplit::Test, MnistSplit::Train] {
        let data = load_mnist(&dir, split)?;
        assert_eq!((data.len(), data.num_classes), (3, 10));
        assert_eq!(data.inputs.dims(), &[3, 4]);
        assert_eq!(data.labels.to_vec1::<u32>()?, vec![3, 1, 4]);
    }
    let shaped = load_mnist_with_shape(&dir, MnistSplit::Test, ImageShape::Image)?;
    assert_eq!(shaped.inputs.dims(), &[3, 1, 2, 2]);
    assert_eq!(shaped.name, "mnist-test");
    Ok(())
}

#[test]
fn load_mnist_errors() {
    let dir = temp_dir("load-bad");
    let err = load_mnist(&dir, MnistSplit::Train).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    for name in ["train-images-idx3-ubyte", "train-images-idx3-ubyte.gz", "train-images.idx3-ubyte"] {
        assert!(msg.contains(name), "{msg}");
    }
    let (images, _) = tiny_mnist_files();
    write(&dir, "t10k-images-idx3-ubyte", &images);
    write(&dir, "t10k-labels-idx1-ubyte", &idx_bytes(0x801, &[2], &[0, 1]));
    let err = load_mnist(&dir, MnistSplit::Test).unwrap_err();
    assert!(
        matches!(&err, Error::BadFile { msg, .. } if msg.contains("2 labels") && msg.contains("3 images")),
        "{err}"
    );
}

#[test]
fn real_mnist_test_split_when_present() -> Result<()> {
    let Some(dir) = rnn_testutil::mnist_dir() else {
        eprintln!("SKIPPED: no MNIST folder (set RNN_MNIST_DIR to a folder with t10k-*-idx*-ubyte[.gz])");
        return Ok(());
    };
    let data = load_mnist(&dir, MnistSplit::Test)?;
    assert_eq!(data.inputs.dims(), &[10_000, 784]);
    let labels = data.labels.to_vec1::<u32>()?;
    // The first test digits of MNIST are 7, 2, 1, 0, 4.
    assert_eq!(&labels[..5], &[7, 2, 1, 0, 4]);
    let mut counts = [0usize; 10];
    labels.iter().for_each(|&l| counts[l as usize] += 1);
    assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    let pixels = data.inputs.to_vec::<f32>()?;
    let max = pixels.iter().cloned().fold(f32::MIN, f32::max);
    assert!(pixels.iter().all(|&p| (0.0..=1.0).contains(&p)) && max == 1.0);
    Ok(())
}

#[test]
fn synthetic_digits_are_balanced_deterministic_images() -> Result<()> {
    let data = synthetic_digits(503, 11)?;
    assert_eq!((data.inputs.dims(), data.num_classes), (&[503, 784][..], 10));
    let labels = data.labels.to_vec1::<u32>()?;
    let mut counts = [0usize; 10];
    labels.iter().for_each(|&l| counts[l as usize] += 1);
    assert!(counts.iter().all(|&c| c == 50 || c == 51), "{counts:?}");
    assert_ne!(&labels[..10], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "labels are shuffled");

    let pixels = data.inputs.to_vec::<f32>()?;
    assert!(pixels.iter().all(|&p| (0.0..=1.0).contains(&p)));
    for image in pixels.chunks(784) {
        // Ink is bright and centered: the intensity-weighted centroid is near pixel 14.
        let (mut mass, mut cx, mut cy) = (0.0f64, 0.0, 0.0);
        for (i, &p) in image.iter().enumerate() {
            let p = f64::from(p);
            (mass, cx, cy) = (mass + p, cx + p * (i % 28) as f64, cy + p * (i / 28) as f64);
        }
        assert!(image.iter().cloned().fold(0.0, f32::max) > 0.7);
        assert!((cx / mass - 13.5).abs() < 2.5 && (cy / mass - 13.5).abs() < 2.5, "{} {}", cx / mass, cy / mass);
    }

    let again = synthetic_digits(503, 11)?;
    assert_eq!(again.inputs.to_vec::<f32>()?, pixels);
    assert_eq!(again.labels.to_vec1::<u32>()?, labels);
    assert_ne!(synthetic_digits(503, 12)?.inputs.to_vec::<f32>()?, pixels);
    let shaped = rnn_train::data::digits::synthetic_digits_with_shape(4, 1, ImageShape::Image)?;
    assert_eq!(shaped.inputs.dims(), &[4, 1, 28, 28]);
    assert!(synthetic_digits(0, 1)?.is_empty());
    Ok(())
}

#[test]
fn render_ascii_draws_one_line_per_row() -> Result<()> {
    let data = synthetic_digits(1, 5)?;
    let text = render_ascii(&data.inputs.to_vec::<f32>()?);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 28);
    assert!(lines.iter().all(|l| l.chars().count() == 28));
    assert!(text.contains('@'));
    assert_eq!(render_ascii(&[0.0, 1.0, 0.5, f32::NAN]), " @\n+ \n");
    assert_eq!(render_ascii(&[1.0, 0.0, 1.0]), "@ @\n");
    Ok(())
}

/// Fraction of `data` that `predict` classifies correctly.
fn accuracy(data: &Dataset, predict: impl Fn(&Tensor) -> Result<Tensor>) -> Result<f64> {
    let predicted = predict(&data.inputs)?.argmax(1)?;
    let hits = predicted.eq(&data.labels.to_dtype(DType::I64)?)?.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?;
    Ok(hits / data.len() as f64)
}

/// Trains `layers` (ReLU between them) with plain SGD; returns held-out accuracy.
fn train_sgd(layers: &[Linear], train: &Dataset, test: &Dataset, epochs: u64, lr: f64) -> Result<f64> {
    let forward = |x: &Tensor| -> Result<Tensor> {
        let mut h = x.clone();
        for (i, layer) in layers.iter().enumerate() {
            h = layer.forward(&h)?;
            if i + 1 < layers.len() {
                h = h.relu()?;
            }
        }
        Ok(h)
    };
    let params: Vec<Tensor> = layers.iter().flat_map(|l| l.parameters()).collect();
    for epoch in 0..epochs {
        for indices in Batches::epoch(train.len(), 32, true, 0, epoch)? {
            let (x, y) = train.batch(&indices)?;
            let grads = cross_entropy(&forward(&x)?, &y)?.backward()?;
            no_grad(|| -> Result<()> {
                for p in &params {
                    let g = grads.get(p).ok_or_else(|| Error::Msg("parameter without a gradient".into()))?;
                    p.assign(&p.sub(&g.mul_scalar(lr)?)?)?;
                }
                Ok(())
            })?;
        }
    }
    no_grad(|| accuracy(test, forward))
}

#[test]
fn synthetic_digits_are_learnable_by_a_small_mlp() -> Result<()> {
    let (train, test) = synthetic_digits(5000, 2024)?.split_at(4000)?;
    let mut vb = VarBuilder::cpu(1);
    let mlp = [Linear::new(784, 64, &mut vb)?, Linear::new(64, 10, &mut vb)?];
    let mlp_acc = train_sgd(&mlp, &train, &test, 5, 0.1)?;
    let linear_acc = train_sgd(&[Linear::new(784, 10, &mut vb)?], &train, &test, 5, 0.1)?;
    eprintln!("held-out accuracy: MLP 784-64-10 {:.1}%, linear {:.1}%", mlp_acc * 100.0, linear_acc * 100.0);
    assert!(mlp_acc > 0.90, "MLP accuracy {mlp_acc}");
    Ok(())
}

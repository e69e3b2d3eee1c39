//! safetensors checkpoints: round trips, damaged files, mismatched models, atomic writes.

use rnn_testutil::temp_dir;
use std::collections::BTreeMap;
use std::path::Path;

use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_nn::{Linear, Module, VarBuilder};
use rnn_train::checkpoint::{self, Checkpoint};

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// One tensor of every dtype, with values that survive the dtype exactly.
fn all_dtypes() -> Result<Vec<(String, Tensor)>> {
    let base = Tensor::from_vec(vec![0.0f64, 1.0, -2.5, 3.0, 100.0, -0.125], (2, 3), Device::Cpu)?;
    let unsigned = Tensor::from_vec(vec![0.0f64, 1.0, 2.5, 3.0, 200.0, 7.0], (3, 2), Device::Cpu)?;
    let mut out = Vec::new();
    for dtype in DType::ALL {
        let source = if dtype.is_float() || dtype == DType::I64 { &base } else { &unsigned };
        out.push((format!("t.{dtype}"), source.to_dtype(dtype)?));
    }
    Ok(out)
}

fn as_f64(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.to_vec::<f64>()
}

#[test]
fn round_trip_every_dtype_and_metadata() -> Result<()> {
    let dir = temp_dir("roundtrip");
    let path = dir.join("model.safetensors");
    let mut tensors = all_dtypes()?;
    // A transposed (non-contiguous) view and a scalar are saved as what they show.
    let matrix = Tensor::from_vec((0..6).map(|v| v as f32).collect::<Vec<_>>(), (2, 3), Device::Cpu)?;
    tensors.push(("view".into(), matrix.t()?));
    tensors.push(("scalar".into(), Tensor::scalar(4.5f32, Device::Cpu)?));
    let metadata = meta(&[("epoch", "7"), ("format", "rnn")]);
    checkpoint::save(&path, &tensors, &metadata)?;

    let ckpt = checkpoint::load(&path)?;
    assert_eq!(ckpt.metadata, metadata);
    let mut names = ckpt.names();
    names.sort_unstable();
    assert_eq!(names, ckpt.names(), "tensors come back sorted by name");
    assert_eq!(names.len(), tensors.len());
    for (name, original) in &tensors {
        let loaded = ckpt.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((loaded.dims(), loaded.dtype(), loaded.device()), (original.dims(), original.dtype(), Device::Cpu));
        assert_eq!(as_f64(loaded)?, as_f64(original)?, "{name}");
    }
    assert_eq!(ckpt.get("view").map(|t| t.to_vec2::<f32>()).transpose()?, Some(matrix.t()?.to_vec2::<f32>()?));
    let no_leftovers = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
    assert_eq!(no_leftovers, 1, "only the checkpoint is left in the directory");
    Ok(())
}

#[test]
fn empty_metadata_and_no_tensors() -> Result<()> {
    let dir = temp_dir("empty");
    let path = dir.join("empty.safetensors");
    checkpoint::save(&path, &[], &BTreeMap::new())?;
    let ckpt = checkpoint::load(&path)?;
    assert!(ckpt.tensors.is_empty() && ckpt.metadata.is_empty());
    Ok(())
}

#[test]
fn python_safetensors_header_layout() -> Result<()> {
    // The first 8 bytes are the little-endian header length, then a JSON header: what
    // every other safetensors reader expects.
    let dir = temp_dir("layout");
    let path = dir.join("m.safetensors");
    let w = Tensor::from_vec(vec![1.0f32, 2.0], 2, Device::Cpu)?;
    checkpoint::save(&path, &[("w".into(), w)], &meta(&[("k", "v")]))?;
    let bytes = std::fs::read(&path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).expect("utf8");
    assert!(header.contains(r#""w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}"#), "{header}");
    assert!(header.contains(r#""__metadata__":{"k":"v"}"#), "{header}");
    assert_eq!(&bytes[8 + n..], [1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat());
    Ok(())
}

#[test]
fn damaged_files_are_bad_files_and_missing_is_io() -> Result<()> {
    let dir = temp_dir("damaged");
    let good = dir.join("good.safetensors");
    checkpoint::save(&good, &all_dtypes()?, &meta(&[("a", "b")]))?;
    let bytes = std::fs::read(&good).expect("read");
    let mut noise = vec![0u8; 4096];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for b in &mut noise {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *b = state as u8;
    }
    let mut bad_dtype = bytes.clone();
    let at = bytes.windows(5).position(|w| w == b"\"F32\"").expect("an F32 entry");
    bad_dtype[at..at + 5].copy_from_slice(b"\"I32\"");
    let cases = [
        ("truncated", bytes[..bytes.len() - 3].to_vec()),
        ("extra", [bytes.as_slice(), &[0u8]].concat()),
        ("header-cut", bytes[..20].to_vec()),
        ("random", noise),
        ("tiny", vec![1, 2, 3]),
        ("i32", bad_dtype),
    ];
    for (name, content) in cases {
        let path = dir.join(name);
        std::fs::write(&path, content).expect("write");
        match checkpoint::load(&path) {
            Err(Error::BadFile { path: p, msg }) => assert!(p.ends_with(name) && !msg.is_empty(), "{name}: {msg}"),
            other => panic!("{name}: expected BadFile, got {other:?}"),
        }
    }
    assert!(matches!(checkpoint::load(dir.join("nope")), Err(Error::Io { .. })));
    Ok(())
}

fn model(seed: u64) -> Result<Vec<(String, Tensor)>> {
    let mut vb = VarBuilder::cpu(seed);
    Ok(rnn_nn::prefixed("fc", Linear::new(4, 3, &mut vb)?.named_parameters()))
}

fn values(targets: &[(String, Tensor)]) -> Result<Vec<Vec<f32>>> {
    targets.iter().map(|(_, t)| t.to_vec::<f32>()).collect()
}

#[test]
fn apply_loads_a_matching_model() -> Result<()> {
    let dir = temp_dir("apply");
    let path = dir.join("m.safetensors");
    let trained = model(1)?;
    checkpoint::save(&path, &trained, &BTreeMap::new())?;
    let fresh = model(2)?;
    assert_ne!(values(&fresh)?, values(&trained)?);
    checkpoint::apply(&fresh, &checkpoint::load(&path)?)?;
    assert_eq!(values(&fresh)?, values(&trained)?);
    // Parameters stay trainable leaves after loading.
    assert!(fresh.iter().all(|(_, t)| t.is_variable()));
    let again = model(3)?;
    checkpoint::load_into(&path, &again)?;
    assert_eq!(values(&again)?, values(&trained)?);
    Ok(())
}

#[test]
fn a_mismatched_checkpoint_leaves_the_model_unchanged() -> Result<()> {
    let dir = temp_dir("mismatch");
    let target = model(5)?;
    let before = values(&target)?;
    let mut vb = VarBuilder::cpu(9);
    let wrong_shape = rnn_nn::prefixed("fc", Linear::new(5, 3, &mut vb)?.named_parameters());
    let renamed: Vec<(String, Tensor)> = model(6)?.into_iter().map(|(n, t)| (n.replace("bias", "b"), t)).collect();
    let wrong_dtype: Vec<(String, Tensor)> =
        model(7)?.into_iter().map(|(n, t)| Ok((n, t.to_dtype(DType::F64)?))).collect::<Result<_>>()?;
    let cases = [
        ("shape", wrong_shape, vec!["'fc.weight' is [3, 5] f32 in the checkpoint but [3, 4] f32"]),
        ("names", renamed, vec!["missing in the checkpoint: fc.bias", "unexpected in the checkpoint: fc.b"]),
        ("dtype", wrong_dtype, vec!["f64 in the checkpoint but [3] f32"]),
    ];
    for (name, tensors, expected) in cases {
        let path = dir.join(name);
        checkpoint::save(&path, &tensors, &BTreeMap::new())?;
        let err = checkpoint::apply(&target, &checkpoint::load(&path)?).unwrap_err();
        for part in &expected {
            assert!(err.to_string().contains(part), "{name}: {err}");
        }
        assert!(matches!(checkpoint::load_into(&path, &target), Err(Error::BadFile { .. })));
        assert_eq!(values(&target)?, before, "{name}: the model changed");
    }
    // A subset is an error too: the bias is not in the checkpoint.
    let partial = Checkpoint { tensors: target[..1].to_vec(), metadata: BTreeMap::new() };
    let err = checkpoint::apply(&target, &partial).unwrap_err();
    assert!(err.to_string().contains("missing in the checkpoint: fc.bias"), "{err}");
    Ok(())
}

#[test]
fn a_failed_save_leaves_nothing_behind() -> Result<()> {
    let dir = temp_dir("atomic");
    let tensors = model(1)?;
    let missing_dir = dir.join("no-such-dir").join("m.safetensors");
    assert!(matches!(checkpoint::save(&missing_dir, &tensors, &BTreeMap::new()), Err(Error::Io { .. })));
    assert!(!missing_dir.exists());

    // Saving over an existing checkpoint replaces it whole.
    let path = dir.join("m.safetensors");
    checkpoint::save(&path, &tensors, &meta(&[("v", "1")]))?;
    let newer = model(2)?;
    checkpoint::save(&path, &newer, &meta(&[("v", "2")]))?;
    let ckpt = checkpoint::load(&path)?;
    assert_eq!(ckpt.metadata["v"], "2");
    assert_eq!(ckpt.get("fc.weight").map(|t| t.to_vec::<f32>()).transpose()?, Some(newer[0].1.to_vec::<f32>()?));

    // A failing save (the destination is a directory) keeps the old file and no temporary.
    let blocked = dir.join("blocked");
    std::fs::create_dir_all(blocked.join("inside")).expect("mkdir");
    assert!(matches!(checkpoint::save(&blocked, &tensors, &BTreeMap::new()), Err(Error::Io { .. })));
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");

    let dup = vec![tensors[0].clone(), tensors[0].clone()];
    assert!(matches!(checkpoint::save(dir.join("dup"), &dup, &BTreeMap::new()), Err(Error::InvalidArgument { .. })));
    assert!(!dir.join("dup").exists());
    Ok(())
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[cfg(unix)]
#[test]
fn saving_through_a_link_replaces_its_target_and_keeps_the_link() -> Result<()> {
    let dir = temp_dir("links");
    let real_dir = dir.join("store");
    std::fs::create_dir_all(&real_dir).expect("mkdir");
    let (real, link) = (real_dir.join("weights.safetensors"), dir.join("latest.safetensors"));
    checkpoint::save(&real, &model(1)?, &meta(&[("v", "1")]))?;
    std::os::unix::fs::symlink("store/weights.safetensors", &link).expect("symlink");
    // A link to a link, and a dangling link (its target is created).
    let chain = dir.join("chain.safetensors");
    std::os::unix::fs::symlink("latest.safetensors", &chain).expect("symlink");
    let dangling = dir.join("dangling.safetensors");
    std::os::unix::fs::symlink("store/new.safetensors", &dangling).expect("symlink");

    checkpoint::save(&chain, &model(2)?, &meta(&[("v", "2")]))?;
    checkpoint::save(&dangling, &model(3)?, &meta(&[("v", "3")]))?;
    for path in [&link, &chain, &dangling] {
        assert!(std::fs::symlink_metadata(path).unwrap().file_type().is_symlink(), "{path:?} is no longer a link");
    }
    assert_eq!(checkpoint::load(&real)?.metadata["v"], "2");
    assert_eq!(checkpoint::load(real_dir.join("new.safetensors"))?.metadata["v"], "3");
    // The temporary files went into the target's folder and are gone.
    assert_eq!(names_in(&real_dir), ["new.safetensors", "weights.safetensors"]);
    Ok(())
}

#[cfg(unix)]
#[test]
fn special_files_are_refused_and_left_as_they_are() {
    use std::os::unix::fs::FileTypeExt;
    let dir = temp_dir("special");
    let fifo = dir.join("pipe.safetensors");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
    assert!(made.success());
    let folder = dir.join("folder.safetensors");
    std::fs::create_dir_all(&folder).expect("mkdir");
    let link_to_fifo = dir.join("to-pipe.safetensors");
    std::os::unix::fs::symlink(&fifo, &link_to_fifo).expect("symlink");
    let tensors = model(1).unwrap();
    for (path, kind) in [(&fifo, "a FIFO"), (&folder, "a folder"), (&link_to_fifo, "a FIFO")] {
        let err = checkpoint::save(path, &tensors, &BTreeMap::new()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Io { .. }) && msg.contains(kind) && msg.contains("not a regular file"), "{msg}");
    }
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::symlink_metadata(&folder).unwrap().is_dir());
    assert!(std::fs::symlink_metadata(&link_to_fifo).unwrap().file_type().is_symlink());
    assert_eq!(names_in(&dir), ["folder.safetensors", "pipe.safetensors", "to-pipe.safetensors"]);
}

#[test]
fn a_save_removes_temporary_files_left_by_a_killed_save() -> Result<()> {
    let dir = temp_dir("stale");
    let path = dir.join("model.safetensors");
    // Process ids above the kernel's largest (2^22) never run.
    let stale = ["model.safetensors.tmp-999999999-0", "model.safetensors.tmp-999999998-17"];
    let kept = [
        format!("model.safetensors.tmp-{}-999", std::process::id()), // this process: may be in use
        "model.safetensors.tmp-notes".to_string(),                   // not a temporary file's form
        "other.safetensors.tmp-999999999-0".to_string(),             // another file's
    ];
    for name in stale.iter().copied().chain(kept.iter().map(String::as_str)) {
        std::fs::write(dir.join(name), b"partial").expect("write");
    }
    checkpoint::save(&path, &model(1)?, &BTreeMap::new())?;
    let mut expected: Vec<String> = kept.to_vec();
    expected.push("model.safetensors".into());
    expected.sort();
    assert_eq!(names_in(&dir), expected);
    Ok(())
}

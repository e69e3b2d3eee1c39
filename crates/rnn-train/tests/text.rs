//! The character-level text dataset (vocabulary, split, windows, sampler, file errors, the
//! built-in corpus) and GPT checkpoints with their vocabulary (round trip, bad files), plus a
//! short `train_gpt` run.

use std::io::Write;

use rnn_core::{DType, Device, Error, Result, Tensor};
use rnn_nn::{Gpt, GptConfig, Module, VarBuilder};
use rnn_testutil::expect_err;
use rnn_testutil::temp_dir;
use rnn_train::data::text::{TextDataset, TextSplit, Vocab, WindowSampler, KJV_GZ};
use rnn_train::{load_gpt, save_gpt, train_gpt, GptTrainConfig};

const CPU: Device = Device::Cpu;

#[test]
fn vocab_encodes_decodes_and_rejects_unknown_characters() -> Result<()> {
    let vocab = Vocab::from_text("hello, wörld");
    assert_eq!(vocab.as_string(), " ,dehlorwö");
    let ids = vocab.encode("wörld")?;
    assert_eq!(ids, vec![8, 9, 7, 5, 2]);
    assert_eq!(vocab.decode(&ids)?, "wörld");
    expect_err(vocab.encode("hex"), "character 'x' (at char 2) is not in the model's vocabulary");
    expect_err(vocab.decode(&[10]), "id 10 is outside the vocabulary");
    assert_eq!(Vocab::from_chars(&vocab.as_string())?, vocab);
    expect_err(Vocab::from_chars("ba"), "sorted, distinct");
    expect_err(Vocab::from_chars(""), "non-empty");
    Ok(())
}

#[test]
fn text_splits_ninety_ten_and_windows_shift_by_one() -> Result<()> {
    let text = "abcdefghij".repeat(10); // 100 characters
    let data = TextDataset::from_text(&text, "letters", 4)?;
    assert_eq!((data.train.len(), data.val.len(), data.vocab.len()), (90, 10, 10));
    assert_eq!(data.vocab.decode(&data.val)?, "abcdefghij");
    let (x, y) = data.windows(TextSplit::Train, &[0, 13], 4, CPU)?;
    assert_eq!(x.to_vec::<u32>()?, vec![0, 1, 2, 3, 3, 4, 5, 6]);
    assert_eq!(y.to_vec::<u32>()?, vec![1, 2, 3, 4, 4, 5, 6, 7]);
    expect_err(data.windows(TextSplit::Validation, &[6], 4, CPU), "runs past");
    assert_eq!(data.val_starts(4, 100), vec![0, 4]);
    assert_eq!(data.val_starts(3, 2), vec![0, 3]);
    Ok(())
}

#[test]
fn window_sampler_is_splitmix64() -> Result<()> {
    // The first outputs of splitmix64 seeded with 1234567 (its published test values).
    let mut sampler = WindowSampler::new(1234567);
    assert_eq!(sampler.next_u64(), 6457827717110365317);
    assert_eq!(sampler.next_u64(), 3203168211198807973);
    let mut sampler = WindowSampler::new(1234567);
    assert_eq!(sampler.next_start(1000), (6457827717110365317u64 % 1000) as usize);
    // Random batches stay inside the training text and depend only on the seed.
    let data = TextDataset::from_text(&"the quick brown fox. ".repeat(20), "fox", 8)?;
    let batch = |seed| data.random_batch(&mut WindowSampler::new(seed), 16, 8, CPU);
    let (a, b) = (batch(3)?, batch(3)?);
    assert_eq!(a.0.to_vec::<u32>()?, b.0.to_vec::<u32>()?);
    assert_ne!(a.0.to_vec::<u32>()?, batch(4)?.0.to_vec::<u32>()?);
    assert_eq!(a.0.dims(), &[16, 8]);
    Ok(())
}

#[test]
fn bad_text_files_are_clear_errors() -> Result<()> {
    let dir = temp_dir("text-errors");
    let missing = TextDataset::load(dir.join("nope.txt"), 8);
    assert!(matches!(missing, Err(Error::Io { .. })), "{missing:?}");
    let write = |name: &str, bytes: &[u8]| -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        path
    };
    expect_err(TextDataset::load(write("empty.txt", b""), 8), "the text is empty");
    expect_err(
        TextDataset::load(write("latin1.txt", b"caf\xe9 au lait"), 2),
        "not UTF-8 text: invalid byte sequence at byte 3",
    );
    expect_err(TextDataset::load(write("short.txt", &[b'a'; 50]), 8), "must be longer than the context length 8");
    expect_err(TextDataset::load(write("bad.gz", &[0x1f, 0x8b, 1, 2, 3]), 8), "corrupt gzip");
    expect_err(TextDataset::from_text("abc", "x", 0), "at least 1");
    // A gzip file reads like the raw text.
    let text = "It was the best of times, it was the worst of times. ".repeat(5);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).expect("gzip");
    let from_gz = TextDataset::load(write("dickens.txt.gz", &gz.finish().expect("gzip")), 16)?;
    let from_raw = TextDataset::load(write("dickens.txt", text.as_bytes()), 16)?;
    assert_eq!((from_gz.train, from_gz.vocab), (from_raw.train, from_raw.vocab));
    assert_eq!(from_raw.name, "dickens.txt");
    Ok(())
}

#[test]
fn builtin_corpus_is_over_a_megabyte_of_english() -> Result<()> {
    assert!(KJV_GZ.len() > 1_000_000);
    let data = TextDataset::builtin(64)?;
    assert!(data.train.len() + data.val.len() > 4_000_000);
    assert!((60..100).contains(&data.vocab.len()), "vocab {}", data.vocab.as_string());
    let start = data.vocab.decode(&data.train[..100])?;
    assert!(start.contains("In the beginning God created the heaven and the earth."), "{start}");
    Ok(())
}

fn tiny_config(vocab: usize) -> GptConfig {
    GptConfig { vocab_size: vocab, context_length: 8, d_model: 16, num_heads: 2, num_layers: 1, dropout: 0.0 }
}

#[test]
fn gpt_checkpoint_round_trip_with_vocab() -> Result<()> {
    let dir = temp_dir("gpt-ckpt");
    let vocab = Vocab::from_text("abcdef");
    let model = Gpt::new(tiny_config(6), &mut VarBuilder::cpu(3))?;
    let path = dir.join("gpt.safetensors");
    save_gpt(&path, &model, &vocab)?;
    let (loaded, loaded_vocab) = load_gpt(&path, CPU)?;
    assert_eq!((loaded.config(), &loaded_vocab), (model.config(), &vocab));
    let ids = Tensor::from_vec(vec![0u32, 5, 2, 3], (1, 4), CPU)?;
    assert_eq!(model.forward(&ids)?.to_vec::<f32>()?, loaded.forward(&ids)?.to_vec::<f32>()?);
    assert_eq!(loaded.token_embedding().dtype(), DType::F32);

    expect_err(save_gpt(dir.join("x"), &model, &Vocab::from_text("abc")), "vocabulary of 3 characters");
    assert!(matches!(load_gpt(dir.join("missing.safetensors"), CPU), Err(Error::Io { .. })));
    std::fs::write(dir.join("corrupt.safetensors"), b"\x10\0\0\0\0\0\0\0{not json").expect("write");
    expect_err(load_gpt(dir.join("corrupt.safetensors"), CPU), "not a valid safetensors file");
    let plain = dir.join("plain.safetensors");
    rnn_train::checkpoint::save(&plain, &model.named_parameters(), &Default::default())?;
    expect_err(load_gpt(&plain, CPU), "not a GPT checkpoint");
    Ok(())
}

#[test]
fn train_gpt_lowers_the_validation_loss() -> Result<()> {
    let data = TextDataset::from_text(&"to be or not to be, that is the question. ".repeat(30), "hamlet", 8)?;
    let mut model = Gpt::new(tiny_config(data.vocab.len()), &mut VarBuilder::cpu(1))?;
    let mut config = GptTrainConfig { steps: 40, batch_size: 8, context: 8, eval_every: 20, ..Default::default() };
    config.optimizer.lr = 1e-2;
    let mut reports = 0;
    let history = train_gpt(&mut model, &data, &config, |_, _| {
        reports += 1;
        Ok(())
    })?;
    assert_eq!((reports, history.len()), (2, 2));
    let initial = (data.vocab.len() as f64).ln();
    assert!(history[1].val_loss < 0.6 * initial, "val loss {:?} vs ln(vocab) {initial}", history);
    assert!(history.iter().all(|p| p.train_loss.is_finite() && p.step_seconds > 0.0));
    config.context = 9;
    expect_err(train_gpt(&mut model, &data, &config, |_, _| Ok(())), "context 9 must be in 1..=8");
    Ok(())
}

#[test]
fn a_diverging_gpt_run_stops_with_an_error_and_its_weights_are_not_saved() -> Result<()> {
    let data = TextDataset::from_text(&"to be or not to be, that is the question. ".repeat(30), "hamlet", 8)?;
    let mut model = Gpt::new(tiny_config(data.vocab.len()), &mut VarBuilder::cpu(1))?;
    let mut config = GptTrainConfig { steps: 6, batch_size: 4, context: 8, eval_every: 3, ..Default::default() };
    (config.optimizer.lr, config.clip_norm) = (1e30, 0.0);
    let mut reports = 0;
    let result = train_gpt(&mut model, &data, &config, |_, _| {
        reports += 1;
        Ok(())
    });
    expect_err(result, "training diverged");
    assert_eq!(reports, 0, "no report (and so no sample or checkpoint) after a non-finite loss");
    let dir = temp_dir("gpt-diverged");
    expect_err(save_gpt(dir.join("gpt.safetensors"), &model, &data.vocab), "NaN or infinite");
    assert!(!dir.join("gpt.safetensors").exists());
    Ok(())
}

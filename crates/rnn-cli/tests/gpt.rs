//! `rnn train --model gpt` and `rnn generate`, end to end with the built binary, on a tiny
//! model and a short text.

use std::path::PathBuf;
use std::process::{Command, Output};

fn rnn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rnn")).args(args).output().expect("cannot run the rnn binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

const TINY: [&str; 14] = [
    "--steps",
    "30",
    "--eval-every",
    "15",
    "--sample-every",
    "30",
    "--sample-chars",
    "20",
    "--d-model",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
];

#[test]
fn train_gpt_then_generate() {
    let dir = temp_dir("gpt-train");
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, "the cat sat on the mat. the dog sat on the log. ".repeat(40)).expect("write");
    let out = dir.join("out");
    let data = format!("text:{}", corpus.display());
    let mut args = vec!["train", "--model", "gpt", "--data", &data, "--device", "cpu", "--context", "16"];
    args.extend(["--batch-size", "8", "--save-init", "--out", out.to_str().unwrap()]);
    args.extend(TINY);
    let run = rnn(&args);
    let stdout = text(&run.stdout);
    assert!(run.status.success(), "train failed: {stdout}\n{}", text(&run.stderr));
    for needle in ["vocabulary 14", "step     15/30", "val loss", "--- sample at step 30 ---", "final:"] {
        assert!(stdout.contains(needle), "'{needle}' missing from:\n{stdout}");
    }
    for file in ["model.safetensors", "init.safetensors", "history.json"] {
        assert!(out.join(file).exists(), "{file} not written");
    }
    let history: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("history.json")).unwrap()).unwrap();
    assert_eq!(history["step"], serde_json::json!([15, 30]));

    let ckpt = out.join("model.safetensors");
    let ckpt = ckpt.to_str().unwrap();
    let greedy = ["generate", "--checkpoint", ckpt, "--prompt", "the ", "--max-tokens", "12", "--top-k", "1"];
    let (a, b) = (rnn(&greedy), rnn(&[&greedy[..], &["--seed", "7"]].concat()));
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(text(&a.stdout), text(&b.stdout), "top-k 1 is deterministic");
    let sample = text(&a.stdout);
    let sample = sample.strip_suffix('\n').unwrap_or(&sample);
    assert!(sample.starts_with("the ") && sample.chars().count() == 16, "{sample:?}");

    let fails = |extra: &[&str], needle: &str| {
        let run = rnn(&[&["generate", "--checkpoint", ckpt], extra].concat());
        assert!(!run.status.success() && text(&run.stderr).contains(needle), "{needle}: {}", text(&run.stderr));
    };
    fails(&["--prompt", "the cow"], "character 'w' (at char 6) is not in the model's vocabulary");
    fails(&["--temperature", "0"], "temperature must be > 0");
    fails(&["--temperature", "-1"], "temperature must be > 0 and finite, got -1");
    fails(&["--top-k", "0"], "top_k must be at least 1");
    fails(&["--prompt", ""], "at least one token");
}

#[test]
fn gpt_bad_inputs_are_clean_errors() {
    let dir = temp_dir("gpt-errors");
    let missing = dir.join("missing.safetensors");
    let run = rnn(&["generate", "--checkpoint", missing.to_str().unwrap()]);
    assert!(!run.status.success() && text(&run.stderr).contains("missing.safetensors"), "{}", text(&run.stderr));
    let corrupt = dir.join("corrupt.safetensors");
    std::fs::write(&corrupt, b"not a checkpoint").unwrap();
    let run = rnn(&["generate", "--checkpoint", corrupt.to_str().unwrap()]);
    assert!(text(&run.stderr).contains("not a valid safetensors file"), "{}", text(&run.stderr));
    let train =
        |data: &str| rnn(&[&["train", "--model", "gpt", "--data", data, "--device", "cpu"], &TINY[..]].concat());
    let run = train("builtin");
    assert!(text(&run.stderr).contains("needs --data text:<file>"), "{}", text(&run.stderr));
    let short = dir.join("short.txt");
    std::fs::write(&short, "tiny").unwrap();
    let run = train(&format!("text:{}", short.display()));
    assert!(text(&run.stderr).contains("longer than the context length 64"), "{}", text(&run.stderr));
    let run = train(&format!("text:{}", dir.join("nope.txt").display()));
    assert!(!run.status.success() && text(&run.stderr).contains("nope.txt"), "{}", text(&run.stderr));
    assert!(!text(&run.stderr).contains("panicked"));

    // Sizes whose training state cannot fit in memory are refused before allocating it.
    let long = dir.join("long.txt");
    std::fs::write(&long, "the cat sat on the mat. ".repeat(100)).unwrap();
    let (data, out) = (format!("text:{}", long.display()), dir.join("out"));
    for flag in ["--layers", "--d-model", "--batch-size"] {
        let args = ["train", "--model", "gpt", "--data", &data, "--steps", "1", "--out", out.to_str().unwrap()];
        let run = rnn(&[&args[..], &[flag, "1099511627776"]].concat());
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{flag}: {stderr}");
        assert!(stderr.contains(&format!("{flag} 1099511627776")) && stderr.contains("needs at least"), "{stderr}");
        assert!(!out.exists(), "{flag}: the failed run left {}", out.display());
    }
}

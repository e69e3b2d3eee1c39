//! Runs the built `rnn` binary end to end.

use std::path::PathBuf;
use std::process::{Command, Output};

const WORKLOADS: [&str; 33] = [
    "matmul_f32_256",
    "matmul_f32_512",
    "matmul_f32_1024",
    "matmul_f32_2048",
    "matmul_bf16_256",
    "matmul_bf16_512",
    "matmul_bf16_1024",
    "matmul_bf16_2048",
    "matmul_f16_256",
    "matmul_f16_512",
    "matmul_f16_1024",
    "matmul_f16_2048",
    "unary_relu_16M",
    "unary_exp_16M",
    "unary_tanh_16M",
    "unary_gelu_16M",
    "binary_add_16M",
    "binary_mul_16M",
    "softmax_16M",
    "sum_16M",
    "mlp_784_512_256_10_b128",
    "mlp_784_512_256_10_b128_bf16",
    "mlp_784_512_256_10_b128_floor",
    "mlp_784_512_256_10_b128_vs_floor",
    "mlp_784_512_256_10_b128_products_vs_floor",
    "layer_norm_fused_8192x1024",
    "layer_norm_composed_8192x1024",
    "rms_norm_fused_8192x1024",
    "rms_norm_composed_8192x1024",
    "bias_gelu_fused_8192x1024",
    "bias_gelu_composed_8192x1024",
    "cross_entropy_fused_2048x8192",
    "cross_entropy_composed_2048x8192",
];

fn rnn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rnn")).args(args).output().expect("cannot run the rnn binary")
}

/// `rnn args` with `RNN_GPU_DEVICE` set to `gpu_device`.
fn rnn_with_device_env(args: &[&str], gpu_device: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rnn"));
    command.args(args).env("RNN_GPU_DEVICE", gpu_device);
    command.output().expect("cannot run the rnn binary")
}

/// Asserts that `out` is a clean failure (exit code 1, no panic, no abort) whose stderr
/// contains every one of `expected`.
fn assert_clean_error(out: &Output, expected: &[&str], context: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{context}: {stderr}");
    assert!(stderr.starts_with("error:") && !stderr.contains("panicked"), "{context}: {stderr}");
    for part in expected {
        assert!(stderr.contains(part), "{context}: '{part}' not in {stderr}");
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn quick_cpu_bench_writes_every_workload() {
    let json_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-cpu-{}.json", std::process::id()));
    let out = rnn(&["bench", "cpu", "--quick", "--json", json_path.to_str().unwrap()]);
    assert!(out.status.success(), "bench failed: {}\n{}", text(&out.stdout), text(&out.stderr));

    let records: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    std::fs::remove_file(&json_path).ok();
    assert_eq!(records.len(), WORKLOADS.len(), "{records:?}");
    for name in WORKLOADS {
        let r = records.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name} missing"));
        let value = r["value"].as_f64().unwrap();
        assert!(value.is_finite() && value > 0.0, "{name}: value {value}");
        assert_eq!(r["suite"], "cpu");
        // Times and ratios to a floor are better low.
        assert_eq!(r["higher_is_better"], r["metric"] != "ms" && r["metric"] != "x", "{name}");
        assert!(r["threads"].as_u64().unwrap() >= 1);
        // The floor records are printed on the step's summary line, after "floor".
        let floor_suffixes = ["_products_vs_floor", "_vs_floor", "_floor"];
        let printed = floor_suffixes.iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        assert!(text(&out.stdout).contains(printed), "{name} not printed");
    }
}

#[test]
fn devices_lists_the_cpu() {
    let out = rnn(&["devices"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).to_lowercase().contains("cpu"), "{}", text(&out.stdout));
}

fn temp_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()))
}

#[test]
fn train_writes_curves_checkpoint_and_history() {
    let out_dir = temp_dir("train-out");
    std::fs::remove_dir_all(&out_dir).ok();
    std::fs::create_dir_all(&out_dir).unwrap();
    // history.json is a link, which must stay one; a temporary file of a killed save of the
    // checkpoint (a process id above the kernel's largest) must be cleaned up.
    let linked_history = out_dir.join("kept-history.json");
    std::os::unix::fs::symlink("kept-history.json", out_dir.join("history.json")).unwrap();
    let stale = out_dir.join("model.safetensors.tmp-999999999-0");
    std::fs::write(&stale, b"partial").unwrap();
    let out = rnn(&["train", "--samples", "600", "--epochs", "2", "--quiet", "--out", out_dir.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("device: cpu"), "{stdout}");
    let accuracy_line = stdout.lines().find(|l| l.starts_with("test accuracy:")).expect("no accuracy line");
    let accuracy: f64 = accuracy_line["test accuracy:".len()..].trim().split('%').next().unwrap().parse().unwrap();
    assert!(accuracy > 50.0, "{accuracy_line}");
    let svg = std::fs::read_to_string(out_dir.join("curves.svg")).unwrap();
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "not an SVG");
    let history: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("history.json")).unwrap()).unwrap();
    assert_eq!(history["train_loss"].as_array().unwrap().len(), 2);
    assert!(std::fs::metadata(out_dir.join("model.safetensors")).unwrap().len() > 535_818 * 4);
    assert!(std::fs::symlink_metadata(out_dir.join("history.json")).unwrap().file_type().is_symlink());
    assert!(std::fs::read_to_string(&linked_history).unwrap().contains("train_loss"));
    assert!(!stale.exists(), "the stale temporary file is still there");
    std::fs::remove_dir_all(&out_dir).ok();
}

#[test]
fn train_in_bf16_prints_the_precision_and_learns() {
    let out_dir = temp_dir("train-bf16");
    std::fs::remove_dir_all(&out_dir).ok();
    let dir = out_dir.to_str().unwrap();
    let out = rnn(&["train", "--samples", "600", "--epochs", "2", "--precision", "bf16", "--quiet", "--out", dir]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("precision: bf16"), "{stdout}");
    let accuracy_line = stdout.lines().find(|l| l.starts_with("test accuracy:")).expect("no accuracy line");
    let accuracy: f64 = accuracy_line["test accuracy:".len()..].trim().split('%').next().unwrap().parse().unwrap();
    assert!(accuracy > 50.0, "{accuracy_line}");
    std::fs::remove_dir_all(&out_dir).ok();
}

#[test]
fn a_diverging_run_fails_and_writes_no_checkpoint() {
    let out_dir = temp_dir("train-diverged");
    std::fs::remove_dir_all(&out_dir).ok();
    let dir = out_dir.to_str().unwrap();
    let out = rnn(&["train", "--samples", "200", "--epochs", "2", "--lr", "1e30", "--quiet", "--out", dir]);
    assert_clean_error(&out, &["training diverged", "epoch 1"], "--lr 1e30");
    assert!(!out_dir.join("model.safetensors").exists(), "a diverged run wrote a checkpoint");
    std::fs::remove_dir_all(&out_dir).ok();
}

#[test]
fn train_reports_bad_arguments_cleanly() {
    for (args, expected) in [
        (vec!["train", "--data", "imagenet"], "unknown --data"),
        (vec!["train", "--data", "mnist:/nonexistent-mnist-dir"], "nonexistent-mnist-dir"),
        (vec!["train", "--device", "tpu:0"], "unknown device"),
        (vec!["train", "--batch-size", "0", "--samples", "100"], "batch_size"),
        (vec!["train", "--device", "cpu:3"], "one CPU device"),
        (vec!["train", "--samples", "18446744073709551615"], "--samples 18446744073709551615"),
        (vec!["train", "--samples", "1099511627776"], "--samples 1099511627776"),
        (vec!["bench", "cpu", "--quick", "--threads", "100000"], "--threads"),
        (vec!["bench", "cpu", "--quick", "--threads", "0"], "--threads"),
        (vec!["train", "--precision", "fp8", "--samples", "100"], "unknown precision"),
        // A negative number is a value, checked like any other.
        (vec!["train", "--lr", "-1", "--samples", "100"], "learning_rate must be a positive number, got -1"),
    ] {
        let out = rnn(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn quick_train_bench_writes_both_models() {
    let json_path = temp_dir("bench-train").with_extension("json");
    let out = rnn(&["bench", "train", "--quick", "--json", json_path.to_str().unwrap()]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let records: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    std::fs::remove_file(&json_path).ok();
    let names: Vec<&str> = records.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(names[0].starts_with("train_mlp_") && names[1].starts_with("train_cnn_"), "{names:?}");
    assert!(records.iter().all(|r| r["value"].as_f64().unwrap() > 0.0 && r["suite"] == "train"));
}

#[test]
fn json_write_failure_is_a_clean_error() {
    let out = rnn(&["bench", "cpu", "--quick", "--json", "/nonexistent-dir/x.json"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("error:") && !stderr.contains("panicked"), "{stderr}");
}

/// An IDX file: the magic word, the dims, then the bytes.
fn idx(magic: u32, dims: &[u32], body: &[u8]) -> Vec<u8> {
    let words = std::iter::once(magic).chain(dims.iter().copied());
    words.flat_map(u32::to_be_bytes).chain(body.iter().copied()).collect()
}

/// `n` 28x28 images (a bright column whose position is the label) and their labels.
fn tiny_mnist(n: u32) -> (Vec<u8>, Vec<u8>) {
    let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
    let pixels: Vec<u8> = labels
        .iter()
        .flat_map(|&l| (0..784).map(move |p| if p % 28 == 3 + 2 * l as usize { 255 } else { 0 }))
        .collect();
    (idx(0x803, &[n, 28, 28], &pixels), idx(0x801, &[n], &labels))
}

#[test]
fn mnist_falls_back_to_the_test_files_only_when_the_train_files_are_absent() {
    let dir = temp_dir("mnist-fallback");
    std::fs::create_dir_all(&dir).unwrap();
    let (images, labels) = tiny_mnist(30);
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), &images).unwrap();
    std::fs::write(dir.join("t10k-labels-idx1-ubyte"), &labels).unwrap();
    let (data, out_dir) = (format!("mnist:{}", dir.display()), dir.join("out"));
    let args = ["train", "--data", &data, "--epochs", "1", "--quiet", "--out", out_dir.to_str().unwrap()];
    let out = rnn(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("mnist-test (24 training, 6 test samples)"), "{}", text(&out.stdout));

    // A train images file that is there but corrupt is an error naming it, not a fallback.
    std::fs::write(dir.join("train-labels-idx1-ubyte"), &labels).unwrap();
    let corrupt = dir.join("train-images-idx3-ubyte");
    std::fs::write(&corrupt, &images[..images.len() / 2]).unwrap();
    assert_clean_error(&rnn(&args), &["train-images-idx3-ubyte", "truncated"], "truncated train images");
    std::fs::write(&corrupt, &labels).unwrap();
    assert_clean_error(&rnn(&args), &["train-images-idx3-ubyte", "bad magic"], "labels as images");
    // Only one of the two train files: the missing one is named.
    std::fs::remove_file(&corrupt).unwrap();
    assert_clean_error(&rnn(&args), &["no MNIST train images file"], "train labels only");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_bad_out_folder_is_found_before_training_and_a_failed_run_leaves_none() {
    let dir = temp_dir("bad-out");
    std::fs::create_dir_all(&dir).unwrap();
    // The checkpoint's name is taken by a folder, which must not be replaced after training.
    let taken = dir.join("taken");
    std::fs::create_dir_all(taken.join("model.safetensors")).unwrap();
    let out = rnn(&["train", "--samples", "100", "--epochs", "1", "--out", taken.to_str().unwrap()]);
    assert_clean_error(&out, &["model.safetensors", "a folder", "not a regular file"], "taken name");
    assert!(!text(&out.stdout).contains("data:"), "the data was loaded first: {}", text(&out.stdout));
    assert!(taken.join("model.safetensors").is_dir());

    // A folder inside a file cannot be created.
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = rnn(&["train", "--samples", "100", "--out", file.join("out").to_str().unwrap()]);
    assert_clean_error(&out, &["--out", "a-file"], "out under a file");

    // Argument errors found later leave no new folder behind (nor its new parents).
    let fresh = dir.join("new-parent");
    for args in [["--batch-size", "0"], ["--data", "mnist:/nonexistent-mnist-dir"], ["--model", "gpt"]] {
        let out_dir = fresh.join("out");
        let out = rnn(&[&["train", "--samples", "100", "--out", out_dir.to_str().unwrap()], &args[..]].concat());
        assert_clean_error(&out, &[], &format!("{args:?}"));
        assert!(!fresh.exists(), "{args:?} left {} behind", fresh.display());
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_empty_gpu_device_variable_is_unset_and_devices_fails_on_errors() {
    let out = rnn_with_device_env(&["devices"], "");
    let stdout = text(&out.stdout);
    assert!(out.status.success() && !stdout.contains("error"), "{stdout}\n{}", text(&out.stderr));
    let out = rnn_with_device_env(&["devices"], "cpu");
    assert!(out.status.success() && text(&out.stdout).contains("best device: cpu"), "{}", text(&out.stdout));
    for bad in ["cuda:7", "cpu:3", "tpu"] {
        let out = rnn_with_device_env(&["devices"], bad);
        assert_eq!(out.status.code(), Some(1), "RNN_GPU_DEVICE={bad}: {}", text(&out.stdout));
        assert!(text(&out.stdout).contains("best device: error"), "{}", text(&out.stdout));
    }
}

/// `rnn bench attention --rss` takes peak memory as its PyTorch twin does (resident-set
/// growth, buffers above 64 KiB mapped): rows named attnrss_*, a forward at N = 512 growing
/// it by at least its 4.19 MB output; on a GPU the flag is a clean error.
#[test]
fn attention_bench_rss_counts_the_output() {
    let json_path = temp_dir("bench-attention-rss").with_extension("json");
    let json = json_path.to_str().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_rnn"));
    command.args(["bench", "attention", "--quick", "--rss", "--lengths", "512", "--json", json]);
    let out = command.env("MALLOC_MMAP_THRESHOLD_", "65536").output().expect("cannot run the rnn binary");
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let records: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    std::fs::remove_file(&json_path).ok();
    let mb = |name: &str| records.iter().find(|r| r["name"] == name).and_then(|r| r["value"].as_f64());
    let output_mb = (4 * 8 * 512 * 64 * 4) as f64 / 1e6;
    let forward = mb("attnrss_fwd_n512").expect("an attnrss_fwd_n512 record");
    assert!(forward >= output_mb - 0.01, "resident growth {forward} MB below the {output_mb} MB output");
    assert!(mb("attnmem_fwd_n512").is_none(), "--rss also wrote heap-count rows");
    let out = rnn(&["bench", "attention", "--quick", "--rss", "--device", "cuda:0"]);
    assert_clean_error(&out, &["--rss"], "bench attention --rss --device cuda:0");
}

/// The GPU attention benchmark names its records as its PyTorch twin does
/// (`bench/attention_gpu_bench.py`); on lavapipe when CI provides it, at lengths a software
/// adapter runs in seconds. Without a GPU, asking for CUDA is a clean error. On the CPU,
/// `--lengths` picks the rows' sequence lengths (the GPT shape's row always runs).
#[test]
fn gpu_attention_bench_matches_its_twin_or_fails_cleanly() {
    let out = rnn(&["bench", "attention", "--quick", "--device", "cuda:0"]);
    if !out.status.success() {
        assert_clean_error(&out, &["cuda"], "bench attention --device cuda:0");
    }
    let out = rnn(&["bench", "attention", "--quick", "--lengths", "16"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let stdout = text(&out.stdout);
    let rows: Vec<&str> = stdout.lines().filter_map(|l| l.split_whitespace().next()).collect();
    for name in ["attn_fwd_n16", "attn_fwdbwd_n16_causal", "attn_fwd_gpt_b32h4n64d32_causal"] {
        assert!(rows.contains(&name), "no row {name} in {rows:?}");
    }
    assert!(!rows.iter().any(|r| r.contains("n256")), "--lengths 16 also ran N = 256: {rows:?}");
    let out = rnn(&["bench", "attention", "--quick", "--lengths", "0"]);
    assert_clean_error(&out, &["--lengths"], "bench attention --lengths 0");
    if !std::env::var("RNN_REQUIRE_GPU").is_ok_and(|v| v.contains("wgpu")) {
        eprintln!("skipped the wgpu run: RNN_REQUIRE_GPU does not name wgpu");
        return;
    }
    let json_path = temp_dir("bench-attention-gpu").with_extension("json");
    let json = json_path.to_str().unwrap();
    let out = rnn(&["bench", "attention", "--quick", "--device", "wgpu:0", "--lengths", "16,40", "--json", json]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let records: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    std::fs::remove_file(&json_path).ok();
    let mut want = Vec::new();
    for d in [64, 128] {
        for n in [16, 40] {
            for mask in ["full", "causal"] {
                want.extend(["fwd", "bwd"].map(|pass| format!("attention_{pass}_n{n}_d{d}_{mask}")));
            }
        }
    }
    let names: Vec<&str> = records.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, want);
    assert!(records.iter().all(|r| r["value"].as_f64().unwrap() > 0.0 && r["metric"] == "TFLOP/s"));
}

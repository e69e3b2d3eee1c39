//! Runs the built `rnn` binary end to end.

use std::path::PathBuf;
use std::process::{Command, Output};

const WORKLOADS: [&str; 17] = [
    "matmul_f32_256",
    "matmul_f32_512",
    "matmul_f32_1024",
    "matmul_f32_2048",
    "unary_relu_16M",
    "unary_exp_16M",
    "unary_tanh_16M",
    "unary_gelu_16M",
    "binary_add_16M",
    "binary_mul_16M",
    "softmax_16M",
    "sum_16M",
    "mlp_784_512_256_10_b128",
    "layer_norm_fused_8192x1024",
    "layer_norm_composed_8192x1024",
    "cross_entropy_fused_2048x8192",
    "cross_entropy_composed_2048x8192",
];

fn rnn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rnn")).args(args).output().expect("cannot run the rnn binary")
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
        assert_eq!(r["higher_is_better"], r["metric"] != "ms", "{name}");
        assert!(r["threads"].as_u64().unwrap() >= 1);
        assert!(text(&out.stdout).contains(name), "{name} not printed");
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
    std::fs::remove_dir_all(&out_dir).ok();
}

#[test]
fn train_reports_bad_arguments_cleanly() {
    for (args, expected) in [
        (vec!["train", "--data", "imagenet"], "unknown --data"),
        (vec!["train", "--data", "mnist:/nonexistent-mnist-dir"], "nonexistent-mnist-dir"),
        (vec!["train", "--device", "tpu:0"], "unknown device"),
        (vec!["train", "--batch-size", "0", "--samples", "100"], "batch_size"),
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

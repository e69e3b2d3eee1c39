//! Runs the built `rnn` binary end to end.

use std::path::PathBuf;
use std::process::{Command, Output};

const WORKLOADS: [&str; 13] = [
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

#[test]
fn train_says_it_is_not_available() {
    let out = rnn(&["train", "--epochs", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not available"), "{}", text(&out.stderr));
}

#[test]
fn json_write_failure_is_a_clean_error() {
    let out = rnn(&["bench", "cpu", "--quick", "--json", "/nonexistent-dir/x.json"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("error:") && !stderr.contains("panicked"), "{stderr}");
}

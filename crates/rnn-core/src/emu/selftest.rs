//! The shim's own test, `shim/selftest.cpp` (kernels written for it, the error cases, exact
//! 16-bit conversions), built as a program with the emulator's compiler and flags, and run.
//!
//! `cargo test -p rnn-core --features cuda-emu --lib emu::selftest`

use std::path::PathBuf;
use std::process::{Command, Output};

use super::compile::{self, FLAGS};

const SELFTEST: &str = include_str!("shim/selftest.cpp");

#[test]
fn shim_selftest_passes() {
    let dir = scratch_dir();
    compile::write_shim(&dir).unwrap_or_else(|e| panic!("writing the shim: {e}"));
    let cpp = dir.join("selftest.cpp");
    std::fs::write(&cpp, SELFTEST).unwrap_or_else(|e| panic!("{}: {e}", cpp.display()));
    let exe = dir.join("selftest");
    let mut cxx = Command::new(compile::compiler());
    cxx.args(program_flags()).arg("-I").arg(&dir).arg("-o").arg(&exe).arg(&cpp);
    let built = run(&mut cxx);
    assert!(built.status.success(), "selftest.cpp failed to compile (in {}):\n{}", dir.display(), text(&built));
    let ran = run(&mut Command::new(&exe));
    assert!(ran.status.success(), "selftest failed ({}, kept in {}):\n{}", ran.status, dir.display(), text(&ran));
    print!("{}", String::from_utf8_lossy(&ran.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The emulator's flags for a program rather than a shared library.
fn program_flags() -> impl Iterator<Item = &'static str> {
    FLAGS.iter().copied().filter(|f| !matches!(*f, "-shared" | "-fPIC"))
}

/// A fresh folder of this process in the system's temporary folder.
fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rnn-emu-selftest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir); // kept by a failed run of a process with this id
    dir
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {:?}: {e}", cmd.get_program()))
}

/// stdout then stderr, for a failure message.
fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

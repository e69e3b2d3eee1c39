//! Folders tests write to or read from.

use std::path::{Path, PathBuf};

/// A fresh directory under the system temp dir, unique to this process and name, removed
/// when dropped.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A new empty [`TempDir`] for `name` (unique within the test binary's process).
pub fn temp_dir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("rnn-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    TempDir(dir)
}

/// The real MNIST IDX folder: `$RNN_MNIST_DIR`, else `data/mnist` or `../shared/data/mnist`
/// relative to the workspace; None when none exists (tests then skip with a message).
pub fn mnist_dir() -> Option<PathBuf> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let env = std::env::var_os("RNN_MNIST_DIR").map(PathBuf::from);
    let candidates = env.into_iter().chain([workspace.join("data/mnist"), workspace.join("../shared/data/mnist")]);
    candidates.into_iter().find(|dir| dir.is_dir())
}

//! The `--out` folder of `rnn train`: checked before any work starts, and removed again
//! when the command fails before writing anything into it.

use std::path::{Path, PathBuf};

use rnn::train::atomic_file::check_replaceable;

use crate::CliResult;

/// An output folder made ready for a run.
pub struct OutputDir {
    /// The folders this run created, outermost first (empty when `path` existed).
    created: Vec<PathBuf>,
}

impl OutputDir {
    /// Creates `path` (and missing parents) and checks that each of `files` can be written
    /// there (see [`check_replaceable`]), so a bad `--out` is reported before training
    /// rather than after it. On error, nothing this call created is left behind.
    pub fn prepare(path: &Path, files: &[&str]) -> CliResult<OutputDir> {
        let created = missing_ancestors(path);
        let dir = OutputDir { created };
        std::fs::create_dir_all(path)
            .map_err(|e| dir.fail(format!("--out {}: cannot create it: {e}", path.display())))?;
        for name in files {
            check_replaceable(&path.join(name)).map_err(|e| dir.fail(format!("--out {}: {e}", path.display())))?;
        }
        Ok(dir)
    }

    /// Passes `result` through; on an error, first removes the folders [`prepare`](Self::prepare)
    /// created if they are still empty (a failed run leaves no empty `--out` behind).
    pub fn finish<T>(self, result: CliResult<T>) -> CliResult<T> {
        if result.is_err() {
            self.remove_created();
        }
        result
    }

    /// Removes what this run created and returns `msg` as the error.
    fn fail(&self, msg: String) -> Box<dyn std::error::Error + Send + Sync> {
        self.remove_created();
        msg.into()
    }

    /// Removes the created folders, innermost first, stopping at the first that is not
    /// empty (`remove_dir` never removes a folder with files in it).
    fn remove_created(&self) {
        for dir in self.created.iter().rev() {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    }
}

/// `path` and those of its ancestors that do not exist yet, outermost first.
fn missing_ancestors(path: &Path) -> Vec<PathBuf> {
    let mut missing: Vec<PathBuf> = path
        .ancestors()
        .filter(|p| !p.as_os_str().is_empty())
        .take_while(|p| p.symlink_metadata().is_err())
        .map(Path::to_path_buf)
        .collect();
    missing.reverse();
    missing
}

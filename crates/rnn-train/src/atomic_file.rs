//! Replacing a file atomically: checkpoints, `history.json` and `curves.svg` are written to
//! a temporary file next to their destination, flushed to disk and renamed over it, so a
//! crash, a kill or a full disk never leaves a half-written file at the destination.
//!
//! - A symbolic link at the destination is followed: the file it points to is replaced (in
//!   the target's folder, so the rename stays atomic) and the link stays a link.
//! - An existing destination that is not a regular file (a folder, a FIFO, a device node
//!   such as `/dev/full`, a socket) is refused: renaming over it would replace it.
//! - Temporary files are named `<file>.tmp-<pid>-<n>`. One left behind by a process that was
//!   killed is removed by the next write to the same file.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rnn_core::{Error, Result};

/// How many symbolic links may be followed in a row (Linux's own limit).
const MAX_LINK_HOPS: usize = 40;

/// Writes `bytes` to `path` atomically (see the module docs). On failure the temporary file
/// is removed and the destination is untouched.
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    let target = resolve_target(path.as_ref())?;
    remove_stale_temp_files(&target);
    let tmp = temp_path(&target)?;
    let written = write_synced(&tmp, &target, bytes).and_then(|()| fs::rename(&tmp, &target));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(&target, e));
    }
    // Make the rename itself durable. Best effort: not every platform can sync a folder.
    if let Ok(dir) = File::open(parent_dir(&target)) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Checks that [`write_atomic`] could write `path` now, without changing it: the path, once
/// its links are resolved, is absent or a regular file, and its folder exists and takes a
/// new file. Returns the resolved path. Lets a program refuse a bad output path before a
/// long computation rather than after it.
pub fn check_replaceable(path: &Path) -> Result<PathBuf> {
    let target = resolve_target(path)?;
    let probe = temp_path(&target)?;
    File::options().write(true).create_new(true).open(&probe).map_err(|e| Error::io(parent_dir(&target), e))?;
    let _ = fs::remove_file(&probe);
    Ok(target)
}

/// `path` with its links resolved, when that is absent or a regular file; an error naming
/// what it is otherwise.
fn resolve_target(path: &Path) -> Result<PathBuf> {
    let target = resolve_links(path)?;
    if target.file_name().is_none() {
        return Err(Error::invalid("write", format!("'{}' does not name a file", path.display())));
    }
    match fs::metadata(&target) {
        Ok(meta) if !meta.is_file() => {
            let kind = file_kind(&meta);
            let via =
                if target != path { format!(" (the target of the link {})", path.display()) } else { String::new() };
            let msg = format!("is {kind}{via}, not a regular file: refusing to replace it");
            return Err(Error::Io { path: target.display().to_string(), msg });
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&target, e)),
    }
    Ok(target)
}

/// `path` with every symbolic link along the final component followed (a dangling link
/// resolves to the path it names, which the write then creates).
fn resolve_links(path: &Path) -> Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINK_HOPS {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = fs::read_link(&current).map_err(|e| Error::io(&current, e))?;
                current = parent_dir(&current).join(target);
            }
            Ok(_) => return Ok(current),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(current),
            Err(e) => return Err(Error::io(&current, e)),
        }
    }
    Err(Error::Io { path: path.display().to_string(), msg: format!("more than {MAX_LINK_HOPS} symbolic links") })
}

fn file_kind(meta: &fs::Metadata) -> &'static str {
    let kind = meta.file_type();
    if kind.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    "a special file"
}

fn parent_dir(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// A new name `<file>.tmp-<pid>-<n>` next to `target`.
fn temp_path(target: &Path) -> Result<PathBuf> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let name = target
        .file_name()
        .ok_or_else(|| Error::invalid("write", format!("'{}' does not name a file", target.display())))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    Ok(target.with_file_name(format!("{}.tmp-{}-{n}", name.to_string_lossy(), std::process::id())))
}

/// Creates `tmp` (never an existing file or link), writes and syncs `bytes`, and gives it the
/// permissions of the file it will replace, if there is one.
fn write_synced(tmp: &Path, target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = File::options().write(true).create_new(true).open(tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    if let Ok(meta) = fs::metadata(target) {
        file.set_permissions(meta.permissions())?;
    }
    Ok(())
}

/// Removes `<file>.tmp-<pid>-<n>` files of `target` whose process no longer runs (left by a
/// kill or a power cut). Best effort: a file that cannot be removed is left for next time.
fn remove_stale_temp_files(target: &Path) {
    let (Some(name), Ok(entries)) = (target.file_name(), fs::read_dir(parent_dir(target))) else { return };
    let prefix = format!("{}.tmp-", name.to_string_lossy());
    for entry in entries.flatten() {
        let entry_name = entry.file_name();
        let Some(suffix) = entry_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else { continue };
        if temp_owner(suffix).is_some_and(|pid| !process_is_running(pid)) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The process id in a temporary file's `<pid>-<n>` suffix, if it has that form.
fn temp_owner(suffix: &str) -> Option<u32> {
    let (pid, n) = suffix.split_once('-')?;
    n.parse::<usize>().ok()?;
    pid.parse().ok()
}

/// Whether `pid` names a running process. Where that cannot be told (no `/proc`), every
/// process counts as running, so that no write in progress loses its file.
fn process_is_running(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let proc_root = Path::new("/proc/self");
    !proc_root.exists() || Path::new("/proc").join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_owner_reads_only_the_pid_and_counter_form() {
        assert_eq!(temp_owner("123-4"), Some(123));
        assert_eq!(temp_owner("123"), None);
        assert_eq!(temp_owner("abc-1"), None);
        assert_eq!(temp_owner("12-x"), None);
    }
}

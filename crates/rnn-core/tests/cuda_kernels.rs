//! The CUDA backend without a GPU: every kernel the backend can launch compiles with NVRTC
//! for sm_80 and sm_90 (so a broken kernel fails CI on a machine with no GPU), the PTX disk
//! cache recompiles a corrupt file, and a machine without a driver lists no CUDA devices
//! and answers CUDA tensors with `Error::DeviceNotAvailable`, never a panic.
#![cfg(feature = "cuda")]

use rnn_core::{DType, Device, Error, Tensor};

/// Whether NVRTC can be used here; fails when `RNN_REQUIRE_NVRTC=1` (CI) and it cannot.
fn nvrtc_available() -> bool {
    match rnn_core::cuda::nvrtc_version() {
        Ok(_) => true,
        Err(e) => {
            assert!(std::env::var("RNN_REQUIRE_NVRTC").as_deref() != Ok("1"), "NVRTC required: {e}");
            eprintln!("SKIPPED: {e}");
            false
        }
    }
}

#[test]
fn every_kernel_compiles_for_sm80_and_sm90() {
    if !nvrtc_available() {
        return;
    }
    let variants = rnn_core::cuda::kernel_variants();
    assert!(variants.len() > 200, "only {} kernel variants", variants.len());
    let jobs: Vec<_> = ["sm_80", "sm_90"].iter().flat_map(|arch| variants.iter().map(move |v| (*arch, v))).collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    // NVRTC compiles independent programs concurrently.
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = jobs
            .chunks(jobs.len().div_ceil(threads))
            .map(|chunk| {
                scope.spawn(move || {
                    chunk.iter().filter_map(|(arch, (name, source))| compile(arch, name, source)).collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("compile worker")).collect()
    });
    let first: Vec<_> = failures.iter().take(3).collect();
    assert!(failures.is_empty(), "{} kernels failed to compile, first: {first:#?}", failures.len());
}

/// Compiles one kernel; the failure message, if it fails or has no `kernel` entry.
fn compile(arch: &str, name: &str, source: &str) -> Option<String> {
    match rnn_core::cuda::compile_ptx_uncached(source, arch) {
        Ok(ptx) if ptx.contains(".entry kernel") => None,
        Ok(_) => Some(format!("{name} ({arch}): no kernel entry in the PTX")),
        Err(e) => Some(format!("{name} ({arch}): {e}")),
    }
}

#[test]
fn the_ptx_cache_is_used_and_a_corrupt_file_is_recompiled() -> rnn_core::Result<()> {
    if !nvrtc_available() {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("rnn-ptx-cache-test-{}", std::process::id()));
    std::env::set_var("RNN_CUDA_CACHE_PATH", &dir);
    let kernel = "extern \"C\" __global__ void kernel(const Info info, float* out) { out[0] = 1.0f; }";
    let source = format!("{}\n{kernel}\n", rnn_kernels::cuda::COMMON);
    let compiled = rnn_core::cuda::disk_cached_ptx(&source, "sm_80")?;
    let file = rnn_core::cuda::cache_file(&source, "sm_80")?.expect("a cache folder");
    assert_eq!(std::fs::read_to_string(&file).ok(), Some(rnn_core::cuda::cache_entry(&source, "sm_80", &compiled)?));
    // An intact entry is used as it is (a marked copy comes back).
    let marked = format!("{compiled}// from the cache\n");
    std::fs::write(&file, rnn_core::cuda::cache_entry(&source, "sm_80", &marked)?).expect("write");
    assert_eq!(rnn_core::cuda::disk_cached_ptx(&source, "sm_80")?, marked);
    // A truncated file, or one whose content does not match its header, is recompiled.
    let entry = rnn_core::cuda::cache_entry(&source, "sm_80", &marked)?;
    std::fs::write(&file, &entry[..entry.len() - 40]).expect("truncate");
    assert_eq!(rnn_core::cuda::disk_cached_ptx(&source, "sm_80")?, compiled);
    std::fs::write(&file, entry.replace("from the cache", "from elsewhere")).expect("tamper");
    assert_eq!(rnn_core::cuda::disk_cached_ptx(&source, "sm_80")?, compiled);
    // An entry made for another architecture is not used for this one.
    let foreign = rnn_core::cuda::cache_entry(&source, "sm_90", &marked)?;
    std::fs::write(&file, foreign).expect("foreign");
    assert_eq!(rnn_core::cuda::disk_cached_ptx(&source, "sm_80")?, compiled);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

#[test]
fn without_a_driver_there_are_no_devices_and_clear_errors() {
    if rnn_core::cuda::device_count() > 0 {
        eprintln!("SKIPPED: this machine has a CUDA device");
        return;
    }
    let err = Device::Cuda(0).check_available().unwrap_err();
    assert!(matches!(err, Error::DeviceNotAvailable(_)), "{err:?}");
    let err = Tensor::zeros(4, DType::F32, Device::Cuda(0)).unwrap_err();
    assert!(matches!(err, Error::DeviceNotAvailable(_)), "{err:?}");
    assert_ne!(Device::best().unwrap_or(Device::Cpu), Device::Cuda(0));
}

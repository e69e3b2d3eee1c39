//! The CUDA backend without a GPU: every kernel the backend can launch compiles with NVRTC
//! to a CUBIN (machine code, an ELF image) for sm_75, sm_80 and sm_90 (so a broken kernel
//! fails CI on a machine with no GPU), the CUBIN disk cache recompiles a corrupt, truncated
//! or foreign file, and a machine without a driver lists no CUDA devices and answers CUDA
//! tensors with `Error::DeviceNotAvailable`, never a panic.
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

/// Every kernel variant compiles to a CUBIN for sm_90 (Hopper, the GPUs the backend is run
/// on) exactly as the backend compiles it, and for sm_80 (Ampere) with NVRTC's fast-compile
/// mode: the same front end, headers and assembler, in a quarter of the time, so that the
/// test stays near a minute on CI's two cores. The variants of a Turing device (sm_75, the
/// oldest NVRTC 13 compiles for: 16-bit attention on the scalar kernels) compile for sm_75 in
/// the fast mode. Identical sources are compiled once per architecture.
#[test]
fn every_kernel_compiles_for_sm75_sm80_and_sm90() {
    if !nvrtc_available() {
        return;
    }
    let variants = rnn_core::cuda::kernel_variants((8, 0));
    assert!(variants.len() > 200, "only {} kernel variants", variants.len());
    let turing = rnn_core::cuda::kernel_variants((7, 5));
    let scalar_half = turing.iter().filter(|(name, _)| name.ends_with("/scalar")).count();
    assert!(scalar_half >= 18, "only {scalar_half} scalar 16-bit attention variants for sm_75");
    let (distinct, distinct_turing) = (distinct(&variants), distinct(&turing));
    let mut jobs: Vec<_> =
        ["sm_90", "sm_80"].iter().flat_map(|arch| distinct.iter().map(move |v| (*arch, *v))).collect();
    jobs.extend(distinct_turing.iter().map(|v| ("sm_75", *v)));
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let start = std::time::Instant::now();
    // NVRTC compiles independent programs concurrently; each worker takes the next job.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut failed = Vec::new();
                    while let Some((arch, (name, source))) =
                        jobs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        failed.extend(compile(arch, name, source));
                    }
                    failed
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("compile worker")).collect()
    });
    eprintln!(
        "{} variants ({} distinct) compiled for sm_90 and sm_80, {} for sm_75, in {:.1} s on {threads} threads",
        variants.len(),
        distinct.len(),
        distinct_turing.len(),
        start.elapsed().as_secs_f64()
    );
    let first: Vec<_> = failures.iter().take(3).collect();
    assert!(failures.is_empty(), "{} kernels failed to compile, first: {first:#?}", failures.len());
}

/// The variants whose source no earlier variant has.
fn distinct(all: &[(String, String)]) -> Vec<&(String, String)> {
    let mut seen = std::collections::HashSet::new();
    all.iter().filter(|(_, source)| seen.insert(source.as_str())).collect()
}

/// Compiles one kernel (see above); the failure message, if it fails, gives no CUBIN with a
/// `kernel`, or (at sm_90, as the backend compiles it) spills registers to local memory: a
/// spill costs a memory round trip inside the kernel's loops, so a variant that spills is
/// to be given smaller tiles, not shipped. The attention kernels' register counts are
/// printed, their budget being the tightest. With `RNN_DUMP_CUBINS=<folder>`, every sm_90
/// CUBIN is also written there (`attention_fwd_bf16_d64.cubin`, ...), to be read with
/// `nvdisasm -c` (pip package `nvidia-cuda-nvdisasm`).
fn compile(arch: &str, name: &str, source: &str) -> Option<String> {
    let compiled = match arch {
        "sm_90" => rnn_core::cuda::compile_cubin_with_report(source, arch).map(|(cubin, report)| {
            if name.starts_with("attention/") {
                let used = report.lines().find(|l| l.contains("Used")).unwrap_or("no register report");
                eprintln!("{name}: {}", used.trim());
            }
            if let Ok(folder) = std::env::var("RNN_DUMP_CUBINS") {
                let file = std::path::Path::new(&folder).join(format!("{}.cubin", name.replace('/', "_")));
                std::fs::write(&file, &cubin).unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
            }
            (cubin, spills(&report))
        }),
        _ => rnn_core::cuda::compile_cubin_for_check(source, arch).map(|cubin| (cubin, None)),
    };
    match compiled {
        Ok((_, Some(spill))) => Some(format!("{name} ({arch}) spills registers: {spill}")),
        Ok((cubin, None)) if !rnn_core::cuda::is_cubin(&cubin) => Some(format!("{name} ({arch}): not an ELF image")),
        // The code of `kernel` is in the section `.text.kernel`.
        Ok((cubin, None)) if cubin.windows(13).any(|w| w == b".text.kernel\0") => None,
        Ok(_) => Some(format!("{name} ({arch}): no `kernel` in the CUBIN")),
        Err(e) => Some(format!("{name} ({arch}): {e}")),
    }
}

/// The line of a `ptxas --verbose` report that names spill stores or loads other than zero.
fn spills(report: &str) -> Option<String> {
    let nonzero = |l: &str, what: &str| l.split(',').any(|part| part.contains(what) && !part.trim().starts_with("0 "));
    report
        .lines()
        .find(|l| nonzero(l, "bytes spill stores") || nonzero(l, "bytes spill loads"))
        .map(|l| l.trim().to_string())
}

#[test]
fn spill_lines_are_found_in_a_ptxas_report() {
    let report = "ptxas info    : Used 168 registers, used 1 barriers, 35840 bytes smem\n\
                  ptxas info    : Function properties for kernel\n    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads";
    assert_eq!(spills(report), None);
    let spilling = report.replace("0 bytes spill stores", "24 bytes spill stores");
    assert_eq!(spills(&spilling).as_deref(), Some("0 bytes stack frame, 24 bytes spill stores, 0 bytes spill loads"));
    assert!(spills(&report.replace("0 bytes spill loads", "8 bytes spill loads")).is_some());
}

#[test]
fn the_cubin_cache_is_used_and_a_corrupt_file_is_recompiled() -> rnn_core::Result<()> {
    use rnn_core::cuda::{cache_entry, cache_file, disk_cached_cubin};
    if !nvrtc_available() {
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("rnn-cubin-cache-test-{}", std::process::id()));
    std::env::set_var("RNN_CUDA_CACHE_PATH", &dir);
    let kernel = "extern \"C\" __global__ void kernel(const Info info, float* out) { out[0] = 1.0f; }";
    let source = format!("{}\n{kernel}\n", rnn_kernels::cuda::COMMON);
    let compiled = disk_cached_cubin(&source, "sm_80")?;
    assert!(rnn_core::cuda::is_cubin(&compiled));
    let file = cache_file(&source, "sm_80")?.expect("a cache folder");
    let name = file.file_name().expect("a file name").to_string_lossy().to_string();
    let (major, minor) = rnn_core::cuda::nvrtc_version()?;
    assert!(name.contains(&format!("-sm_80-nvrtc{major}.{minor}-")) && name.ends_with(".cubin"), "{name}");
    assert_eq!(std::fs::read(&file).ok(), Some(cache_entry(&source, "sm_80", &compiled)?));
    // An intact entry is used as it is (a marked copy comes back).
    let marked = [compiled.as_slice(), b"// from the cache"].concat();
    std::fs::write(&file, cache_entry(&source, "sm_80", &marked)?).expect("write");
    assert_eq!(disk_cached_cubin(&source, "sm_80")?, marked);
    // A truncated file, or one whose content does not match its header, is recompiled.
    let entry = cache_entry(&source, "sm_80", &marked)?;
    let rejected = |bytes: &[u8], why: &str| -> rnn_core::Result<()> {
        std::fs::write(&file, bytes).expect("write");
        assert!(disk_cached_cubin(&source, "sm_80")? == compiled, "a {why} cache file was used");
        Ok(())
    };
    rejected(&entry[..entry.len() - 40], "truncated")?;
    let mut tampered = entry.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 0x20;
    rejected(&tampered, "corrupt")?;
    rejected(b"// rnn ptx cache 0123 4567\n.version 9.0\n", "foreign (old format)")?;
    rejected(&cache_entry(&source, "sm_80", b"not an ELF image")?, "non-ELF")?;
    rejected(b"", "empty")?;
    // An entry made for another architecture is not used for this one.
    rejected(&cache_entry(&source, "sm_90", &marked)?, "foreign (sm_90)")?;
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

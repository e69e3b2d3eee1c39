//! Dynamic shared memory past the default 48 KiB per block: a kernel's cap is raised to the
//! device's opt-in maximum (227 KiB on Hopper) before its first such launch.

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::CudaFunction;

use super::context::{driver_err, CudaDevice};
use crate::{Error, Result};

impl CudaDevice {
    /// Lets `f` launch with `dynamic` bytes of dynamic shared memory per block (`what`: the
    /// op and the kernel, for the error): past the default limit its cap is raised; beyond
    /// the device's opt-in maximum the error is `Error::InvalidArgument`.
    pub(crate) fn allow_dynamic_shared(
        &self,
        f: &CudaFunction,
        dynamic: u32,
        what: (&'static str, &str),
    ) -> Result<()> {
        // Static shared memory is at most 48 KiB (a compile-time limit), so only dynamic
        // shared memory can take a block past the default limit.
        if dynamic == 0 {
            return Ok(());
        }
        let static_bytes = f
            .get_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            .map_err(driver_err(self.ordinal, "reading the kernel's shared memory size"))?
            .max(0) as u32;
        let limit = dynamic_shared_limit(dynamic, static_bytes, self.shared_per_block, self.shared_per_block_optin)
            .map_err(|msg| {
                Error::invalid(what.0, format!("{} on cuda:{} ({}): {msg}", what.1, self.ordinal, self.name))
            })?;
        if let Some(limit) = limit {
            // The attribute only raises the kernel's cap; each launch still passes its own
            // size. Setting the device's maximum rather than this launch's size keeps launches
            // of the same kernel from several threads from lowering each other's cap.
            f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, limit as i32)
                .map_err(driver_err(self.ordinal, "allowing the kernel more than 48 KiB of dynamic shared memory"))?;
        }
        Ok(())
    }
}

/// What a launch asking for `dynamic` bytes of dynamic shared memory per block needs, for a
/// kernel using `static_bytes` of static shared memory on a device allowing `default_max`
/// bytes per block without opting in and `optin_max` with: `None` within the default,
/// `Some(cap)` when the kernel's dynamic shared memory cap must first be raised to `cap`
/// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`), an error beyond the opt-in maximum.
fn dynamic_shared_limit(
    dynamic: u32,
    static_bytes: u32,
    default_max: u32,
    optin_max: u32,
) -> std::result::Result<Option<u32>, String> {
    let total = u64::from(dynamic) + u64::from(static_bytes);
    if total <= u64::from(default_max) {
        return Ok(None);
    }
    if total > u64::from(optin_max) {
        return Err(format!(
            "{dynamic} bytes of dynamic shared memory (plus {static_bytes} static) per block asked for, but the device \
             allows at most {optin_max} bytes per block"
        ));
    }
    Ok(Some(optin_max - static_bytes))
}

#[cfg(test)]
mod tests {
    use super::dynamic_shared_limit;

    #[test]
    fn shared_memory_past_48_kib_needs_the_opt_in_and_has_a_ceiling() {
        const KIB: u32 = 1024;
        // Hopper: 48 KiB by default, 227 KiB with the opt-in.
        let (default_max, optin) = (48 * KIB, 227 * KIB);
        assert_eq!(dynamic_shared_limit(0, 0, default_max, optin), Ok(None));
        assert_eq!(dynamic_shared_limit(48 * KIB, 0, default_max, optin), Ok(None));
        assert_eq!(dynamic_shared_limit(48 * KIB + 4, 0, default_max, optin), Ok(Some(optin)));
        assert_eq!(dynamic_shared_limit(40 * KIB, 10 * KIB, default_max, optin), Ok(Some(217 * KIB)));
        assert_eq!(dynamic_shared_limit(227 * KIB, 0, default_max, optin), Ok(Some(optin)));
        let err = dynamic_shared_limit(227 * KIB + 1, 0, default_max, optin).unwrap_err();
        assert!(err.contains(&(227 * KIB + 1).to_string()) && err.contains(&optin.to_string()), "{err}");
        assert!(dynamic_shared_limit(u32::MAX, u32::MAX, default_max, optin).is_err());
        // A device without the opt-in (its maximum is the default).
        assert!(dynamic_shared_limit(48 * KIB + 1, 0, default_max, default_max).is_err());
    }
}

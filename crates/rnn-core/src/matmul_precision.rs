//! Whether f32 matrix products on CUDA may run on TF32 tensor cores (inputs rounded to a
//! 10-bit mantissa, f32 accumulation), as PyTorch's `torch.backends.cuda.matmul.allow_tf32`.
//! Off by default, so f32 means f32; `RNN_CUDA_TF32=1` turns it on at start and
//! `set_allow_tf32` at any time (each product reads the setting when it is launched).

use std::sync::atomic::{AtomicU8, Ordering};

const UNREAD: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static TF32: AtomicU8 = AtomicU8::new(UNREAD);

/// Whether f32 products on CUDA may use TF32 tensor cores.
pub fn allow_tf32() -> bool {
    match TF32.load(Ordering::Relaxed) {
        UNREAD => {
            let on = std::env::var("RNN_CUDA_TF32").is_ok_and(|v| !v.is_empty() && v != "0");
            // A concurrent `set_allow_tf32` wins over the environment.
            let _ = TF32.compare_exchange(UNREAD, if on { ON } else { OFF }, Ordering::Relaxed, Ordering::Relaxed);
            TF32.load(Ordering::Relaxed) == ON
        }
        state => state == ON,
    }
}

/// Lets f32 products on CUDA use TF32 tensor cores (`true`) or keeps them in full f32.
pub fn set_allow_tf32(on: bool) {
    TF32.store(if on { ON } else { OFF }, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_read_at_each_call() {
        let before = allow_tf32();
        set_allow_tf32(true);
        assert!(allow_tf32());
        set_allow_tf32(false);
        assert!(!allow_tf32());
        set_allow_tf32(before);
    }
}

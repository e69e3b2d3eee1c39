//! Process-wide switches between kernels that trade exactness or determinism for speed,
//! each off by default, turned on by an environment variable at start or by its setter at
//! any time (each launch reads the setting when it is built):
//! - `allow_tf32` (`RNN_CUDA_TF32=1`): f32 matrix products on CUDA may run on TF32 tensor
//!   cores (inputs rounded to a 10-bit mantissa, f32 accumulation), as PyTorch's
//!   `torch.backends.cuda.matmul.allow_tf32`. Off, f32 means f32.
//! - `attention_atomic_dq` (`RNN_CUDA_ATTENTION_ATOMIC_DQ=1`): the f16 / bf16 attention
//!   backward on CUDA runs FlashAttention-2's single pass, adding dq from every key block with
//!   f32 atomics, as PyTorch's flash backend does: fewer tile products, but dq's rounding then
//!   depends on the order of the adds. Off, the backward is two passes that each own their
//!   outputs, so repeated runs give identical gradients.

use std::sync::atomic::{AtomicU8, Ordering};

const UNREAD: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

/// An on / off setting whose first read consults an environment variable.
struct Switch {
    state: AtomicU8,
    var: &'static str,
}

impl Switch {
    const fn new(var: &'static str) -> Switch {
        Switch { state: AtomicU8::new(UNREAD), var }
    }

    fn get(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            UNREAD => {
                let on = std::env::var(self.var).is_ok_and(|v| !v.is_empty() && v != "0");
                // A concurrent `set` wins over the environment.
                let _ = self.state.compare_exchange(
                    UNREAD,
                    if on { ON } else { OFF },
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                self.state.load(Ordering::Relaxed) == ON
            }
            state => state == ON,
        }
    }

    fn set(&self, on: bool) {
        self.state.store(if on { ON } else { OFF }, Ordering::Relaxed);
    }
}

static TF32: Switch = Switch::new("RNN_CUDA_TF32");
static ATTENTION_ATOMIC_DQ: Switch = Switch::new("RNN_CUDA_ATTENTION_ATOMIC_DQ");

/// Whether f32 products on CUDA may use TF32 tensor cores.
pub fn allow_tf32() -> bool {
    TF32.get()
}

/// Lets f32 products on CUDA use TF32 tensor cores (`true`) or keeps them in full f32.
pub fn set_allow_tf32(on: bool) {
    TF32.set(on)
}

/// Whether the f16 / bf16 attention backward on CUDA adds dq with atomics (see the module
/// documentation). Other dtypes and devices ignore it, as do GPUs before Ampere (sm_80),
/// whose 16-bit attention runs the scalar kernels.
pub fn attention_atomic_dq() -> bool {
    ATTENTION_ATOMIC_DQ.get()
}

/// Picks the single-pass attention backward with atomic dq (`true`, faster, not
/// deterministic) or the deterministic two-pass one for later backward calls.
pub fn set_attention_atomic_dq(on: bool) {
    ATTENTION_ATOMIC_DQ.set(on)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_is_read_at_each_call() {
        let switch = Switch::new("RNN_TEST_SWITCH_NEVER_SET");
        assert!(!switch.get());
        switch.set(true);
        assert!(switch.get());
        switch.set(false);
        assert!(!switch.get());
    }
}

//! Every kernel a target can launch, named by variant: template x dtype(s) x op x work
//! split, as the plan builders name their launches (`KernelPlan::variant`). The NVRTC
//! compile test compiles each distinct source of the CUDA list; the emulator tests check
//! that every name of it was launched.

use super::elementwise::{binary_source, cmp_source, copy_source, fill_source, unary_source, where_source};
use super::index::{gather_source, scatter_add_source};
use super::matmul::tiled_source;
use super::matmul_unit::{unit_source, Access};
use super::plan::KernelSource;
use super::reduce::{reduce_source, Mode, OPS};
use super::target::{Lang, Target};
use super::window::{fold2d_source, unfold2d_source, PAD_WORD};
use crate::op_table::{BinaryOp, CmpOp, UnaryOp};
use crate::{DType, Result};

/// The dtypes indices may have (as on the CPU).
pub(crate) const ID_DTYPES: [DType; 3] = [DType::U8, DType::U32, DType::I64];

/// (variant, source) of every kernel `target` can launch.
pub(crate) fn all(target: &Target) -> Vec<(String, KernelSource)> {
    let dtypes: Vec<DType> = DType::ALL.iter().copied().filter(|&d| target.elem_type("variants", d).is_ok()).collect();
    let floats: Vec<DType> = dtypes.iter().copied().filter(|d| d.is_float()).collect();
    let mut v = Vec::new();
    let mut push = |name: String, source: Result<KernelSource>| {
        // A combination the target cannot hold is not a variant of it.
        if let Ok(source) = source {
            v.push((name, source));
        }
    };
    for &d in &dtypes {
        let value = target.value_word("full", 0.0, d, 1).map(|(_, e)| e);
        push(format!("fill/{d}"), value.and_then(|e| fill_source(target, &e, d)));
        for &to in &dtypes {
            push(format!("copy/{d}/{to}"), copy_source(target, d, to));
        }
        for &op in BinaryOp::ALL {
            push(format!("binary/{}/{d}", op.name()), binary_source(target, op, d));
        }
        for &op in CmpOp::ALL {
            push(format!("cmp/{}/{d}", op.name()), cmp_source(target, op, d));
        }
        for cond in ID_DTYPES.into_iter().filter(|c| dtypes.contains(c)) {
            push(format!("where/{cond}/{d}"), where_source(target, cond, d));
        }
        for op in OPS {
            for mode in Mode::ALL.into_iter().filter(|m| m.exists_on(target)) {
                push(format!("reduce/{}/{d}/{}", op.name(), mode.name()), reduce_source(target, op, d));
            }
        }
        for k in ID_DTYPES.into_iter().filter(|k| dtypes.contains(k)) {
            push(format!("gather/{d}/{k}"), gather_source(target, d, k));
            push(format!("scatter_add/{d}/{k}"), scatter_add_source(target, d, k));
        }
        let pad = target.value_word("unfold2d", 0.0, d, PAD_WORD).map(|(_, e)| e);
        push(format!("unfold2d/{d}"), pad.and_then(|e| unfold2d_source(target, d, &e)));
        push(format!("fold2d/{d}"), fold2d_source(target, d));
    }
    for &d in &floats {
        for &op in UnaryOp::ALL {
            push(format!("unary/{}/{d}", op.name()), unary_source(target, op, d));
        }
        if target.lang == Lang::Wgsl {
            push(format!("matmul/{d}"), tiled_source(target, d));
            for access in Access::ALL {
                push(format!("matmul_unit/{}/{d}", access.name()), unit_source(target, d, access));
            }
        }
    }
    v.extend(crate::fused::variants(target));
    v.extend(super::optim::variants(target));
    v
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Runtimes find loaded kernels by `KernelSource::key`: one key must never stand for two
    /// different sources, on either language.
    #[test]
    fn kernel_keys_name_one_source_each() {
        for target in [Target::cuda(), Target::cuda_on((7, 5)), Target::wgsl(65535, true)] {
            let all = all(&target);
            let mut by_key: HashMap<String, String> = HashMap::new();
            for (name, source) in &all {
                let text = source.text();
                if let Some(other) = by_key.insert(source.key().to_string(), text.clone()) {
                    assert_eq!(other, text, "{name} shares the key {} with another source", source.key());
                }
            }
            let texts: std::collections::HashSet<String> = all.iter().map(|(_, s)| s.text()).collect();
            assert_eq!(by_key.len(), texts.len(), "{:?}", target.lang);
            let names: std::collections::HashSet<&String> = all.iter().map(|(n, _)| n).collect();
            assert_eq!(names.len(), all.len(), "duplicate variant names on {:?}", target.lang);
            assert!(all.len() > 250, "{} variants on {:?}", all.len(), target.lang);
        }
    }
}

//! Explicit bind group layouts for the backend's own kernels: binding 0 (`info`) takes a
//! dynamic offset into the `Info` ring (`batch.rs`), so that one bind group serves every op
//! binding the same buffers. The layout is read from the WGSL declarations
//! (`@group(0) @binding(N) var<storage, read>` / `read_write`); a kernel declared otherwise
//! keeps the layout wgpu derives and gets a bind group per launch.

/// Whether each of bindings `0..n` is read-only, when the source declares exactly those, all
/// as storage buffers of group 0, with binding 0 read-only.
pub(crate) fn storage_bindings(source: &str) -> Option<Vec<bool>> {
    let mut found: Vec<(usize, bool)> = Vec::new();
    for (at, _) in source.match_indices("@binding(") {
        let rest = &source[at + "@binding(".len()..];
        let close = rest.find(')')?;
        let binding: usize = rest[..close].trim().parse().ok()?;
        let decl = rest[close + 1..].trim_start();
        let decl = decl.strip_prefix("var<storage,")?.trim_start();
        let read_only = match () {
            _ if decl.starts_with("read_write>") => false,
            _ if decl.starts_with("read>") => true,
            _ => return None,
        };
        found.push((binding, read_only));
    }
    // Every declaration is in group 0 (the only group the backend binds).
    if source.matches("@group(").count() != found.len() || source.matches("@group(0)").count() != found.len() {
        return None;
    }
    found.sort_unstable();
    let contiguous = found.iter().enumerate().all(|(i, &(b, _))| b == i);
    let info_read_only = found.first().is_some_and(|&(_, read_only)| read_only);
    (contiguous && info_read_only).then(|| found.into_iter().map(|(_, r)| r).collect())
}

/// The layout of `bindings` (read-only flags), binding 0 with a dynamic offset.
pub(crate) fn bind_group_layout(device: &::wgpu::Device, bindings: &[bool]) -> ::wgpu::BindGroupLayout {
    let entries: Vec<::wgpu::BindGroupLayoutEntry> = bindings
        .iter()
        .enumerate()
        .map(|(i, &read_only)| ::wgpu::BindGroupLayoutEntry {
            binding: i as u32,
            visibility: ::wgpu::ShaderStages::COMPUTE,
            ty: ::wgpu::BindingType::Buffer {
                ty: ::wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: i == 0,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    device.create_bind_group_layout(&::wgpu::BindGroupLayoutDescriptor { label: None, entries: &entries })
}

#[cfg(test)]
mod tests {
    use super::storage_bindings;

    #[test]
    fn reads_the_storage_bindings_of_a_kernel() {
        let src = "@group(0) @binding(0) var<storage, read> info: array<u32>;\n\
                   @group(0) @binding(2) var<storage, read_write> out: array<f32>;\n\
                   @group(0) @binding(1) var<storage, read> x: array<f32>;";
        assert_eq!(storage_bindings(src), Some(vec![true, true, false]));
    }

    #[test]
    fn other_declarations_keep_the_derived_layout() {
        let uniform = "@group(0) @binding(0) var<storage, read> info: array<u32>;\n\
                       @group(0) @binding(1) var<uniform> p: P;";
        assert_eq!(storage_bindings(uniform), None);
        let gap = "@group(0) @binding(0) var<storage, read> info: array<u32>;\n\
                   @group(0) @binding(2) var<storage, read> x: array<f32>;";
        assert_eq!(storage_bindings(gap), None);
        let group1 = "@group(0) @binding(0) var<storage, read> info: array<u32>;\n\
                      @group(1) @binding(1) var<storage, read> x: array<f32>;";
        assert_eq!(storage_bindings(group1), None);
        assert_eq!(storage_bindings("@group(0) @binding(0) var<storage, read_write> info: array<u32>;"), None);
    }
}

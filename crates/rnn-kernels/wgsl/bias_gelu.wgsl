// out[i] = gelu(x[i] + b[i % n]), or with {{grad}} out[i] = g[i] gelu'(x[i] + b[i % n]), over
// contiguous buffers, computed in f32. gelu is the op table's `{{expr}}` of `x`; gelu' is the
// erf form Phi(z) + z phi(z) when {{erf}}, else the tanh form's derivative.
// info: count, n, x start, b start, g start (g is bound to x in the forward).
@group(0) @binding(1) var<storage, read> xs: array<{{T}}>;
@group(0) @binding(2) var<storage, read> b: array<{{T}}>;
@group(0) @binding(3) var<storage, read> g: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> out: array<{{T}}>;

fn gelu_grad(z: f32) -> f32 {
    if ({{erf}}) {
        let cdf = 0.5 * (1.0 + erf_approx(z * 0.7071067811865476));
        return cdf + z * exp(-0.5 * z * z) * 0.3989422804014327;
    }
    let c = 0.7978845608028654;
    let a = 0.044715;
    let t = tanh(c * (z + a * z * z * z));
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * c * (1.0 + 3.0 * a * z * z);
}

fn gelu(x: f32) -> f32 {
    return {{expr}};
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let n = info[1];
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        let z = f32(xs[info[2] + i]) + f32(b[info[3] + i % n]);
        if ({{grad}}) {
            out[i] = {{T}}(f32(g[info[4] + i]) * gelu_grad(z));
        } else {
            out[i] = {{T}}(gelu(z));
        }
    }
}

// Fused optimizer updates (SGD, Adam / AdamW, RMSprop, Adagrad) of one parameter, in place:
// the parameter and its three state buffers (bindings the rule does not use are bound to
// spare buffers and never touched). The host (rnn-core, gpu/optim.rs) queues one dispatch per
// parameter. `{{rule}}` picks the update rule; the formulas are the CPU's (rnn-core
// fused_update/cpu.rs) and the CUDA kernel's (optim.cu), operation for operation.
//
// info: n, start offsets of param, grad, s0, s1, s2, flags, hyper[8] (f32 bits; each rule
// lists its words).
@group(0) @binding(1) var<storage, read_write> param: array<{{T}}>;
@group(0) @binding(2) var<storage, read> grad: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> s0: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> s1: array<{{T}}>;
@group(0) @binding(5) var<storage, read_write> s2: array<{{T}}>;

// Flags (`gpu/optim.rs` sets them): weight decay on, the momentum buffer's first update,
// Nesterov momentum, decoupled (AdamW) decay, and which states exist.
const DECAY: u32 = 1u;
const FIRST_STEP: u32 = 2u;
const NESTEROV: u32 = 4u;
const DECOUPLED: u32 = 8u;
const HAS_S0: u32 = 16u;
const HAS_S1: u32 = 32u;
const HAS_S2: u32 = 64u;

fn has(flag: u32) -> bool {
    return (info[6] & flag) != 0u;
}

fn h(j: u32) -> f32 {
    return bitcast<f32>(info[7u + j]);
}

// The gradient with the L2 penalty `wd * p` added, when weight decay is on.
fn l2(p: f32, g: f32, wd: f32) -> f32 {
    if (has(DECAY)) {
        return g + p * wd;
    }
    return g;
}

// Each rule returns the new parameter and the new states (p, s0, s1, s2).

// SGD. h: lr, weight decay, momentum, 1 - dampening. s0: the momentum buffer.
fn sgd(p: f32, g: f32, s: vec3<f32>) -> vec4<f32> {
    var d = l2(p, g, h(1u));
    var b = s.x;
    if (has(HAS_S0)) {
        b = select(b * h(2u) + d * h(3u), d, has(FIRST_STEP));
        d = select(b, d + b * h(2u), has(NESTEROV));
    }
    return vec4<f32>(p - d * h(0u), b, s.y, s.z);
}

// Adam / AdamW. h: lr / (1 - beta1^t), sqrt(1 - beta2^t), 1 - beta1, beta2, 1 - beta2, eps,
// weight decay, 1 - lr * weight decay. s: m, v, the running maximum of v (AMSGrad).
fn adam(p0: f32, g0: f32, s: vec3<f32>) -> vec4<f32> {
    var p = p0;
    var g = g0;
    if (has(DECAY) && has(DECOUPLED)) {
        p = p * h(7u);
    }
    if (has(DECAY) && !has(DECOUPLED)) {
        g = g + p * h(6u);
    }
    let m = s.x + (g - s.x) * h(2u);
    let v = s.y * h(3u) + g * g * h(4u);
    var vmax = s.z;
    var v_hat = v;
    if (has(HAS_S2)) {
        // NaN-propagating, as torch.maximum (WGSL's max may drop a NaN).
        vmax = select(max(vmax, v), vmax + v, is_nan(vmax) || is_nan(v));
        v_hat = vmax;
    }
    return vec4<f32>(p - m / (sqrt(v_hat) / h(1u) + h(5u)) * h(0u), m, v, vmax);
}

// RMSprop. h: lr, alpha, 1 - alpha, eps, weight decay, momentum. s: the squared-gradient
// average, the gradient average (centered), the momentum buffer.
fn rmsprop(p: f32, g0: f32, s: vec3<f32>) -> vec4<f32> {
    let g = l2(p, g0, h(4u));
    let sq = s.x * h(1u) + g * g * h(2u);
    var ga = s.y;
    var avg = sqrt(sq) + h(3u);
    if (has(HAS_S1)) {
        ga = ga + (g - ga) * h(2u);
        avg = sqrt(sq - ga * ga) + h(3u);
    }
    if (has(HAS_S2)) {
        let b = s.z * h(5u) + g / avg;
        return vec4<f32>(p - b * h(0u), sq, ga, b);
    }
    return vec4<f32>(p - g / avg * h(0u), sq, ga, s.z);
}

// Adagrad. h: the decayed lr, eps, weight decay. s0: the sum of squared gradients.
fn adagrad(p: f32, g0: f32, s: vec3<f32>) -> vec4<f32> {
    let g = l2(p, g0, h(2u));
    let sum = s.x + g * g;
    return vec4<f32>(p - g / (sqrt(sum) + h(1u)) * h(0u), sum, s.y, s.z);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    for (var i = thread_start(wid, lid); i < info[0]; i = i + grid_step(nwg)) {
        var s = vec3<f32>(0.0);
        if (has(HAS_S0)) {
            s.x = f32(s0[info[3] + i]);
        }
        if (has(HAS_S1)) {
            s.y = f32(s1[info[4] + i]);
        }
        if (has(HAS_S2)) {
            s.z = f32(s2[info[5] + i]);
        }
        let r = {{rule}}(f32(param[info[1] + i]), f32(grad[info[2] + i]), s);
        param[info[1] + i] = {{T}}(r.x);
        if (has(HAS_S0)) {
            s0[info[3] + i] = {{T}}(r.y);
        }
        if (has(HAS_S1)) {
            s1[info[4] + i] = {{T}}(r.z);
        }
        if (has(HAS_S2)) {
            s2[info[5] + i] = {{T}}(r.w);
        }
    }
}

// out[i] = value for i < n. info: n, the value's bits in the stored type ({{value}} reads them).
extern "C" __global__ void kernel(const Info info, {{T}}* __restrict__ out) {
    const u64 n = info.w[0];
    const {{T}} value = {{value}};
    for (u64 i = thread_start(); i < n; i += grid_step()) out[i] = value;
}

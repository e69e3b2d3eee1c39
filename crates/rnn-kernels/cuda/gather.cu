// out[i] = x[o, ids(i), k] for each output position i = (o, j, k) of [outer, m, inner], with
// x seen as [outer, size, inner] through its layout and `ids(i)` read through the `read`
// layout (the ids' own layout for gather, the 1-D ids broadcast for index_select).
// The p-th index of the `check` layout (the ids as the CPU walks them, p < count) is
// range-checked: the first position out of range is recorded in `bad` (all ones while none
// is). When `same` is set, `check` is `read` (gather) and each thread checks the index it
// reads. An index out of range reads nothing, so no thread reads out of bounds.
// info: n, m, size, inner, count, same, base of x's layout, base of `read`, base of `check`.

typedef {{T}} T;
typedef {{K}} K;

extern "C" __global__ void kernel(const Info info, const T* __restrict__ x, const K* __restrict__ ids,
                                  T* __restrict__ out, u64* __restrict__ bad) {
    const u64 n = info.w[0], m = info.w[1], size = info.w[2], inner = info.w[3], count = info.w[4];
    const bool same = info.w[5] != 0;
    const u64 total = n > count ? n : count;
    for (u64 i = thread_start(); i < total; i += grid_step()) {
        if (!same && i < count && !in_range(ids[strided_offset(info, i, info.w[8])], size)) atomicMin(bad, i);
        if (i >= n) continue;
        const K id = ids[strided_offset(info, i, info.w[7])];
        if (!in_range(id, size)) {
            if (same) atomicMin(bad, i);
            continue;
        }
        const u64 o = i / (inner * m);
        out[i] = x[strided_offset(info, (o * size + (u64)id) * inner + i % inner, info.w[6])];
    }
}

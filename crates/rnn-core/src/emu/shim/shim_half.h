// shim_half.h (a part of cuda_shim.h, see there): __half and __nv_bfloat16, with every
// conversion rounded exactly once, and the arithmetic of cuda_fp16.h / cuda_bf16.h.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_half.h is a part of cuda_shim.h: include that"
#endif

// ---------------------------------------------------------------------------------------
// Exact rounding to the 16-bit float formats.
// ---------------------------------------------------------------------------------------
namespace rnn_emu {
namespace {
namespace fp {

// m / 2^s rounded to nearest, ties to even (s >= 1).
inline uint64_t rne_shift(uint64_t m, int s) {
    if (s > 64) return 0; // m / 2^s < 1/2
    const uint64_t n = s == 64 ? 0 : m >> s;
    const uint64_t rem = s == 64 ? m : m & ((1ull << s) - 1);
    const uint64_t half = 1ull << (s - 1);
    return n + ((rem > half || (rem == half && (n & 1))) ? 1 : 0);
}

// The bits (sign excluded) of m * 2^k rounded once to nearest-even in a binary format with
// `mant` fraction bits, exponent bias `bias` and `ebits` exponent bits; overflow gives inf.
inline unsigned round_bits(uint64_t m, int k, int mant, int bias, int ebits) {
    if (m == 0) return 0;
    const int e = 63 - __builtin_clzll(m) + k; // exponent of the leading bit
    const int emin = 1 - bias;
    const int top = e > emin ? e : emin;   // exponent of the result's leading bit position
    const int shift = top - mant - k;      // bits of m below the result's last bit
    const uint64_t n = shift <= 0 ? m << -shift : rne_shift(m, shift);
    // n includes the hidden bit, so a carry out of the fraction bumps the exponent, and a
    // subnormal (top == emin) rounding up to 2^mant becomes the smallest normal.
    const uint64_t bits = ((uint64_t)(top + bias - 1) << mant) + n;
    const uint64_t inf = ((1ull << ebits) - 1) << mant;
    return (unsigned)(bits >= inf ? inf : bits);
}

struct Format {
    int mant, bias, ebits;
    unsigned short inf, nan;
};
constexpr Format kHalf{10, 15, 5, 0x7c00, 0x7fff};
constexpr Format kBf16{7, 127, 8, 0x7f80, 0x7fff};

// float converts to double exactly, so this one path rounds floats and doubles alike once.
inline unsigned short from_double(double d, const Format& f) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    const unsigned sign = (unsigned)(b >> 63) << 15;
    const unsigned ex = (unsigned)(b >> 52) & 0x7ff;
    const uint64_t frac = b & ((1ull << 52) - 1);
    if (ex == 0x7ff) return frac ? f.nan : (unsigned short)(sign | f.inf);
    const uint64_t m = ex ? frac | (1ull << 52) : frac;
    const int k = (ex ? (int)ex : 1) - 1075;
    return (unsigned short)(sign | round_bits(m, k, f.mant, f.bias, f.ebits));
}

inline unsigned short from_int(bool negative, uint64_t magnitude, const Format& f) {
    return (unsigned short)((negative ? 0x8000u : 0u) | round_bits(magnitude, 0, f.mant, f.bias, f.ebits));
}
inline unsigned short from_signed(long long v, const Format& f) {
    return from_int(v < 0, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, f);
}

inline float bits_float(uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    return x;
}

inline float half_to_float(unsigned short h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t ex = (h >> 10) & 0x1f, frac = h & 0x3ff;
    if (ex == 0x1f) return bits_float(sign | 0x7f800000u | (frac << 13));
    if (ex == 0) { // zero or subnormal: frac * 2^-24, exact in float
        const float mag = (float)frac * 0x1p-24f;
        return sign ? -mag : mag;
    }
    return bits_float(sign | ((ex + 112) << 23) | (frac << 13));
}

inline float bf16_to_float(unsigned short h) { return bits_float((uint32_t)h << 16); }

// Float to integer as CUDA's cvt.rzi / cvt.rni: NaN gives 0, out of range saturates.
template <typename I> inline I to_int(double r) {
    if (r != r) return 0;
    if (r <= (double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (r >= (double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)r;
}

} // namespace fp
} // namespace
} // namespace rnn_emu

// ---------------------------------------------------------------------------------------
// __half and __nv_bfloat16: cuda_fp16.h / cuda_bf16.h (CUDA 12), types in the global
// namespace. Both stub headers are empty because the library includes them inside a
// kernel namespace.
// ---------------------------------------------------------------------------------------
namespace {

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

// One struct per format, generated so that the two stay identical. Construction from
// integers and the integer conversions mirror CUDA 12's headers (rn in, rz + saturate out).
#define RNN_EMU_HALF_TYPE(H, RAW, FMT, TO_FLOAT)                                               \
    struct H {                                                                                 \
        unsigned short __x;                                                                    \
        H() = default;                                                                         \
        constexpr H(const RAW& r) : __x(r.x) {}                                                \
        H(float f) : __x(rnn_emu::fp::from_double(f, FMT)) {}                                  \
        H(double d) : __x(rnn_emu::fp::from_double(d, FMT)) {}                                 \
        H(short v) : __x(rnn_emu::fp::from_signed(v, FMT)) {}                                  \
        H(unsigned short v) : __x(rnn_emu::fp::from_int(false, v, FMT)) {}                     \
        H(int v) : __x(rnn_emu::fp::from_signed(v, FMT)) {}                                    \
        H(unsigned int v) : __x(rnn_emu::fp::from_int(false, v, FMT)) {}                       \
        H(long v) : __x(rnn_emu::fp::from_signed(v, FMT)) {}                                   \
        H(unsigned long v) : __x(rnn_emu::fp::from_int(false, v, FMT)) {}                      \
        H(long long v) : __x(rnn_emu::fp::from_signed(v, FMT)) {}                              \
        H(unsigned long long v) : __x(rnn_emu::fp::from_int(false, v, FMT)) {}                 \
        H& operator=(const RAW& r) { __x = r.x; return *this; }                                \
        operator RAW() const { return RAW{__x}; }                                              \
        operator float() const { return TO_FLOAT(__x); }                                       \
        operator bool() const { return (__x & 0x7fff) != 0; }                                  \
        operator signed char() const { return rnn_emu::fp::to_int<signed char>(TO_FLOAT(__x)); }     \
        operator unsigned char() const { return rnn_emu::fp::to_int<unsigned char>(TO_FLOAT(__x)); } \
        operator short() const { return rnn_emu::fp::to_int<short>(TO_FLOAT(__x)); }                 \
        operator unsigned short() const { return rnn_emu::fp::to_int<unsigned short>(TO_FLOAT(__x)); } \
        operator int() const { return rnn_emu::fp::to_int<int>(TO_FLOAT(__x)); }                     \
        operator unsigned int() const { return rnn_emu::fp::to_int<unsigned int>(TO_FLOAT(__x)); }   \
        operator long() const { return rnn_emu::fp::to_int<long>(TO_FLOAT(__x)); }                   \
        operator unsigned long() const { return rnn_emu::fp::to_int<unsigned long>(TO_FLOAT(__x)); } \
        operator long long() const { return rnn_emu::fp::to_int<long long>(TO_FLOAT(__x)); }         \
        operator unsigned long long() const { return rnn_emu::fp::to_int<unsigned long long>(TO_FLOAT(__x)); } \
    };
RNN_EMU_HALF_TYPE(__half, __half_raw, rnn_emu::fp::kHalf, rnn_emu::fp::half_to_float)
RNN_EMU_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, rnn_emu::fp::kBf16, rnn_emu::fp::bf16_to_float)
#undef RNN_EMU_HALF_TYPE
static_assert(sizeof(__half) == 2 && sizeof(__nv_bfloat16) == 2, "16-bit float types");
static_assert(std::is_trivially_copyable<__half>::value && std::is_trivial<__nv_bfloat16>::value, "POD");

typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
struct alignas(4) __half2 { __half x, y; };
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

inline __half __ushort_as_half(unsigned short b) { return __half_raw{b}; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __short_as_half(short b) { return __half_raw{(unsigned short)b}; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16_raw{b}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __short_as_bfloat16(short b) { return __nv_bfloat16_raw{(unsigned short)b}; }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }

inline float __half2float(__half h) { return rnn_emu::fp::half_to_float(h.__x); }
inline float __bfloat162float(__nv_bfloat16 h) { return rnn_emu::fp::bf16_to_float(h.__x); }

// Conversions to the 16-bit types, all round-to-nearest-even applied once.
#define RNN_EMU_TO_16(H, P, FMT)                                                                     \
    inline H __float2##P(float x) { return __##P##_raw_from(rnn_emu::fp::from_double(x, FMT)); }    \
    inline H __float2##P##_rn(float x) { return __float2##P(x); }                                   \
    inline H __double2##P(double x) { return __##P##_raw_from(rnn_emu::fp::from_double(x, FMT)); }  \
    inline H __int2##P##_rn(int v) { return __##P##_raw_from(rnn_emu::fp::from_signed(v, FMT)); }   \
    inline H __short2##P##_rn(short v) { return __##P##_raw_from(rnn_emu::fp::from_signed(v, FMT)); } \
    inline H __ll2##P##_rn(long long v) { return __##P##_raw_from(rnn_emu::fp::from_signed(v, FMT)); } \
    inline H __uint2##P##_rn(unsigned v) { return __##P##_raw_from(rnn_emu::fp::from_int(false, v, FMT)); } \
    inline H __ushort2##P##_rn(unsigned short v) { return __##P##_raw_from(rnn_emu::fp::from_int(false, v, FMT)); } \
    inline H __ull2##P##_rn(unsigned long long v) { return __##P##_raw_from(rnn_emu::fp::from_int(false, v, FMT)); }
inline __half __half_raw_from(unsigned short b) { return __half_raw{b}; }
inline __nv_bfloat16 __bfloat16_raw_from(unsigned short b) { return __nv_bfloat16_raw{b}; }
RNN_EMU_TO_16(__half, half, rnn_emu::fp::kHalf)
RNN_EMU_TO_16(__nv_bfloat16, bfloat16, rnn_emu::fp::kBf16)
#undef RNN_EMU_TO_16

// Conversions from the 16-bit types to integers (round toward zero, saturating, NaN -> 0).
#define RNN_EMU_FROM_16(H, P, TOF)                                                               \
    inline int __##P##2int_rz(H h) { return rnn_emu::fp::to_int<int>(TOF(h)); }                  \
    inline unsigned __##P##2uint_rz(H h) { return rnn_emu::fp::to_int<unsigned>(TOF(h)); }       \
    inline short __##P##2short_rz(H h) { return rnn_emu::fp::to_int<short>(TOF(h)); }            \
    inline unsigned short __##P##2ushort_rz(H h) { return rnn_emu::fp::to_int<unsigned short>(TOF(h)); } \
    inline long long __##P##2ll_rz(H h) { return rnn_emu::fp::to_int<long long>(TOF(h)); }       \
    inline unsigned long long __##P##2ull_rz(H h) { return rnn_emu::fp::to_int<unsigned long long>(TOF(h)); } \
    inline int __##P##2int_rn(H h) { return rnn_emu::fp::to_int<int>(std::nearbyint(TOF(h))); }
RNN_EMU_FROM_16(__half, half, __half2float)
RNN_EMU_FROM_16(__nv_bfloat16, bfloat16, __bfloat162float)
#undef RNN_EMU_FROM_16

// Arithmetic and comparisons, for both types (CUDA overloads the same names). The sum,
// difference, product or quotient of two 16-bit values computed in float and rounded once
// is the correctly rounded 16-bit result (float has more than 2p+2 bits), as the GPU's.
inline __half __canonical_nan(__half) { return __half_raw{0x7fff}; }
inline __nv_bfloat16 __canonical_nan(__nv_bfloat16) { return __nv_bfloat16_raw{0x7fff}; }

#define RNN_EMU_HALF_MATH(H, TOF)                                                                  \
    inline bool __hisnan(H a) { return TOF(a) != TOF(a); }                                        \
    inline int __hisinf(H a) { return std::isinf(TOF(a)) ? (TOF(a) < 0 ? -1 : 1) : 0; }          \
    inline H __hadd(H a, H b) { return H(TOF(a) + TOF(b)); }                                      \
    inline H __hsub(H a, H b) { return H(TOF(a) - TOF(b)); }                                      \
    inline H __hmul(H a, H b) { return H(TOF(a) * TOF(b)); }                                      \
    inline H __hdiv(H a, H b) { return H(TOF(a) / TOF(b)); }                                      \
    /* a * b is exact in double and 53 >= 2p+2, so fma in double then one rounding is exact. */  \
    inline H __hfma(H a, H b, H c) { return H(std::fma((double)TOF(a), (double)TOF(b), (double)TOF(c))); } \
    inline H __hneg(H a) { H r; r.__x = (unsigned short)(a.__x ^ 0x8000); return r; }             \
    inline H __habs(H a) { H r; r.__x = (unsigned short)(a.__x & 0x7fff); return r; }            \
    inline bool __heq(H a, H b) { return TOF(a) == TOF(b); }                                      \
    inline bool __hne(H a, H b) { return TOF(a) < TOF(b) || TOF(a) > TOF(b); }                    \
    inline bool __hlt(H a, H b) { return TOF(a) < TOF(b); }                                       \
    inline bool __hle(H a, H b) { return TOF(a) <= TOF(b); }                                      \
    inline bool __hgt(H a, H b) { return TOF(a) > TOF(b); }                                       \
    inline bool __hge(H a, H b) { return TOF(a) >= TOF(b); }                                      \
    inline bool __hequ(H a, H b) { return !__hne(a, b); }                                         \
    inline bool __hneu(H a, H b) { return !__heq(a, b); }                                         \
    inline bool __hltu(H a, H b) { return !__hge(a, b); }                                         \
    inline bool __hleu(H a, H b) { return !__hgt(a, b); }                                         \
    inline bool __hgtu(H a, H b) { return !__hle(a, b); }                                         \
    inline bool __hgeu(H a, H b) { return !__hlt(a, b); }                                         \
    /* NaNs pass through (the other input wins; both NaN: canonical NaN); +0 > -0. */              \
    inline H __hmax(H a, H b) {                                                                   \
        if (__hisnan(a)) return __hisnan(b) ? __canonical_nan(a) : b;                             \
        if (__hisnan(b)) return a;                                                                \
        if (TOF(a) == TOF(b)) return (a.__x & 0x8000) ? b : a;                                    \
        return TOF(a) > TOF(b) ? a : b;                                                           \
    }                                                                                             \
    inline H __hmin(H a, H b) {                                                                   \
        if (__hisnan(a)) return __hisnan(b) ? __canonical_nan(a) : b;                             \
        if (__hisnan(b)) return a;                                                                \
        if (TOF(a) == TOF(b)) return (a.__x & 0x8000) ? a : b;                                    \
        return TOF(a) < TOF(b) ? a : b;                                                           \
    }                                                                                             \
    /* Either input NaN: canonical NaN. */                                                        \
    inline H __hmax_nan(H a, H b) { return __hisnan(a) || __hisnan(b) ? __canonical_nan(a) : __hmax(a, b); } \
    inline H __hmin_nan(H a, H b) { return __hisnan(a) || __hisnan(b) ? __canonical_nan(a) : __hmin(a, b); } \
    inline H operator+(const H& a, const H& b) { return __hadd(a, b); }                           \
    inline H operator-(const H& a, const H& b) { return __hsub(a, b); }                           \
    inline H operator*(const H& a, const H& b) { return __hmul(a, b); }                           \
    inline H operator/(const H& a, const H& b) { return __hdiv(a, b); }                           \
    inline H& operator+=(H& a, const H& b) { return a = __hadd(a, b); }                           \
    inline H& operator-=(H& a, const H& b) { return a = __hsub(a, b); }                           \
    inline H& operator*=(H& a, const H& b) { return a = __hmul(a, b); }                           \
    inline H& operator/=(H& a, const H& b) { return a = __hdiv(a, b); }                           \
    inline H operator+(const H& a) { return a; }                                                  \
    inline H operator-(const H& a) { return __hneg(a); }                                          \
    inline H& operator++(H& a) { return a = __hadd(a, H(1.0f)); }                                 \
    inline H& operator--(H& a) { return a = __hsub(a, H(1.0f)); }                                 \
    inline H operator++(H& a, int) { H r = a; ++a; return r; }                                    \
    inline H operator--(H& a, int) { H r = a; --a; return r; }                                    \
    inline bool operator==(const H& a, const H& b) { return __heq(a, b); }                        \
    inline bool operator!=(const H& a, const H& b) { return __hneu(a, b); }                       \
    inline bool operator<(const H& a, const H& b) { return __hlt(a, b); }                         \
    inline bool operator<=(const H& a, const H& b) { return __hle(a, b); }                        \
    inline bool operator>(const H& a, const H& b) { return __hgt(a, b); }                         \
    inline bool operator>=(const H& a, const H& b) { return __hge(a, b); }                        \
    inline H hsqrt(H a) { return H(std::sqrt(TOF(a))); }                                          \
    inline H hrsqrt(H a) { return H(1.0 / std::sqrt((double)TOF(a))); }                           \
    inline H hrcp(H a) { return H(1.0f / TOF(a)); }                                               \
    inline H hexp(H a) { return H(std::exp(TOF(a))); }                                            \
    inline H hexp2(H a) { return H(std::exp2(TOF(a))); }                                          \
    inline H hexp10(H a) { return H(::exp10f(TOF(a))); }                                          \
    inline H hlog(H a) { return H(std::log(TOF(a))); }                                            \
    inline H hlog2(H a) { return H(std::log2(TOF(a))); }                                          \
    inline H hlog10(H a) { return H(std::log10(TOF(a))); }                                        \
    inline H hsin(H a) { return H(std::sin(TOF(a))); }                                            \
    inline H hcos(H a) { return H(std::cos(TOF(a))); }                                            \
    inline H htanh(H a) { return H(std::tanh(TOF(a))); }                                          \
    inline H hceil(H a) { return H(std::ceil(TOF(a))); }                                          \
    inline H hfloor(H a) { return H(std::floor(TOF(a))); }                                        \
    inline H htrunc(H a) { return H(std::trunc(TOF(a))); }                                        \
    inline H hrint(H a) { return H(std::nearbyint(TOF(a))); }
RNN_EMU_HALF_MATH(__half, __half2float)
RNN_EMU_HALF_MATH(__nv_bfloat16, __bfloat162float)
#undef RNN_EMU_HALF_MATH

// Pairs.
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __float2half2_rn(float a) { return {__float2half(a), __float2half(a)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return {__float2bfloat16(a), __float2bfloat16(a)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline __half2 __hadd2(__half2 a, __half2 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }
inline __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hadd(a.x, b.x), __hadd(a.y, b.y)}; }
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmul(a.x, b.x), __hmul(a.y, b.y)}; }

} // namespace

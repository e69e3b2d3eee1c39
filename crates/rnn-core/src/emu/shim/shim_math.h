// shim_math.h (a part of cuda_shim.h, see there): the math library with CUDA's overload
// set, CUDA-only functions, fast intrinsics, conversions with explicit rounding, bit casts,
// integer intrinsics, loads and stores with cache hints, clock64.
#ifndef RNN_EMU_CUDA_SHIM_H
#error "shim_math.h is a part of cuda_shim.h: include that"
#endif

// ---------------------------------------------------------------------------------------
// Math with CUDA's (NVRTC's) overload set: glibc declares the C functions (double and the
// `f` forms); these add what CUDA adds in the global namespace. There is deliberately no
// std-style template for mixed arguments, so fmax(float, int) is the float fmax and
// exp(int) is ambiguous, as under NVRTC. These are `static` members of the global namespace
// itself (not of an unnamed one), so that a qualified ::exp(x) finds them too, as in CUDA.
// ---------------------------------------------------------------------------------------

#define RNN_EMU_F1(name) static inline float name(float x) { return ::name##f(x); }
RNN_EMU_F1(acos) RNN_EMU_F1(asin) RNN_EMU_F1(atan) RNN_EMU_F1(acosh) RNN_EMU_F1(asinh)
RNN_EMU_F1(atanh) RNN_EMU_F1(cos) RNN_EMU_F1(sin) RNN_EMU_F1(tan) RNN_EMU_F1(cosh)
RNN_EMU_F1(sinh) RNN_EMU_F1(tanh) RNN_EMU_F1(exp) RNN_EMU_F1(exp2) RNN_EMU_F1(expm1)
RNN_EMU_F1(exp10) RNN_EMU_F1(log) RNN_EMU_F1(log2) RNN_EMU_F1(log10) RNN_EMU_F1(log1p)
RNN_EMU_F1(logb) RNN_EMU_F1(sqrt) RNN_EMU_F1(cbrt) RNN_EMU_F1(erf) RNN_EMU_F1(erfc)
RNN_EMU_F1(lgamma) RNN_EMU_F1(tgamma) RNN_EMU_F1(ceil) RNN_EMU_F1(floor) RNN_EMU_F1(trunc)
RNN_EMU_F1(round) RNN_EMU_F1(rint) RNN_EMU_F1(nearbyint) RNN_EMU_F1(fabs)
#undef RNN_EMU_F1
#define RNN_EMU_F2(name) static inline float name(float a, float b) { return ::name##f(a, b); }
RNN_EMU_F2(atan2) RNN_EMU_F2(fmod) RNN_EMU_F2(remainder) RNN_EMU_F2(hypot) RNN_EMU_F2(fdim)
RNN_EMU_F2(fmax) RNN_EMU_F2(fmin) RNN_EMU_F2(copysign) RNN_EMU_F2(nextafter) RNN_EMU_F2(pow)
#undef RNN_EMU_F2
static inline float pow(float a, int b) { return ::powf(a, (float)b); }
static inline double pow(double a, int b) { return ::pow(a, (double)b); }
static inline float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
static inline float ldexp(float a, int e) { return ::ldexpf(a, e); }
static inline float scalbn(float a, int e) { return ::scalbnf(a, e); }
static inline float scalbln(float a, long e) { return ::scalblnf(a, e); }
static inline float frexp(float a, int* e) { return ::frexpf(a, e); }
static inline float modf(float a, float* i) { return ::modff(a, i); }
static inline float remquo(float a, float b, int* q) { return ::remquof(a, b, q); }
static inline int ilogb(float a) { return ::ilogbf(a); }
static inline long lround(float a) { return ::lroundf(a); }
static inline long long llround(float a) { return ::llroundf(a); }
static inline long lrint(float a) { return ::lrintf(a); }
static inline long long llrint(float a) { return ::llrintf(a); }
static inline double copysign(double a, float b) { return ::copysign(a, (double)b); }
static inline double copysign(float a, double b) { return ::copysign((double)a, b); }
static inline void sincos(float a, float* s, float* c) { ::sincosf(a, s, c); }
static inline float abs(float a) { return ::fabsf(a); }
static inline double abs(double a) { return ::fabs(a); }
static inline long abs(long a) { return ::labs(a); }
static inline long long abs(long long a) { return ::llabs(a); }
// Classification (glibc's C++ mode leaves these to std::; CUDA declares them globally).
#define RNN_EMU_CLASSIFY(name, builtin) \
    static inline int name(float x) { return builtin(x); } \
    static inline int name(double x) { return builtin(x); } \
    static inline int name(long double x) { return builtin(x); }
RNN_EMU_CLASSIFY(isnan, __builtin_isnan) RNN_EMU_CLASSIFY(isinf, __builtin_isinf)
RNN_EMU_CLASSIFY(isfinite, __builtin_isfinite) RNN_EMU_CLASSIFY(signbit, __builtin_signbit)
#undef RNN_EMU_CLASSIFY

// CUDA-only functions. The `template <class = void>` forms lose to a C library function of
// the same signature, so a libc that adds e.g. C23's rsqrt does not make calls ambiguous.
static inline double rnn_erfinv_core(double t);
template <class = void> static inline double rsqrt(double x) { return 1.0 / ::sqrt(x); }
template <class = void> static inline float rsqrtf(float x) { return (float)(1.0 / ::sqrt((double)x)); }
static inline float rsqrt(float x) { return rsqrtf(x); }
template <class = void> static inline double rcbrt(double x) { return 1.0 / ::cbrt(x); }
template <class = void> static inline float rcbrtf(float x) { return (float)(1.0 / ::cbrt((double)x)); }
static inline float rcbrt(float x) { return rcbrtf(x); }
// sin(pi x) on x mod 2 in [-1, 1], folded to [-0.5, 0.5] (exact steps), so that integers
// give zeros and half-integers +-1 exactly, as CUDA's do; cos(pi x) = sin(pi (0.5 - |x|)).
template <class = void> static inline double sinpi(double x) {
    double r = ::remainder(x, 2.0);
    if (::fabs(r) > 0.5) r = ::copysign(1.0, r) - r;
    return ::sin(M_PI * r);
}
template <class = void> static inline double cospi(double x) {
    if (::isinf(x)) return NAN;
    return sinpi(0.5 - ::fabs(::remainder(x, 2.0)));
}
template <class = void> static inline float sinpif(float x) { return (float)sinpi((double)x); }
template <class = void> static inline float cospif(float x) { return (float)cospi((double)x); }
static inline float sinpi(float x) { return sinpif(x); }
static inline float cospi(float x) { return cospif(x); }
template <class = void> static inline void sincospi(double x, double* s, double* c) { *s = sinpi(x); *c = cospi(x); }
template <class = void> static inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
static inline void sincospi(float x, float* s, float* c) { sincospif(x, s, c); }
template <class = void> static inline double normcdf(double x) { return 0.5 * ::erfc(-x * M_SQRT1_2); }
template <class = void> static inline float normcdff(float x) { return (float)normcdf((double)x); }
static inline float normcdf(float x) { return normcdff(x); }
// z with erf(z) = x, through erfc near +-1 so that no precision is lost there.
template <class = void> static inline double erfinv(double x) {
    if (!(x > -1.0 && x < 1.0)) return x == 1.0 ? HUGE_VAL : x == -1.0 ? -HUGE_VAL : NAN;
    const double a = ::fabs(x);
    return ::copysign(a < 0.5 ? rnn_erfinv_core(-a) : rnn_erfinv_core(1.0 - a), x);
}
template <class = void> static inline double erfcinv(double t) {
    if (!(t > 0.0 && t < 2.0)) return t == 0.0 ? HUGE_VAL : t == 2.0 ? -HUGE_VAL : NAN;
    if (t > 1.0) return -erfcinv(2.0 - t);            // 2 - t is exact here
    return t > 0.5 ? rnn_erfinv_core(-(1.0 - t)) : rnn_erfinv_core(t);
}
template <class = void> static inline float erfinvf(float x) { return (float)erfinv((double)x); }
template <class = void> static inline float erfcinvf(float x) { return (float)erfcinv((double)x); }
static inline float erfinv(float x) { return erfinvf(x); }
static inline float erfcinv(float x) { return erfcinvf(x); }
template <class = void> static inline double normcdfinv(double p) { return -M_SQRT2 * erfcinv(2.0 * p); }
template <class = void> static inline float normcdfinvf(float p) { return (float)normcdfinv((double)p); }
static inline float normcdfinv(float p) { return normcdfinvf(p); }
// Negative v: erfinv(-v) for |v| < 0.5 (Newton on erf). Else v = erfc(z) in (0, 0.5]
// (Newton on erfc). Giles' single-precision approximation starts both.
static inline double rnn_erfinv_core(double v) {
    const bool small = v <= 0.0;
    const double x = small ? -v : 1.0 - v, t = small ? 1.0 - x : v;
    double w = -::log(t * (2.0 - t)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08; p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w; p = 0.00021858087 + p * w; p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w; p = 0.246640727 + p * w; p = 1.50140941 + p * w;
    } else {
        w = ::sqrt(w) - 3.0;
        p = -0.000200214257; p = 0.000100950558 + p * w; p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w; p = 0.00573950773 + p * w; p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w; p = 1.00167406 + p * w; p = 2.83297682 + p * w;
    }
    double z = p * x;
    for (int i = 0; i < 3; ++i) {
        const double slope = 1.1283791670955126 * ::exp(-z * z); // d erf / dz
        if (slope == 0.0) break;
        z += small ? (x - ::erf(z)) / slope : (::erfc(z) - t) / slope;
    }
    return z;
}

// min / max as CUDA declares them (integers of every width, mixed signedness, floats).
#define RNN_EMU_MINMAX(R, A, B)                                             \
    static inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; }            \
    static inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
RNN_EMU_MINMAX(int, int, int)
RNN_EMU_MINMAX(unsigned int, unsigned int, unsigned int)
RNN_EMU_MINMAX(unsigned int, int, unsigned int)
RNN_EMU_MINMAX(unsigned int, unsigned int, int)
RNN_EMU_MINMAX(long, long, long)
RNN_EMU_MINMAX(unsigned long, unsigned long, unsigned long)
RNN_EMU_MINMAX(unsigned long, long, unsigned long)
RNN_EMU_MINMAX(unsigned long, unsigned long, long)
RNN_EMU_MINMAX(long long, long long, long long)
RNN_EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
RNN_EMU_MINMAX(unsigned long long, long long, unsigned long long)
RNN_EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef RNN_EMU_MINMAX
static inline float min(float a, float b) { return ::fminf(a, b); }
static inline float max(float a, float b) { return ::fmaxf(a, b); }
static inline double min(double a, double b) { return ::fmin(a, b); }
static inline double max(double a, double b) { return ::fmax(a, b); }
static inline double min(float a, double b) { return ::fmin((double)a, b); }
static inline double max(float a, double b) { return ::fmax((double)a, b); }
static inline double min(double a, float b) { return ::fmin(a, (double)b); }
static inline double max(double a, float b) { return ::fmax(a, (double)b); }
static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// Fast intrinsics, here the accurate glibc functions. glibc's <math.h> itself declares
// (without exporting) __expf, __logf, __sinf ...; these macros route CUDA's names to our
// own functions instead (cuda_shim.h includes every system header before its parts, so
// none sees them).
static inline float rnn_emu_expf(float x) { return ::expf(x); }
static inline float rnn_emu_exp10f(float x) { return ::exp10f(x); }
static inline float rnn_emu_logf(float x) { return ::logf(x); }
static inline float rnn_emu_log2f(float x) { return ::log2f(x); }
static inline float rnn_emu_log10f(float x) { return ::log10f(x); }
static inline float rnn_emu_sinf(float x) { return ::sinf(x); }
static inline float rnn_emu_cosf(float x) { return ::cosf(x); }
static inline float rnn_emu_tanf(float x) { return ::tanf(x); }
static inline void rnn_emu_sincosf(float x, float* s, float* c) { ::sincosf(x, s, c); }
static inline float rnn_emu_powf(float a, float b) { return ::powf(a, b); }
#define __expf rnn_emu_expf
#define __exp10f rnn_emu_exp10f
#define __logf rnn_emu_logf
#define __log2f rnn_emu_log2f
#define __log10f rnn_emu_log10f
#define __sinf rnn_emu_sinf
#define __cosf rnn_emu_cosf
#define __tanf rnn_emu_tanf
#define __sincosf rnn_emu_sincosf
#define __powf rnn_emu_powf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; } // NaN -> 0
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return ::sqrtf(a); }
static inline float __frsqrt_rn(float a) { return rsqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return ::fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __drcp_rn(double a) { return 1.0 / a; }
static inline double __dsqrt_rn(double a) { return ::sqrt(a); }
static inline double __fma_rn(double a, double b, double c) { return ::fma(a, b, c); }

namespace {

// Float <-> integer conversions with explicit rounding: NaN -> 0, saturating.
#define RNN_EMU_F2I(F, P, I)                                                                  \
    inline I __##F##2##P##_rn(F x) { return rnn_emu::fp::to_int<I>(std::nearbyint((double)x)); } \
    inline I __##F##2##P##_rz(F x) { return rnn_emu::fp::to_int<I>(std::trunc((double)x)); }     \
    inline I __##F##2##P##_ru(F x) { return rnn_emu::fp::to_int<I>(std::ceil((double)x)); }      \
    inline I __##F##2##P##_rd(F x) { return rnn_emu::fp::to_int<I>(std::floor((double)x)); }
RNN_EMU_F2I(float, int, int) RNN_EMU_F2I(float, uint, unsigned int)
RNN_EMU_F2I(float, ll, long long) RNN_EMU_F2I(float, ull, unsigned long long)
RNN_EMU_F2I(double, int, int) RNN_EMU_F2I(double, uint, unsigned int)
RNN_EMU_F2I(double, ll, long long) RNN_EMU_F2I(double, ull, unsigned long long)
#undef RNN_EMU_F2I
// The host's int -> float conversions round once to nearest even (SSE / AArch64 FPU).
inline float __int2float_rn(int v) { return (float)v; }
inline float __uint2float_rn(unsigned v) { return (float)v; }
inline float __ll2float_rn(long long v) { return (float)v; }
inline float __ull2float_rn(unsigned long long v) { return (float)v; }
inline double __int2double_rn(int v) { return (double)v; }
inline double __uint2double_rn(unsigned v) { return (double)v; }
inline double __ll2double_rn(long long v) { return (double)v; }
inline double __ull2double_rn(unsigned long long v) { return (double)v; }
inline float __double2float_rn(double v) { return (float)v; }

// Bit casts.
template <class To, class From> inline To rnn_bit_cast(From v) {
    static_assert(sizeof(To) == sizeof(From), "bit cast");
    To r;
    std::memcpy(&r, &v, sizeof r);
    return r;
}
inline float __int_as_float(int v) { return rnn_bit_cast<float>(v); }
inline int __float_as_int(float v) { return rnn_bit_cast<int>(v); }
inline float __uint_as_float(unsigned v) { return rnn_bit_cast<float>(v); }
inline unsigned __float_as_uint(float v) { return rnn_bit_cast<unsigned>(v); }
inline double __longlong_as_double(long long v) { return rnn_bit_cast<double>(v); }
inline long long __double_as_longlong(double v) { return rnn_bit_cast<long long>(v); }
inline int __double2hiint(double v) { return (int)(rnn_bit_cast<unsigned long long>(v) >> 32); }
inline int __double2loint(double v) { return (int)rnn_bit_cast<unsigned long long>(v); }
inline double __hiloint2double(int hi, int lo) {
    return rnn_bit_cast<double>(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo);
}

// Integer intrinsics.
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
__extension__ typedef __int128 rnn_i128;
__extension__ typedef unsigned __int128 rnn_u128;
inline long long __mul64hi(long long a, long long b) { return (long long)(((rnn_i128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((rnn_u128)a * b) >> 64);
}
inline int __mul24(int a, int b) { return (int)((long long)((a << 8) >> 8) * ((b << 8) >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
inline unsigned __uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
inline unsigned __urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }
inline unsigned __sad(int a, int b, unsigned c) { return (a > b ? (unsigned)a - (unsigned)b : (unsigned)b - (unsigned)a) + c; }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return (a > b ? a - b : b - a) + c; }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (((s >> (4 * i)) & 7) * 8)) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((((unsigned long long)hi << 32) | lo) << (s & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)(((((unsigned long long)hi << 32) | lo) << (s < 32 ? s : 32)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s < 32 ? s : 32));
}

// Loads and stores with cache hints are plain accesses.
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

inline long long clock64() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}

} // namespace

// ISA detection and the kernel table. Per-ISA kernels are weak symbols: a format an ISA file does
// not (yet) implement falls back to the scalar kernel by name (ggml's arch/ pattern).
#include "cpu/dispatch.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define FT_DECL(fmt, isa)                                                                                       \
  void rows_##fmt##_##isa(const WeightMat&, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t) \
      __attribute__((weak));
#define FT_DECL_ALL(isa) \
  FT_DECL(bf16, isa) FT_DECL(f16, isa) FT_DECL(fp8, isa) FT_DECL(mxfp4, isa) FT_DECL(nvfp4, isa) FT_DECL(int4, isa) \
      FT_DECL(int8, isa) FT_DECL(q4k, isa) FT_DECL(q5k, isa) FT_DECL(q6k, isa) \
      FT_DECL(q3k, isa) FT_DECL(q2k, isa)

#define FT_DECL_Q8(fmt, isa) \
  void rows_q8_##fmt##_##isa(const WeightMat&, int64_t, int64_t, const Q8Act&, float*, int64_t) __attribute__((weak));

#define FT_DECL_BF16(fmt) \
  void rows_bf16act_##fmt##_avx512bf16(const WeightMat&, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*, \
                                       int64_t) __attribute__((weak));

namespace ft {

FT_DECL_BF16(bf16) FT_DECL_BF16(int8) FT_DECL_BF16(mxfp4) FT_DECL_BF16(nvfp4) FT_DECL_BF16(int4) FT_DECL_BF16(q4k) FT_DECL_BF16(q5k)
FT_DECL_BF16(q6k) FT_DECL_BF16(q3k) FT_DECL_BF16(q2k) FT_DECL_BF16(q4kx16) FT_DECL_BF16(q5kx16) FT_DECL_BF16(q6kx16)
FT_DECL_BF16(q3kx16)
FT_DECL_BF16(mxfp4x16) FT_DECL_BF16(int4x16) FT_DECL_BF16(int8x16) FT_DECL_BF16(fp8x16)
void rows_bf16act_bf16_avx2(const WeightMat&, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t)
    __attribute__((weak));
FT_DECL_Q8(mxfp4, avx2) FT_DECL_Q8(nvfp4, avx2) FT_DECL_Q8(int4, avx2)
FT_DECL_Q8(mxfp4, avx512vnni) FT_DECL_Q8(nvfp4, avx512vnni) FT_DECL_Q8(int4, avx512vnni)
FT_DECL_Q8(q4k, avx2) FT_DECL_Q8(q5k, avx2) FT_DECL_Q8(q6k, avx2) FT_DECL_Q8(q3k, avx2) FT_DECL_Q8(q2k, avx2)
FT_DECL_Q8(q4k, avx512vnni) FT_DECL_Q8(q5k, avx512vnni) FT_DECL_Q8(q6k, avx512vnni) FT_DECL_Q8(q3k, avx512vnni)
FT_DECL_Q8(q2k, avx512vnni)
FT_DECL_Q8(q4kx16, avx2) FT_DECL_Q8(q4kx16, avx512vnni) FT_DECL_Q8(q4kx16, avxvnni)
FT_DECL_Q8(int4x16, avx2) FT_DECL_Q8(int4x16, avx512vnni) FT_DECL_Q8(int4x16, avxvnni)
FT_DECL_Q8(mxfp4x16, avx2) FT_DECL_Q8(mxfp4x16, avx512vnni) FT_DECL_Q8(mxfp4x16, avxvnni)
FT_DECL_Q8(q6kx16, avx2) FT_DECL_Q8(q6kx16, avx512vnni) FT_DECL_Q8(q6kx16, avxvnni)
FT_DECL_Q8(q5kx16, avx2) FT_DECL_Q8(q5kx16, avx512vnni) FT_DECL_Q8(q5kx16, avxvnni)
FT_DECL_Q8(q3kx16, avx2) FT_DECL_Q8(q3kx16, avx512vnni) FT_DECL_Q8(q3kx16, avxvnni)
#define FT_DECL_Q16(fmt) \
  void rows_q16_##fmt##_avx2(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
FT_DECL_Q16(q4k) FT_DECL_Q16(q5k) FT_DECL_Q16(q6k) FT_DECL_Q16(q3k) FT_DECL_Q16(q2k)
FT_DECL_Q16(int4) FT_DECL_Q16(q4kx16) FT_DECL_Q16(int4x16) FT_DECL_Q16(mxfp4x16) FT_DECL_Q16(int8x16)
#define FT_DECL_Q16_VNNI(fmt) \
  void rows_q16_##fmt##_avxvnni(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
FT_DECL_Q16_VNNI(q4kx16) FT_DECL_Q16_VNNI(int4x16) FT_DECL_Q16_VNNI(mxfp4x16) FT_DECL_Q16_VNNI(int8x16)
FT_DECL_Q16_VNNI(q6kx16) FT_DECL_Q16_VNNI(q5kx16) FT_DECL_Q16_VNNI(q3kx16)
void rows_q16_q4kx16_avx512vnni(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
void rows_q16_q4kx16_avx512vnni_ymm1(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
void rows_q16_int4x16_avx512vnni(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
void rows_q16_mxfp4x16_avx512vnni(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
void rows_q16_int8x16_avx512vnni(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
void rows_q16_q5kx16_avx512vnni(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
void rows_q16_q3kx16_avx512vnni(const WeightMat&, int64_t, int64_t, const Q16Act&, float*, int64_t) __attribute__((weak));
#define FT_DECL_TILE(fmt) \
  void rows_tile_##fmt##_amx(const WeightMat&, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t) \
      __attribute__((weak));
FT_DECL_TILE(q4kx16) FT_DECL_TILE(mxfp4x16) FT_DECL_TILE(int4x16) FT_DECL_TILE(q6k) FT_DECL_TILE(int8x16)
FT_DECL_TILE(fp8x16)
void quantize_q16_avx2(const uint16_t*, int64_t, int16_t*, float*, float*) __attribute__((weak));
void quantize_q8_avx2(const float*, int64_t, int8_t*, float*, float*) __attribute__((weak));
void rms_norm_bf16_avx2(const uint16_t*, const void*, bool, int64_t, int64_t, float, uint16_t*) __attribute__((weak));
void f32_to_bf16_avx2(const float*, int64_t, uint16_t*, float*) __attribute__((weak));
void add_bf16_avx2(uint16_t*, const uint16_t*, const float*, int64_t) __attribute__((weak));
FT_DECL_ALL(avx2)
FT_DECL_ALL(avx512)
FT_DECL_ALL(neon)
void attn_span_scalar(const DecodeAttn&, int64_t, int64_t, int64_t, float*, int64_t);
void attn_span_avx2(const DecodeAttn&, int64_t, int64_t, int64_t, float*, int64_t) __attribute__((weak));
void attn_span_avx512(const DecodeAttn&, int64_t, int64_t, int64_t, float*, int64_t) __attribute__((weak));
void attn_span_neon(const DecodeAttn&, int64_t, int64_t, int64_t, float*, int64_t) __attribute__((weak));
void attn_span_avx512bf16(const DecodeAttn&, int64_t, int64_t, int64_t, float*, int64_t) __attribute__((weak));
bool attn_decode_bf16_shapes(int64_t, int64_t, int64_t) __attribute__((weak));
void attn_prefill_scalar(const PrefillAttn&, const PrefillTask&);
void attn_prefill_avx512bf16(const PrefillAttn&, const PrefillTask&) __attribute__((weak));
void gdn_head_scalar(const GdnDecode&, int64_t, int64_t, float*);
void gdn_head_avx2(const GdnDecode&, int64_t, int64_t, float*) __attribute__((weak));
void gdn_head_avx512(const GdnDecode&, int64_t, int64_t, float*) __attribute__((weak));
void gdn_head_neon(const GdnDecode&, int64_t, int64_t, float*) __attribute__((weak));
void gdn_rule_scalar(const GdnPrefill&, const float*, int64_t, int64_t, int64_t, float*);
void gdn_rule_avx2(const GdnPrefill&, const float*, int64_t, int64_t, int64_t, float*) __attribute__((weak));
void gdn_rule_avx512(const GdnPrefill&, const float*, int64_t, int64_t, int64_t, float*) __attribute__((weak));
void gdn_rule_neon(const GdnPrefill&, const float*, int64_t, int64_t, int64_t, float*) __attribute__((weak));

static std::string detect() {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return __builtin_cpu_supports("avx512bf16") ? "avx512bf16" : "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) return "avx2";
  return "scalar";
#elif defined(__aarch64__)
  return "neon";
#else
  return "scalar";
#endif
}

static bool supports(const std::string& best, const std::string& want) {
  if (want == "scalar" || want == best) return true;
  if (best == "avx512bf16") return want == "avx512" || want == "avx2";
  return best == "avx512" && want == "avx2";
}

static std::string chosen_isa() {
  const std::string best = detect();
  const char* forced = std::getenv("FT_CPU_ISA");
  if (!forced || !*forced) return best;
  const std::string f(forced);
  if (f != "scalar" && f != "avx2" && f != "avx512" && f != "avx512bf16" && f != "neon")
    throw std::invalid_argument("FT_CPU_ISA=" + f + " is not one of: scalar, avx2, avx512, avx512bf16, neon");
  if (!supports(best, f)) throw std::invalid_argument("FT_CPU_ISA=" + f + " but this CPU supports at most " + best);
  return f;
}

// Read once per process (every kernel call dispatches through it: getenv each time was ~0.2 % of a decode step); a
// bad FT_CPU_ISA throws at every call.
const char* active_isa() {
  static const std::string isa = chosen_isa();
  return isa.c_str();
}

static bool is_avx512(const std::string& isa) { return isa == "avx512" || isa == "avx512bf16"; }

#define FT_PICK(fmt)                                                      \
  if (is_avx512(isa) && rows_##fmt##_avx512) return rows_##fmt##_avx512; \
  if ((is_avx512(isa) || isa == "avx2") && rows_##fmt##_avx2) return rows_##fmt##_avx2; \
  if (isa == "neon" && rows_##fmt##_neon) return rows_##fmt##_neon;       \
  return rows_scalar;

RowsFn rows_kernel(Fmt fmt) {
  const std::string isa = active_isa();
  switch (fmt) {
    case Fmt::BF16: FT_PICK(bf16)
    case Fmt::F16: FT_PICK(f16)
    case Fmt::FP8_E4M3: FT_PICK(fp8)
    case Fmt::MXFP4: FT_PICK(mxfp4)
    case Fmt::NVFP4: FT_PICK(nvfp4)
    case Fmt::INT4_SYM:
    case Fmt::INT4_ASYM: FT_PICK(int4)
    case Fmt::INT8_SYM: FT_PICK(int8)
    case Fmt::Q4_K: FT_PICK(q4k)
    case Fmt::Q5_K: FT_PICK(q5k)
    case Fmt::Q6_K: FT_PICK(q6k)
    case Fmt::Q3_K: FT_PICK(q3k)
    case Fmt::Q2_K: FT_PICK(q2k)
    default: return rows_scalar;
  }
}

// The AVX-512 q8 kernels need VNNI too (Ice Lake, Zen 4 and later; not Skylake-X), checked apart from the level.
static bool has_vnni() {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// AMD's family as CPUID leaf 1 gives it (base plus extended family: 0x17 Zen 1/2, 0x19 Zen 3/4, 0x1A Zen 5); 0 on other
// vendors' CPUs.
static unsigned amd_family_of_cpu() {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__builtin_cpu_is("amd") || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const unsigned base = (a >> 8) & 0xF;
  return base == 0xF ? base + ((a >> 20) & 0xFF) : base;
#else
  return 0;
#endif
}
static unsigned amd_family() {
  static const unsigned family = amd_family_of_cpu();
  return family;
}

// Non-temporal prefetch into L1 of the AVX-512 X16 kernels' weight stream on Zen 5: streamed lines skip L2, so L2
// does not evict them into L3 (a victim cache on Zen) as they pass. 2 Zen 5 cores (read bandwidth in its ~54 GB/s
// regime), [65536, 2048] from DRAM at one token, GMAC/s, into L2 -> NTA: INT8_SYM_X16 34.6-36.8 -> 40.5-41.4,
// MXFP4_X16 69-76 -> 95-96, Q5_K_X16 51-54 -> 58-59, Q6_K_X16 46-48 -> 50, Q4_K_X16 68-72 -> 71-75; 48-layer models,
// decode tok/s, paired: MXFP4_MOE 24.0-24.7 -> 25.5-27.8, Q3_K_M 31.6-32.0 -> 33.2-34.1, Q5_K_M 20.2-20.7 ->
// 20.9-22.0, Q4_K_M 24.9-25.3 -> 25.3-25.6 (at ~90 GB/s Q3_K_M 39.6-40.4 either way). Zen 4 and Intel keep L2 (not
// measured with NTA).
// FT_X16_PREFETCH, read once: 1 nta, 0 l2, -1 unset, -2 another value.
static int x16_prefetch_forced() {
  static const int forced = [] {
    const char* f = std::getenv("FT_X16_PREFETCH");
    if (!f || !*f) return -1;
    const std::string v(f);
    return v == "nta" ? 1 : v == "l2" ? 0 : -2;
  }();
  return forced;
}
bool x16_prefetch_nta() {
  const int forced = x16_prefetch_forced();
  return forced >= 0 ? forced == 1 : amd_family() >= 0x1A;
}
void check_x16_prefetch() {
  if (x16_prefetch_forced() == -2)
    throw std::invalid_argument("FT_X16_PREFETCH=" + std::string(std::getenv("FT_X16_PREFETCH")) + " is not nta or l2");
}

// AVX-VNNI (CPUID.(7, 1):EAX bit 4: Alder Lake and later Intel desktops and laptops, Zen 5): the AVX2 rows-in-lanes
// 16-bit kernels built with `vpdpwssd` on ymm (x86_avx2_x16.h), where the AVX-512 ones are not taken. FT_AVX_VNNI=0
// keeps the AVX2 ones (a Zen 2/3 machine's); 1 asks for them (an error where the CPU lacks it); unset: where it has it.
static bool avx_vnni_on() {
  bool has = false;
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a = 0, b = 0, c = 0, d = 0;
  has = __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1) && rows_q16_q4kx16_avxvnni;
#endif
  const char* forced = std::getenv("FT_AVX_VNNI");
  if (forced && *forced) {
    const std::string f(forced);
    if (f != "0" && f != "1") throw std::invalid_argument("FT_AVX_VNNI=" + f + " is not 0 or 1");
    if (f == "0") return false;
    if (!has) throw std::invalid_argument("FT_AVX_VNNI=1 but this CPU (or this build) has no AVX-VNNI");
  }
  return has;
}

#define FT_PICK_Q8(fmt)                                                                         \
  if (is_avx512(isa) && vnni && rows_q8_##fmt##_avx512vnni) return rows_q8_##fmt##_avx512vnni; \
  if ((is_avx512(isa) || isa == "avx2") && rows_q8_##fmt##_avx2) return rows_q8_##fmt##_avx2; \
  return rows_q8_scalar;

// Rows in the lanes (x86_avx2_x16.h: int8 x a dword broadcast, `vpdpbusd` with AVX-VNNI, else `vpmaddubsw` pairs summed
// in int16): the AVX-512 VNNI kernel where there is one, else the AVX2 one or its AVX-VNNI build where that is on.
#define FT_PICK_Q8_X16(fmt)                                                                     \
  if (is_avx512(isa) && vnni && rows_q8_##fmt##_avx512vnni) return rows_q8_##fmt##_avx512vnni; \
  if ((is_avx512(isa) || isa == "avx2") && rows_q8_##fmt##_avx2) return vnni2 ? rows_q8_##fmt##_avxvnni : rows_q8_##fmt##_avx2; \
  return rows_q8_scalar;

RowsQ8Fn rows_q8_kernel(Fmt fmt) {
  const std::string isa = active_isa();
  static const bool vnni = has_vnni();
  static const bool vnni2 = avx_vnni_on();
  switch (fmt) {
    case Fmt::MXFP4: FT_PICK_Q8(mxfp4)
    case Fmt::NVFP4: FT_PICK_Q8(nvfp4)
    case Fmt::INT4_SYM:
    case Fmt::INT4_ASYM: FT_PICK_Q8(int4)
    case Fmt::Q4_K: FT_PICK_Q8(q4k)
    case Fmt::Q5_K: FT_PICK_Q8(q5k)
    case Fmt::Q6_K: FT_PICK_Q8(q6k)
    case Fmt::Q3_K: FT_PICK_Q8(q3k)
    case Fmt::Q2_K: FT_PICK_Q8(q2k)
    case Fmt::Q4_K_X16: FT_PICK_Q8_X16(q4kx16)
    case Fmt::INT4_SYM_X16: FT_PICK_Q8_X16(int4x16)
    case Fmt::MXFP4_X16: FT_PICK_Q8_X16(mxfp4x16)
    case Fmt::Q6_K_X16: FT_PICK_Q8_X16(q6kx16)
    case Fmt::Q5_K_X16: FT_PICK_Q8_X16(q5kx16)
    case Fmt::Q3_K_X16: FT_PICK_Q8_X16(q3kx16)
    default: return rows_q8_scalar;
  }
}

// 16-bit activations (cpu/q8.h: Q16Act) for a bf16 engine's K-quant and INT4 products where the ISA has no bf16
// dot product (avx2, avx512): one Zen 4 core in AVX2 code, [73728, 2048] from DRAM at one token, Q4_K 15.5 -> 25.7
// GMAC/s, Q6_K 8.0 -> 22.1 against the fp32 kernels. Also on AVX-512 BF16 where its nibble kernels are off
// (bf16_nibbles_fast: Intel), as rows_bf16_kernel is asked first: 2 Sapphire-Rapids-class cores, [73728, 2048] from
// DRAM at one token, fp32 products / bf16 nibble kernels (FT_BF16_NIBBLES=1) / 16-bit, GB/s: Q4_K 12.1 / 16.9-17.5 /
// 19.0-19.3, Q6_K 13.5 / 16.5-17.6 / 19.7-20.7, Q4_0 18.9 (row-wise) / 17.1-18.5 / 21.3-23.5 (INT4_SYM_X16, f16
// scales), against a read bandwidth of 22.8. MXFP4 / NVFP4 keep their fp32 kernels (faster at 4 tokens:
// x86_avx2_q8.cpp). FT_BF16_I16=0 keeps fp32 products (exact) there; 1 (the default) or unset: 16-bit.
static bool bf16_i16_on() {
  const char* forced = std::getenv("FT_BF16_I16");
  if (forced && *forced) {
    const std::string f(forced);
    if (f != "0" && f != "1") throw std::invalid_argument("FT_BF16_I16=" + f + " is not 0 or 1");
    return f == "1";
  }
  return true;
}

// The AVX-512 VNNI 16-bit kernel of an X16 format (x86_avx512vnni_x16i16.cpp, 16 rows a zmm), or nullptr: where the ISA
// is AVX-512 with VNNI, 16-bit x is on (bf16_i16_on) and the format and shape have one. Q4_K_X16 at one token: Intel's
// cores keep the AVX2 kernel (the _ymm1 build), Zen 5's take the zmm one (one core, [16384, 2048] in cache: AVX2 49.2,
// zmm 71.6 GMAC/s).
static RowsQ16Fn zmm_q16_kernel(const WeightMat& w) {
  static const bool on = bf16_i16_on() && has_vnni() && quantize_q16_avx2;
  if (!on || !is_avx512(active_isa())) return nullptr;
  const bool blocks32 = w.cols % 32 == 0 && w.group % 32 == 0;
  switch (w.fmt) {
    case Fmt::INT4_SYM_X16: return blocks32 ? rows_q16_int4x16_avx512vnni : nullptr;
    case Fmt::INT8_SYM_X16: return blocks32 ? rows_q16_int8x16_avx512vnni : nullptr;
    case Fmt::MXFP4_X16: return w.cols % 32 ? nullptr : rows_q16_mxfp4x16_avx512vnni;
    case Fmt::Q4_K_X16:
      if (!q8_supported(w)) return nullptr;
      return amd_family() ? rows_q16_q4kx16_avx512vnni : rows_q16_q4kx16_avx512vnni_ymm1;
    case Fmt::Q5_K_X16: return q8_supported(w) ? rows_q16_q5kx16_avx512vnni : nullptr;
    case Fmt::Q3_K_X16: return q8_supported(w) ? rows_q16_q3kx16_avx512vnni : nullptr;
    default: return nullptr;
  }
}

// The 4-bit, K-quant and INT8 bf16-activation kernels (x86_avx512bf16_lut4.h, x86_avx512bf16_kquant.cpp, _int8.cpp)
// beat the fp32 table kernel on AMD's AVX-512 BF16 (Zen 4: 13-14 against 10-11 GB/s a core from DRAM) and lost to it
// on Intel's (Sapphire Rapids: 6.9 against 8.8), so they run on AMD CPUs. On Intel bf16 x meets K-quant, INT4,
// MXFP4_X16 and INT8_SYM_X16 weights in the 16-bit kernels instead (rows_q16_kernel), and the formats without one in
// the rows-in-lanes bf16 kernels where those win: 2 Sapphire-Rapids-class cores, [73728, 2048] from DRAM, one / four
// tokens, GB/s over fp32 products: FP8_E4M3_X16 14.1 / 13.9 against 13.0 / 8.6 (NVFP4's row-wise bf16 kernel: 19.2 /
// 3.5 against 17.5 / 5.4, so fp32 stays). MXFP4_X16 and INT8_SYM_X16 took the bf16 kernels too until they had 16-bit
// ones, which win: one core, [65536 / 32768, 2048] from DRAM, 1 / 4 / 8 tokens, GMAC/s, bf16 -> 16-bit: MXFP4_X16
// 16.2 / 38.7 / 43 -> 20.7 / 59.6 / 75, INT8_SYM_X16 (f16 scales) 9.1 / 20.7 / 21.8 -> 11.2 / 37 / 62; a 48-layer
// MXFP4_MOE model decodes at 5.9 -> 6.7 tok/s on one core, 10.6 -> 12.4 on two. FT_BF16_NIBBLES=1 or 0 forces them
// all on or off (any other value throws).
// On Zen 5 the zmm 16-bit kernels (zmm_q16_kernel) of Q4_K_X16, Q3_K_X16 and INT8_SYM_X16 win over the bf16 ones and
// the bf16 kernels keep the rest. 2 Zen 5 cores (EPYC, family 0x1A; read bandwidth 50-95 GB/s, two regimes by the
// minute), 48-layer models, decode tok/s, paired runs at ~90 GB/s, bf16 -> 16-bit: Q4_K_M 34.3-34.8 -> 37.5-39.1,
// Q3_K_M 35.4-36.7 -> 38.3-39.7, Q5_K_M 28.2-28.8 -> 23.4-24.2 (so Q5_K_X16 stays bf16: its 16-bit kernel does not
// rise with the bandwidth); one core, [8192-16384, 2048] in cache, 1 / 4 / 8 tokens, GMAC/s: Q4_K_X16 74.6 / 126 /
// 133 -> 82.3 / 146 / 162, Q3_K_X16 56.6 / 111 / 125 -> 54.2 / 123 / 140, INT8_SYM_X16 35.6 / 86.5 / 82 -> 35.9 /
// 109 / 149, against MXFP4_X16 104.5 -> 81.3 and INT4_SYM_X16 84 / 148 / 167 -> 77.4 / 137 / 158 (bf16 kept). Zen 4
// keeps the bf16 kernels (measured before the zmm 16-bit ones existed).
enum class Nib { Off, On, NoI16, Zen5 };  // NoI16: the formats without a 16-bit kernel (row-wise MXFP4 and INT8, FP8);
                                          // Zen5: all but Q4_K_X16, Q3_K_X16 and INT8_SYM_X16 where their zmm ones run

static Nib bf16_nibbles_fast() {
  const char* forced = std::getenv("FT_BF16_NIBBLES");
  if (forced && *forced) {
    const std::string f(forced);
    if (f != "0" && f != "1") throw std::invalid_argument("FT_BF16_NIBBLES=" + f + " is not 0 or 1");
    return f == "1" ? Nib::On : Nib::Off;
  }
#if defined(__x86_64__) || defined(_M_X64)
  if (!amd_family()) return Nib::NoI16;
  return amd_family() >= 0x1A ? Nib::Zen5 : Nib::On;
#else
  return Nib::Off;
#endif
}

#define FT_PICK_BF16(fmt) return isa == "avx512bf16" ? rows_bf16act_##fmt##_avx512bf16 : nullptr;
#define FT_PICK_BF16_NIB(fmt) return isa == "avx512bf16" && nib ? rows_bf16act_##fmt##_avx512bf16 : nullptr;

RowsBf16Fn rows_bf16_one_kernel(const WeightMat& w) {
  return w.fmt == Fmt::BF16 && std::string(active_isa()) == "avx2" ? rows_bf16act_bf16_avx2 : nullptr;
}

RowsBf16Fn rows_bf16_kernel(const WeightMat& w, int64_t tokens) {
  const std::string isa = active_isa();
  static const Nib mode = bf16_nibbles_fast();
  check_x16_prefetch();  // asked before any 16-bit kernel (linear.cpp, moe_ffn.cpp)
  const bool no_i16 = w.fmt == Fmt::MXFP4 || w.fmt == Fmt::INT8_SYM || w.fmt == Fmt::FP8_E4M3_X16;
  const bool zen5_i16 =
      (w.fmt == Fmt::Q4_K_X16 || w.fmt == Fmt::Q3_K_X16 || w.fmt == Fmt::INT8_SYM_X16) && zmm_q16_kernel(w);
  const bool nib = mode == Nib::On || (mode == Nib::NoI16 && no_i16) || (mode == Nib::Zen5 && !zen5_i16);
  switch (w.fmt) {
    case Fmt::BF16: FT_PICK_BF16(bf16)
    case Fmt::MXFP4: FT_PICK_BF16_NIB(mxfp4)
    case Fmt::NVFP4: FT_PICK_BF16_NIB(nvfp4)
    case Fmt::INT4_SYM:
    case Fmt::INT4_ASYM:
      if (!int4_lane_groups(w.group)) return nullptr;
      FT_PICK_BF16_NIB(int4)
    case Fmt::INT8_SYM:  // the tokens-in-lanes prefill kernel; the fp32 one on x widened per call below 12 tokens
      // (a [50257, 2048] LM head at one token: 2 ms of products, 0.15 ms of widening x again for each of its 2094 tasks)
      if (tokens != kAnyTokens && tokens < kInt8TokMin) return nullptr;
      FT_PICK_BF16_NIB(int8)
    case Fmt::Q4_K: FT_PICK_BF16_NIB(q4k)
    case Fmt::Q5_K: FT_PICK_BF16_NIB(q5k)
    case Fmt::Q6_K: FT_PICK_BF16_NIB(q6k)
    case Fmt::Q3_K: FT_PICK_BF16_NIB(q3k)
    case Fmt::Q2_K: FT_PICK_BF16_NIB(q2k)
    case Fmt::Q4_K_X16: FT_PICK_BF16_NIB(q4kx16)
    case Fmt::Q5_K_X16: FT_PICK_BF16_NIB(q5kx16)
    case Fmt::Q6_K_X16: FT_PICK_BF16_NIB(q6kx16)
    case Fmt::Q3_K_X16: FT_PICK_BF16_NIB(q3kx16)
    case Fmt::MXFP4_X16: FT_PICK_BF16_NIB(mxfp4x16)
    case Fmt::INT4_SYM_X16:
      if (w.group % 32) return nullptr;
      FT_PICK_BF16_NIB(int4x16)
    case Fmt::INT8_SYM_X16:
      if (w.group % 32) return nullptr;
      FT_PICK_BF16_NIB(int8x16)
    case Fmt::FP8_E4M3_X16:
      if (w.group % 32) return nullptr;
      FT_PICK_BF16_NIB(fp8x16)
    default: return nullptr;
  }
}

#define FT_PICK_Q16(fmt) return rows_q16_##fmt##_avx2;

// The AVX2 16-bit kernel of an X16 format, or its AVX-VNNI build where that is on.
#define FT_PICK_X16(fmt) return vnni2 ? rows_q16_##fmt##_avxvnni : rows_q16_##fmt##_avx2;

RowsQ16Fn rows_q16_kernel(const WeightMat& w) {
  const std::string isa = active_isa();
  static const bool on = bf16_i16_on();
  if (!on || (isa != "avx2" && !is_avx512(isa)) || !quantize_q16_avx2) return nullptr;
  // rows in the lanes (x86_avx2_int4x16.cpp): one vector of 8 rows' scales a block, so any group in 32s. One core
  // in AVX2 code (Sapphire-Rapids class), [73728, 2048] from DRAM, T = 1 / 4, groups of 32: the INT4 row kernel
  // 13.4 / 21.1 GMAC/s, INT4_SYM_X16 17.4 / 34.6 (f16 scales 19.0 / 36.0)
  // AVX-512 with VNNI: the same with 16 rows a zmm (x86_avx512vnni_x16i16.cpp). One Sapphire-Rapids-class core,
  // [73728, 2048] from DRAM, T = 2 / 4, GMAC/s: Q4_K_X16 30-31 / 34-36.5 -> 30.5-32.5 / 52-56, INT4_SYM_X16 (f16
  // scales) 32 / 35.5-36.4 -> 34.3-35 / 58-59.6; equal at one token
  if (const RowsQ16Fn zmm = zmm_q16_kernel(w)) return zmm;
  static const bool vnni2 = avx_vnni_on();
  if (w.fmt == Fmt::INT4_SYM_X16) {
    if (w.cols % 32 || w.group % 32) return nullptr;
    FT_PICK_X16(int4x16)
  }
  // MXFP4 (x86_avx2_mxfp4x16.cpp: e2m1 values times 2 are small integers, so as exact as INT4's), where it took fp32
  // products before
  if (w.fmt == Fmt::MXFP4_X16) {
    if (w.cols % 32) return nullptr;
    FT_PICK_X16(mxfp4x16)
  }
  // GGUF Q8_0 (x86_avx2_int8x16.cpp: a byte pair sign-extended to a word pair; exact int32 block sums)
  if (w.fmt == Fmt::INT8_SYM_X16) {
    if (w.cols % 32 || w.group % 32) return nullptr;
    FT_PICK_X16(int8x16)
  }
  if (!q8_supported(w)) return nullptr;
  switch (w.fmt) {
    case Fmt::INT4_SYM:
    case Fmt::INT4_ASYM:
      // groups of 32 (GGUF Q4_0): 11.6 -> 16.8 GMAC/s at one token; groups of 128 (`ft convert --format int4`) lose
      // at one token (18.3 -> 15.0; 19.8 -> 26.8 at four) and keep the fp32 kernel
      if (w.group != 32) return nullptr;
      FT_PICK_Q16(int4)
    case Fmt::Q4_K: FT_PICK_Q16(q4k)
    case Fmt::Q5_K: FT_PICK_Q16(q5k)
    case Fmt::Q6_K: FT_PICK_Q16(q6k)
    case Fmt::Q3_K: FT_PICK_Q16(q3k)
    case Fmt::Q2_K: FT_PICK_Q16(q2k)
    // rows in the lanes (x86_avx2_q4kx16.cpp): one Zen 4 core in AVX2 code, [73728, 2048] from DRAM, T = 1 / 2 / 4,
    // the Q4_K row kernel 25-27 / 31-33 / 37-39 GMAC/s, Q4_K_X16 35 / 45-46 / 48
    case Fmt::Q4_K_X16: FT_PICK_X16(q4kx16)
    // with AVX-VNNI only (x86_avx2_q6kx16.cpp): one Sapphire-Rapids-class core, [16384, 2048], 1 / 8 / 128 tokens,
    // the Q6_K row kernel 15-16 / 28-30 / 32 GMAC/s, Q6_K_X16 18.5-20 / 39 / 51 (in AVX2 code 15-17.5 / 24.4 / 29:
    // not taken). Not on AVX-512, whose tile kernel reads Q6_K row-wise.
    case Fmt::Q6_K_X16: return isa == "avx2" && vnni2 ? rows_q16_q6kx16_avxvnni : nullptr;
    // Q5_K_X16 the same (x86_avx2_q4kx16.cpp): [16384, 2048], 1 / 4 / 8 / 128 tokens, the Q5_K row kernel 15.5-15.9 /
    // 26.7 / 29.3 / 31.1 GMAC/s, Q5_K_X16 18.5 / 32.7 / 38.4 / 44.4-46.7 (in AVX2 code 15.2 / 25 / 25.6 / 30.3 against
    // 13.2-15.5 / 29 / 26.2 / 29.7: not taken). On Intel's AVX-512 too, where Q5_K has only the row kernel: 1 / 8 / 128
    // tokens, 18.1 / 29-32 / 32.7 -> 20.3 / 43.3 / 49.4; pp128 of a 48-layer Q5_K_M model on two cores 24.6 -> 35.8
    // AVX-512 VNNI, both (x86_avx512vnni_x16i16.cpp, 16 rows a zmm): one Sapphire-Rapids-class core, [16384, 2048], 1 /
    // 8 / 128 tokens, Q5_K_X16 20.3 / 43.3 / 49.4 -> 25.2 / 71 / 84.3 GMAC/s, Q3_K_X16 21.1 / 41.7 / 44.1 -> 25.1 / 66.8
    // / 72.4 (also at one token from DRAM on two cores: 17.8 -> 18.6 and 14.9 -> 17.3 GB/s); pp128 of the 48-layer
    // models on two cores Q5_K_M 35.7 -> 52.2 tok/s, Q3_K_M 40.5 -> 55.7
    case Fmt::Q5_K_X16: return vnni2 ? rows_q16_q5kx16_avxvnni : nullptr;
    // and Q3_K_X16 (x86_avx2_q3kx16.cpp): the Q3_K row kernel 17.7 / 27.1-29.7 / 27.7 / 30.1 GMAC/s, Q3_K_X16 18.2 /
    // 37.2 / 44.3 / 48 (in AVX2 code 15.3 / 25.5 / 25.3 / 27 against 17.6 / 27.6 / 27.5 / 27.4: not taken); on Intel's
    // AVX-512, 1 / 8 / 128 tokens, 18.5 / 29-31 / 31.5 -> 18.5 / 41.7 / 44.1, pp128 of the Q3_K_M model 31.5 -> 40.0
    case Fmt::Q3_K_X16: return vnni2 ? rows_q16_q3kx16_avxvnni : nullptr;
    default: return nullptr;
  }
}

// AMX: CPUID.(7, 0):EDX bits 22 (AMX-BF16) and 24 (AMX-TILE), and Linux's permission for the tile data state
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; the process's threads may then use the tiles). FT_AMX=0
// keeps the vector kernels; 1 asks for the tiles (an error where they are not usable); unset: where usable.
static bool amx_usable() {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!((d >> 22) & 1) || !((d >> 24) & 1)) return false;
  return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
  return false;
#endif
}

// Whether rows_tile_kernel can give kernels in this process (AMX usable and not turned off).
static bool tiles_on() {
  static const bool usable = amx_usable();
  const char* forced = std::getenv("FT_AMX");
  if (forced && *forced) {
    const std::string f(forced);
    if (f != "0" && f != "1") throw std::invalid_argument("FT_AMX=" + f + " is not 0 or 1");
    if (f == "0") return false;
    if (!usable) throw std::invalid_argument("FT_AMX=1 but this CPU or OS gives no AMX-BF16 tiles");
  }
  return usable && std::string(active_isa()) == "avx512bf16";
}

RowsBf16Fn rows_tile_kernel(const WeightMat& w) {
  static const bool on = tiles_on();
  if (!on) return nullptr;
  switch (w.fmt) {
    case Fmt::Q4_K_X16: return rows_tile_q4kx16_amx;
    case Fmt::MXFP4_X16: return rows_tile_mxfp4x16_amx;
    case Fmt::INT4_SYM_X16: return w.group % 32 ? nullptr : rows_tile_int4x16_amx;
    case Fmt::Q6_K: return rows_tile_q6k_amx;
    case Fmt::INT8_SYM_X16: return w.group % 32 ? nullptr : rows_tile_int8x16_amx;
    case Fmt::FP8_E4M3_X16: return w.group % 32 ? nullptr : rows_tile_fp8x16_amx;
    default: return nullptr;
  }
}

QuantizeQ16Fn quantize_q16_fn() { return quantize_q16_avx2; }

QuantizeQ8Fn quantize_q8_fn() {
  const std::string isa = active_isa();
  return (isa == "avx2" || is_avx512(isa)) && quantize_q8_avx2 ? quantize_q8_avx2 : quantize_q8;
}

static bool x86_simd() {
  const std::string isa = active_isa();
  return isa == "avx2" || is_avx512(isa);
}
RmsNormBf16Fn rms_norm_bf16_fn() { return x86_simd() ? rms_norm_bf16_avx2 : nullptr; }
F32ToBf16Fn f32_to_bf16_fn() { return x86_simd() ? f32_to_bf16_avx2 : nullptr; }
AddBf16Fn add_bf16_fn() { return x86_simd() ? add_bf16_avx2 : nullptr; }

bool attn_decode_bf16_takes(int64_t G, int64_t D, int64_t Dv) {
  return std::string(active_isa()) == "avx512bf16" && attn_span_avx512bf16 && attn_decode_bf16_shapes(G, D, Dv);
}

AttnSpanFn attn_span_kernel(const DecodeAttn& a) {
  if (a.q_bf16 && a.kv_bf16 && a.K <= kMaxHeads && attn_decode_bf16_takes(a.N / a.K, a.D, a.Dv)) return attn_span_avx512bf16;
  const std::string isa = active_isa();
  if (is_avx512(isa) && attn_span_avx512) return attn_span_avx512;
  if ((is_avx512(isa) || isa == "avx2") && attn_span_avx2) return attn_span_avx2;
  if (isa == "neon" && attn_span_neon) return attn_span_neon;
  return attn_span_scalar;
}

bool attn_prefill_simd() { return std::string(active_isa()) == "avx512bf16" && attn_prefill_avx512bf16; }
AttnPrefillFn attn_prefill_kernel() { return attn_prefill_simd() ? attn_prefill_avx512bf16 : attn_prefill_scalar; }

GdnHeadFn gdn_head_kernel() {
  const std::string isa = active_isa();
  if (is_avx512(isa) && gdn_head_avx512) return gdn_head_avx512;
  if ((is_avx512(isa) || isa == "avx2") && gdn_head_avx2) return gdn_head_avx2;
  if (isa == "neon" && gdn_head_neon) return gdn_head_neon;
  return gdn_head_scalar;
}

GdnRuleFn gdn_rule_kernel() {
  const std::string isa = active_isa();
  if (is_avx512(isa) && gdn_rule_avx512) return gdn_rule_avx512;
  if ((is_avx512(isa) || isa == "avx2") && gdn_rule_avx2) return gdn_rule_avx2;
  if (isa == "neon" && gdn_rule_neon) return gdn_rule_neon;
  return gdn_rule_scalar;
}

const char* fmt_name(Fmt f) {
  static constexpr const char* names[] = {"bf16",     "f16",      "fp8_e4m3",
                                                  "mxfp4",    "nvfp4",    "int4_sym",
                                                  "int4_asym", "int8_sym", "q4_k",     "q5_k",     "q6_k",
                                                  "q4_k_x16", "q3_k", "q2_k", "q6_k_x16", "mxfp4_x16", "int4_sym_x16", "int8_sym_x16", "fp8_e4m3_x16",
                                                  "q5_k_x16", "q3_k_x16"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(Fmt::COUNT), "one name per Fmt, in order");
  int i = static_cast<int>(f);
  return i >= 0 && i < static_cast<int>(Fmt::COUNT) ? names[i] : "?";
}

const char* check_mat(const WeightMat& w) {
  switch (w.fmt) {
    case Fmt::BF16:
    case Fmt::F16: return nullptr;
    case Fmt::FP8_E4M3: return w.scale && w.group > 0 ? nullptr : "fp8 needs float32 scales and a block size";
    case Fmt::MXFP4: return w.cols % 32 == 0 && w.scale ? nullptr : "mxfp4 needs cols % 32 == 0 and e8m0 scales";
    case Fmt::NVFP4: return w.cols % 16 == 0 && w.scale ? nullptr : "nvfp4 needs cols % 16 == 0 and e4m3 scales";
    case Fmt::INT4_SYM: return w.cols % 2 == 0 && w.scale && w.group > 0 ? nullptr : "int4 needs even cols, scales, group";
    case Fmt::INT4_ASYM:
      return w.cols % 2 == 0 && w.scale && w.zero && w.group > 0 ? nullptr : "int4_asym needs even cols, scales, zeros, group";
    case Fmt::INT8_SYM: return w.scale && w.group > 0 ? nullptr : "int8_sym needs float32 scales and a group";
    case Fmt::Q4_K:
    case Fmt::Q5_K:
    case Fmt::Q6_K:
    case Fmt::Q3_K:
    case Fmt::Q2_K: return w.cols % kQK == 0 ? nullptr : "the K-quant formats need cols % 256 == 0 (whole super-blocks)";
    case Fmt::Q4_K_X16:
      return w.cols % kQK == 0 && w.rows % 16 == 0 && w.q_stride >= w.cols / kQK * 144
                 ? nullptr
                 : "q4_k_x16 needs cols % 256 == 0, rows % 16 == 0 and rows of at least cols / 256 * 144 bytes";
    case Fmt::Q5_K_X16:
      return w.cols % kQK == 0 && w.rows % 16 == 0 && w.q_stride >= w.cols / kQK * 176
                 ? nullptr
                 : "q5_k_x16 needs cols % 256 == 0, rows % 16 == 0 and rows of at least cols / 256 * 176 bytes";
    case Fmt::Q3_K_X16:
      return w.cols % kQK == 0 && w.rows % 16 == 0 && w.q_stride >= w.cols / kQK * 110
                 ? nullptr
                 : "q3_k_x16 needs cols % 256 == 0, rows % 16 == 0 and rows of at least cols / 256 * 110 bytes";
    case Fmt::Q6_K_X16:
      return w.cols % kQK == 0 && w.rows % 16 == 0 && w.q_stride >= w.cols / kQK * 210
                 ? nullptr
                 : "q6_k_x16 needs cols % 256 == 0, rows % 16 == 0 and rows of at least cols / 256 * 210 bytes";
    case Fmt::MXFP4_X16:
      return w.cols % 32 == 0 && w.rows % 16 == 0 && w.scale && w.q_stride == w.cols / 2 && w.scale_stride == w.cols / 32
                 ? nullptr
                 : "mxfp4_x16 needs cols % 32 == 0, rows % 16 == 0, e8m0 scales, and unpadded rows";
    case Fmt::INT4_SYM_X16:
      return w.cols % 32 == 0 && w.rows % 16 == 0 && w.scale && w.group > 0 && w.group % 32 == 0 &&
                     w.q_stride == w.cols / 2 && w.scale_stride == (w.cols + w.group - 1) / w.group
                 ? nullptr
                 : "int4_sym_x16 needs cols % 32 == 0, rows % 16 == 0, float32 or f16 scales, a group % 32 == 0, and unpadded rows";
    case Fmt::INT8_SYM_X16:
    case Fmt::FP8_E4M3_X16:
      if (w.cols % 32 == 0 && w.rows % 16 == 0 && w.scale && w.group > 0 && w.group % 32 == 0 && w.q_stride == w.cols &&
          w.scale_stride == (w.cols + w.group - 1) / w.group)
        return nullptr;
      return w.fmt == Fmt::INT8_SYM_X16
                 ? "int8_sym_x16 needs cols % 32 == 0, rows % 16 == 0, float32 or f16 scales, a group % 32 == 0, and unpadded rows"
                 : "fp8_e4m3_x16 needs cols % 32 == 0, rows % 16 == 0, float32 or f16 scales, a group % 32 == 0, and unpadded rows";
    default: return "unknown format";
  }
}

}  // namespace ft

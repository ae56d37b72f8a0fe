#include "cpu/moe_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/isa.h"

namespace ft {

const char* active_isa() {
#ifdef FT_HAVE_X86
  static const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512vl");
  static const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  static const bool has_avx512 = false, has_avx2 = false;
#endif
  const char* forced = std::getenv("FT_CPU_ISA");
  if (forced && *forced) {
    std::string f(forced);
    if (f == "scalar") return "scalar";
    if (f == "avx512") {
      if (!has_avx512) throw std::invalid_argument("FT_CPU_ISA=avx512 but this CPU lacks AVX-512F/BW/VL");
      return "avx512";
    }
    if (f == "avx2") {
      if (!has_avx2) throw std::invalid_argument("FT_CPU_ISA=avx2 but this CPU lacks AVX2/FMA");
      return "avx2";
    }
    throw std::invalid_argument("FT_CPU_ISA=" + f + " is not one of: scalar, avx2, avx512");
  }
  return has_avx512 ? "avx512" : has_avx2 ? "avx2" : "scalar";
}

GemvBf16Fn gemv_bf16() {
#ifdef FT_HAVE_X86
  const char* isa = active_isa();
  if (std::strcmp(isa, "avx512") == 0) return gemv_bf16_avx512;
  if (std::strcmp(isa, "avx2") == 0) return gemv_bf16_avx2;
#endif
  return gemv_bf16_scalar;
}

void moe_swiglu_bf16(const float* x, int64_t T, int64_t H, const int32_t* tok, const int32_t* eid,
                     const float* gate, int64_t R, const uint16_t* w13, const uint16_t* w2, int64_t N,
                     int64_t I, float* y) {
  for (int64_t r = 0; r < R; ++r) {
    if (tok[r] < 0 || tok[r] >= T)
      throw std::invalid_argument("tok[" + std::to_string(r) + "]=" + std::to_string(tok[r]) +
                                  " is outside [0, T=" + std::to_string(T) + ")");
    if (eid[r] < 0 || eid[r] >= N)
      throw std::invalid_argument("eid[" + std::to_string(r) + "]=" + std::to_string(eid[r]) +
                                  " is outside [0, N=" + std::to_string(N) + ") experts in the bank");
  }
  GemvBf16Fn gemv = gemv_bf16();
  std::memset(y, 0, sizeof(float) * T * H);

  // Group routes by expert (stable, so duplicate routes keep their order).
  std::vector<int64_t> order(R);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return eid[a] < eid[b]; });

  std::vector<float> xs, gu, h, out;
  for (int64_t s = 0; s < R;) {
    int64_t e = eid[order[s]], k = 0;
    while (s + k < R && eid[order[s + k]] == e) ++k;
    xs.resize(k * H);
    gu.resize(k * 2 * I);
    h.resize(k * I);
    out.resize(k * H);
    for (int64_t j = 0; j < k; ++j) std::memcpy(&xs[j * H], x + int64_t(tok[order[s + j]]) * H, sizeof(float) * H);
    gemv(w13 + e * 2 * I * H, 2 * I, H, H, xs.data(), k, H, gu.data(), 2 * I);
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < I; ++i) {
        float g = gu[j * 2 * I + i], u = gu[j * 2 * I + I + i];
        h[j * I + i] = g / (1.f + std::exp(-g)) * u;
      }
    gemv(w2 + e * H * I, H, I, I, h.data(), k, I, out.data(), H);
    for (int64_t j = 0; j < k; ++j) {
      int64_t r = order[s + j];
      float gw = gate[r];
      float* yt = y + int64_t(tok[r]) * H;
      const float* o = &out[j * H];
      for (int64_t c = 0; c < H; ++c) yt[c] += gw * o[c];
    }
    s += k;
  }
}

}  // namespace ft

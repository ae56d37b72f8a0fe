// AMX (Sapphire Rapids and later Xeons): prefill-sized bf16-activation products of the X16 formats (cpu/formats.h:
// Q4_K_X16, MXFP4_X16, INT4_SYM_X16, INT8_SYM_X16, FP8_E4M3_X16) on the tile unit's `tdpbf16ps`.
//
// `tdpbf16ps` C, A, B adds to C[m][n] the dot of row m of A (32 bf16) with column n of B, B's row k holding the
// pairs (2k, 2k + 1) of its 16 columns as dwords: exactly a vector of the rows-in-lanes decoders (lane i: row i's
// column pair), so a block of 32 columns of 16 weight rows is the decoders' 16 vectors stored as B's 16 rows (the
// vector meeting x's dword k in the AVX-512 BF16 kernels goes to B's row k), A is 16 tokens of x in x16_prep's
// order (one tile load from the prepared rows), and C is 16 tokens by 16 weight rows in fp32. Each tile product is
// 8192 multiply-adds; the vector unit meanwhile decodes the next block and scales the last.
//
// Scales: a block's C is stored and added into the tokens' sums with its rows' scales (fp32 FMAs, the AVX-512
// BF16 kernels' arithmetic) once per span of blocks sharing a scale: one block for Q4_K_X16 (d sc per sub-block
// of 32, and - dmin m times the sub-block's sum of x, with the codes q as bf16, not 128 + q), a group for
// INT4_SYM_X16, INT8_SYM_X16 and FP8_E4M3_X16 (INT8's weights as two exact bf16 parts, each its own B into the
// same C), and for MXFP4_X16 the whole row: its power-of-two scale is added to the exponents of the decoded
// bf16 weights (exact where no weight leaves bf16's normal range: every e8m0 of the 16 rows in [2, 252], checked
// per group of 16 rows; else per block, scaled as INT4). Two sets of C tiles (two blocks) alternate, so one
// block's products run while the other's are scaled.
//
// Every weight and every product with a bf16 x is exact in fp32; the tile unit sums in fp32 (denormal inputs and
// results flushed to zero, as `vdpbf16ps`), so results differ from the rows-in-lanes kernels' only in fp32
// rounding (tests/fp32_bounds.py). Tokens are taken 32 at a time (tiles of 16; a partial tile's rows of x are
// zeros); the weights of a call's rows are decoded once per 32 tokens. Rows go two groups of 16 at a time where
// the format has one-part weights (tile_pair), else one (tile_group).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/arch/rows_common.h"          // FT_UNROLL, FloatBuf, u16_buf
#include "cpu/arch/x86_amx.h"               // tiles_configure
#include "cpu/arch/x86_avx512_q4kx16.h"    // x16_scale_min, x16_d, x16_dmin
#include "cpu/arch/x86_avx512bf16_bytes.h"  // Int8Parts, Fp8Parts
#include "cpu/arch/x86_avx512bf16_nib4.h"   // Nib4, Codes4, Mxfp4, Int4Sym
#include "cpu/arch/x86_avx512bf16_x16.h"   // x16_prep
#include "cpu/dispatch.h"                  // rows_scalar

namespace ft {
namespace {

// Tile registers: C of token tiles 0, 1 for blocks of set 0 (tiles 0, 1) and set 1 (2, 3) -- or, in tile_pair, of
// the two groups of rows; B of set (group) 0 / 1 (4, 5); A of token tiles 0 / 1 (6, 7). Every tile 16 rows of 64
// bytes.
inline void tiles_configure() {
  static constexpr uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
  static constexpr uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  tiles_configure(8, rows, colsb);
}

// GCC's tile intrinsics paste their tile numbers into the assembly: they must be literals, hence these switches.
// C tile of set S and token tile I: 2 S + I; its A tile 6 + I, its B tile 4 + S.
template <int S, int I>
inline void tile_zero() {
  if constexpr (S == 0 && I == 0) _tile_zero(0);
  else if constexpr (S == 0 && I == 1) _tile_zero(1);
  else if constexpr (S == 1 && I == 0) _tile_zero(2);
  else _tile_zero(3);
}
template <int S, int I>
inline void tile_store(float* c) {
  if constexpr (S == 0 && I == 0) _tile_stored(0, c, 64);
  else if constexpr (S == 0 && I == 1) _tile_stored(1, c, 64);
  else if constexpr (S == 1 && I == 0) _tile_stored(2, c, 64);
  else _tile_stored(3, c, 64);
}
template <int S>
inline void tile_load_b(const uint16_t* b) {
  if constexpr (S == 0) _tile_loadd(4, b, 64);
  else _tile_loadd(5, b, 64);
}
// C(S, I) += A(I) B(S), A(I) loaded first from a (row stride lda bytes)
template <int S, int I>
inline void tile_dot(const uint16_t* a, int64_t lda) {
  if constexpr (I == 0) _tile_loadd(6, a, lda);
  else _tile_loadd(7, a, lda);
  if constexpr (S == 0 && I == 0) _tile_dpbf16ps(0, 6, 4);
  else if constexpr (S == 0 && I == 1) _tile_dpbf16ps(1, 7, 4);
  else if constexpr (S == 1 && I == 0) _tile_dpbf16ps(2, 6, 5);
  else _tile_dpbf16ps(3, 7, 5);
}

// Two-part weights (INT8's): B's parts in tiles 4 and 5 for either set; C(S, I) += A(I) B(part 0) + A(I) B(part 1)
inline void tile_load_b2(const uint16_t* b) {
  _tile_loadd(4, b, 64);
  _tile_loadd(5, b + 512, 64);
}
template <int S, int I>
inline void tile_dot2(const uint16_t* a, int64_t lda) {
  if constexpr (I == 0) _tile_loadd(6, a, lda);
  else _tile_loadd(7, a, lda);
  if constexpr (S == 0 && I == 0) {
    _tile_dpbf16ps(0, 6, 4);
    _tile_dpbf16ps(0, 6, 5);
  } else if constexpr (S == 0 && I == 1) {
    _tile_dpbf16ps(1, 7, 4);
    _tile_dpbf16ps(1, 7, 5);
  } else if constexpr (S == 1 && I == 0) {
    _tile_dpbf16ps(2, 6, 4);
    _tile_dpbf16ps(2, 6, 5);
  } else {
    _tile_dpbf16ps(3, 7, 4);
    _tile_dpbf16ps(3, 7, 5);
  }
}

template <int I, int N, class F>
inline void static_for(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    static_for<I + 1, N>(f);
  }
}

constexpr int kTokTile = 16, kPass = 32;  // tokens a tile, tokens a pass (two token tiles)

// A format's decoder for the tile driver: kSums (its epilogue needs x's sums per 32 columns), kParts (bf16 parts a
// weight: 1, or 2 for INT8's exact halves, each its own B), span(m, r) (blocks of 32 columns that share one scale in
// rows r..r+15), decode(m, r, j, B) (block j's 16 vectors into B's 16 rows, in x16_prep's column order; part p's at
// B + 512 p), scale(m, r, j, cs, xs, nsub, nt, y) (y[t] += the span's products C[t] scaled, t < nt).

// Q4_K_X16: codes as bf16 (0..15, exact), d sc and dmin m per sub-block of 32.
struct Q4kTile {
  static constexpr bool kSums = true;
  static constexpr int kParts = 1;
  Nib4<Codes4> nib;
  int64_t span(const WeightMat&, int64_t) const { return 1; }
  void decode(const WeightMat& m, int64_t r, int64_t j, uint16_t* B) const {
    const uint8_t* tile = x16_tile(m.fmt, m.q, m.cols, r, j / 8);
    FT_UNROLL for (int u = 0; u < 4; ++u) {
      const uint8_t* q = tile + 64 * (4 * (j % 8) + u);
      _mm_prefetch(reinterpret_cast<const char*>(q) + 4096, _MM_HINT_T0);
      __m512bh w[4];
      nib.decode(_mm512_loadu_si512(q), w);
      FT_UNROLL for (int k = 0; k < 4; ++k) _mm512_store_si512(B + 32 * (4 * u + k), (__m512i)w[k]);
    }
  }
  void scale(const WeightMat& m, int64_t r, int64_t j, const float* cs, const float* xs, int64_t nsub, int nt,
             float* y) const {
    const uint8_t* tile = x16_tile(m.fmt, m.q, m.cols, r, j / 8);
    __m512 sc[2], mn[2];
    x16_scale_min(tile + 2048, static_cast<int>(j % 4), sc[0], mn[0], sc[1], mn[1]);
    const int h = static_cast<int>(j % 8) / 4;
    const __m512 dsc = _mm512_mul_ps(x16_d(tile), sc[h]), dmn = _mm512_mul_ps(x16_dmin(tile), mn[h]);
    for (int t = 0; t < nt; ++t) {
      __m512 a = _mm512_fmadd_ps(_mm512_load_ps(cs + 16 * t), dsc, _mm512_load_ps(y + 16 * t));
      _mm512_store_ps(y + 16 * t, _mm512_fnmadd_ps(dmn, _mm512_set1_ps(xs[t * nsub + j]), a));
    }
  }
};

// INT4_SYM_X16 (F = Int4Sym: a span is a group) and MXFP4_X16 (F = Mxfp4: the whole row, scales in the exponents,
// where every scale of the group's rows allows it; else a span is a block).
template <class F>
struct NibTile {
  static constexpr bool kSums = false;
  static constexpr int kParts = 1;
  static constexpr bool kMx = std::is_same_v<F, Mxfp4>;
  Nib4<F> nib;
  mutable bool fold = false;  // MXFP4: this group's scales in the weights
  int64_t span(const WeightMat& m, int64_t r) const {
    const int64_t nb = m.cols / 32;
    if constexpr (kMx) {
      // every e8m0 byte of rows r..r+15 in [2, 252]: e - 2 <= 250 as a byte
      const uint8_t* s = static_cast<const uint8_t*>(m.scale) + nib_x16_scale_at(m.scale_stride, r, 0);
      const __m512i two = _mm512_set1_epi8(2);
      __m512i hi = _mm512_setzero_si512();
      int64_t i = 0, n = 16 * nb;
      for (; i + 64 <= n; i += 64) hi = _mm512_max_epu8(hi, _mm512_sub_epi8(_mm512_loadu_si512(s + i), two));
      bool ok = !_mm512_cmpgt_epu8_mask(hi, _mm512_set1_epi8(static_cast<char>(250)));
      for (; i < n; ++i) ok &= static_cast<uint8_t>(s[i] - 2) <= 250;
      fold = ok;
      return fold ? nb : 1;
    } else {
      return m.group / 32 < nb ? m.group / 32 : nb;
    }
  }
  void decode(const WeightMat& m, int64_t r, int64_t j, uint16_t* B) const {
    const uint8_t* q = m.q + 256 * ((r / 16) * (m.cols / 32) + j);
    __m512i e = _mm512_setzero_si512();
    if constexpr (kMx) {
      if (fold) {  // (e - 127) << 7 in both words of lane i
        const uint8_t* s = static_cast<const uint8_t*>(m.scale) + nib_x16_scale_at(m.scale_stride, r, j);
        const __m512i v = _mm512_and_si512(
            _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))),
                             _mm512_set1_epi32(127)),
            _mm512_set1_epi32(0xffff));
        e = _mm512_slli_epi16(_mm512_or_si512(v, _mm512_slli_epi32(v, 16)), 7);  // mod 2^16 in each word
      }
    }
    FT_UNROLL for (int p = 0; p < 4; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(q + 64 * p) + 4096, _MM_HINT_T0);
      __m512bh w[4];
      nib.decode(_mm512_loadu_si512(q + 64 * p), w);
      FT_UNROLL for (int k = 0; k < 4; ++k) {
        __m512i v = (__m512i)w[k];
        if constexpr (kMx)
          if (fold) v = _mm512_mask_add_epi16(v, _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7fff)), v, e);
        _mm512_store_si512(B + 32 * (4 * p + k), v);
      }
    }
  }
  void scale(const WeightMat& m, int64_t r, int64_t j, const float* cs, const float*, int64_t, int nt, float* y) const {
    if (kMx && fold) {
      for (int t = 0; t < nt; ++t)
        _mm512_store_ps(y + 16 * t, _mm512_add_ps(_mm512_load_ps(cs + 16 * t), _mm512_load_ps(y + 16 * t)));
      return;
    }
    const __m512 s = F::scales(m, r, j);
    for (int t = 0; t < nt; ++t)
      _mm512_store_ps(y + 16 * t, _mm512_fmadd_ps(_mm512_load_ps(cs + 16 * t), s, _mm512_load_ps(y + 16 * t)));
  }
};

// INT8_SYM_X16 (P = Int8Parts: two exact bf16 parts a weight, 128 + l and -128 - 128 h) and FP8_E4M3_X16 (P =
// Fp8Parts: one) with their decoders' words placed as x16_prep's order has them; a span is a group.
template <class P>
struct ByteTile {
  static constexpr bool kSums = false;
  static constexpr int kParts = P::kWords / 2;
  P dec;
  int64_t span(const WeightMat& m, int64_t) const { return m.group / 32 < m.cols / 32 ? m.group / 32 : m.cols / 32; }
  void decode(const WeightMat& m, int64_t r, int64_t j, uint16_t* B) const {
    const uint8_t* q = m.q + (r / 16) * 16 * m.cols + 512 * j;  // 8 loads of 4 columns of the 16 rows
    FT_UNROLL for (int p = 0; p < 8; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(q + 64 * p) + 4096, _MM_HINT_T0);
      __m512bh w[P::kWords];
      dec.decode(_mm512_loadu_si512(q + 64 * p), w);
      FT_UNROLL for (int k = 0; k < P::kWords; ++k)
        _mm512_store_si512(B + 512 * (k % kParts) + 16 * P::x_at(p, k), (__m512i)w[k]);
    }
  }
  void scale(const WeightMat& m, int64_t r, int64_t j, const float* cs, const float*, int64_t, int nt, float* y) const {
    const __m512 s = x16_group_scales(m, r, j);
    for (int t = 0; t < nt; ++t)
      _mm512_store_ps(y + 16 * t, _mm512_fmadd_ps(_mm512_load_ps(cs + 16 * t), s, _mm512_load_ps(y + 16 * t)));
  }
};

// Rows r..r+15 of m against NT tiles of 16 tokens (x16_prep'd x at xo, row stride ldo; xs their sums where D needs
// them): y[16 t + i] = row r + i . token t, t < 16 NT (y 64-byte aligned).
template <class D, int NT>
void tile_group(const D& d, const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float* xs,
                int64_t nsub, float* y) {
  alignas(64) uint16_t bb[2][512 * D::kParts];
  alignas(64) float cs[2][NT * 256];
  std::memset(y, 0, sizeof(float) * 256 * NT);
  const int64_t nb = m.cols / 32, span = d.span(m, r), nspan = (nb + span - 1) / span, lda = 2 * ldo;
  // set S: zero its C tiles, run span q's blocks into them
  auto issue = [&](auto set, int64_t q) {
    constexpr int S = decltype(set)::value;
    static_for<0, NT>([&](auto ic) { tile_zero<S, decltype(ic)::value>(); });
    for (int64_t j = q * span, j1 = j + span < nb ? j + span : nb; j < j1; ++j) {
      d.decode(m, r, j, bb[S]);
      if constexpr (D::kParts == 1) tile_load_b<S>(bb[S]);
      else tile_load_b2(bb[S]);
      static_for<0, NT>([&](auto ic) {
        constexpr int i = decltype(ic)::value;
        if constexpr (D::kParts == 1) tile_dot<S, i>(xo + kTokTile * i * ldo + 32 * j, lda);
        else tile_dot2<S, i>(xo + kTokTile * i * ldo + 32 * j, lda);
      });
    }
  };
  auto drain = [&](auto set, int64_t q) {
    constexpr int S = decltype(set)::value;
    static_for<0, NT>([&](auto ic) {
      constexpr int i = decltype(ic)::value;
      tile_store<S, i>(cs[S] + 256 * i);
    });
    d.scale(m, r, q * span, cs[S], xs, nsub, kTokTile * NT, y);
  };
  using S0 = std::integral_constant<int, 0>;
  using S1 = std::integral_constant<int, 1>;
  issue(S0{}, 0);
  for (int64_t q = 0; q < nspan; ++q) {
    if (q % 2 == 0) {
      if (q + 1 < nspan) issue(S1{}, q + 1);
      drain(S0{}, q);
    } else {
      if (q + 1 < nspan) issue(S0{}, q + 1);
      drain(S1{}, q);
    }
  }
}

// C(0, I) += A(I) B(0) and C(1, I) += A(I) B(1): one load of A(I) for two groups of rows
template <int I>
inline void tile_dot_pair(const uint16_t* a, int64_t lda) {
  if constexpr (I == 0) {
    _tile_loadd(6, a, lda);
    _tile_dpbf16ps(0, 6, 4);
    _tile_dpbf16ps(2, 6, 5);
  } else {
    _tile_loadd(7, a, lda);
    _tile_dpbf16ps(1, 7, 4);
    _tile_dpbf16ps(3, 7, 5);
  }
}

// Rows r..r+31 (two groups of 16, y0 and y1 as tile_group's y) where both groups have the same span: each x tile
// (from L2) loaded once for both groups' products, and block j + 1 decoded before j's weight tiles are loaded (a
// tile load of just-stored vectors waits for them). The C sets are the two groups' here, so a span's products are
// stored right after they are made. One Sapphire-Rapids-class core, [16384, 2048], 16 / 32 / 128 tokens, GMAC/s,
// against tile_group alone: Q4_K_X16 139 / 163 / 163 -> 168-171 / 186-187 / 186, MXFP4_X16 223 / 297 / 283 ->
// 283 / 377-380 / 366-367, INT4_SYM_X16 (f16 scales, groups of 32) 185 / 226-230 / 209 -> 201 / 174-213 / 220.
// Without any decoding (weights not read) the tiles alone ran MXFP4 at ~490: the x tiles' loads and the products'
// latency bound them. False (nothing done) where the spans differ (MXFP4: one group's scales in its weights, the
// other's not).
template <class D, int NT>
bool tile_pair(const WeightMat& m, int64_t r, const uint16_t* xo, int64_t ldo, const float* xs, int64_t nsub,
               float* y0, float* y1) {
  const D d0{}, d1{};
  const int64_t nb = m.cols / 32, span = d0.span(m, r), lda = 2 * ldo;
  if (d1.span(m, r + 16) != span) return false;
  alignas(64) uint16_t bb[2][2][512];  // block parity, group
  alignas(64) float cs[2][NT * 256];
  std::memset(y0, 0, sizeof(float) * 256 * NT);
  std::memset(y1, 0, sizeof(float) * 256 * NT);
  // block j + 1 is decoded before j's B tiles are loaded: a tile load of just-stored vectors waits for them
  d0.decode(m, r, 0, bb[0][0]);
  d1.decode(m, r + 16, 0, bb[0][1]);
  for (int64_t j0 = 0; j0 < nb; j0 += span) {
    static_for<0, NT>([&](auto ic) {
      tile_zero<0, decltype(ic)::value>();
      tile_zero<1, decltype(ic)::value>();
    });
    for (int64_t j = j0, j1 = j0 + span < nb ? j0 + span : nb; j < j1; ++j) {
      if (j + 1 < nb) {
        d0.decode(m, r, j + 1, bb[(j + 1) % 2][0]);
        d1.decode(m, r + 16, j + 1, bb[(j + 1) % 2][1]);
      }
      tile_load_b<0>(bb[j % 2][0]);
      tile_load_b<1>(bb[j % 2][1]);
      static_for<0, NT>([&](auto ic) { tile_dot_pair<decltype(ic)::value>(xo + kTokTile * decltype(ic)::value * ldo + 32 * j, lda); });
    }
    static_for<0, NT>([&](auto ic) {
      constexpr int i = decltype(ic)::value;
      tile_store<0, i>(cs[0] + 256 * i);
      tile_store<1, i>(cs[1] + 256 * i);
    });
    d0.scale(m, r, j0, cs[0], xs, nsub, kTokTile * NT, y0);
    d1.scale(m, r + 16, j0, cs[1], xs, nsub, kTokTile * NT, y1);
  }
  return true;
}

// Rows [r0, r1) of an X16 matrix against ntok bf16 tokens: passes of 32 tokens (x prepared and padded with zero
// tokens), each over every group of 16 rows. Rows not in whole 16s: the scalar twin, exactly.
template <class D>
void tile_rows(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx, float* Y,
               int64_t ldy) {
  const int64_t cols = m.cols, nsub = cols / 32, ldo = cols + 32;  // + 32: no 4 KiB aliasing of x's rows
  thread_local FloatBuf bx, bs, by;
  if (r0 % 16 || r1 % 16) {
    float* xf = bs.get(ntok * cols);
    for (int64_t t = 0; t < ntok; ++t) bf16_to_f32_n(X + t * ldx, cols, xf + t * cols);
    return rows_scalar(m, r0, r1, xf, ntok, cols, Y, ldy);
  }
  uint16_t* xo = u16_buf(bx, kPass * ldo);
  float* xs = D::kSums ? bs.get(kPass * nsub) : nullptr;
  float* yb = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(by.get(2 * kPass * 16 + 16)) + 63) & ~uintptr_t(63));
  const D d{};
  tiles_configure();
  for (int64_t t0 = 0; t0 < ntok; t0 += kPass) {
    const int nt = static_cast<int>(ntok - t0 < kPass ? ntok - t0 : kPass);
    x16_prep(X + t0 * ldx, ldx, nt, cols, xo, ldo, xs);
    const int tiles = nt > kTokTile ? 2 : 1;
    for (int t = nt; t < kTokTile * tiles; ++t) {  // zero tokens to fill the last tile
      std::memset(xo + t * ldo, 0, sizeof(uint16_t) * cols);
      if (xs) std::memset(xs + t * nsub, 0, sizeof(float) * nsub);
    }
    for (int64_t r = r0; r < r1;) {
      if constexpr (D::kParts == 1) {
        if (r + 32 <= r1 &&
            (tiles == 2 ? tile_pair<D, 2>(m, r, xo, ldo, xs, nsub, yb, yb + 512)
                        : tile_pair<D, 1>(m, r, xo, ldo, xs, nsub, yb, yb + 512))) {
          for (int t = 0; t < nt; ++t)
            for (int h = 0; h < 2; ++h)
              std::memcpy(Y + (t0 + t) * ldy + (r - r0) + 16 * h, yb + 512 * h + 16 * t, sizeof(float) * 16);
          r += 32;
          continue;
        }
      }
      if (tiles == 2)
        tile_group<D, 2>(d, m, r, xo, ldo, xs, nsub, yb);
      else
        tile_group<D, 1>(d, m, r, xo, ldo, xs, nsub, yb);
      for (int t = 0; t < nt; ++t) std::memcpy(Y + (t0 + t) * ldy + (r - r0), yb + 16 * t, sizeof(float) * 16);
      r += 16;
    }
  }
  _tile_release();
}

}  // namespace

void rows_tile_q4kx16_amx(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                          float* Y, int64_t ldy) {
  tile_rows<Q4kTile>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_tile_mxfp4x16_amx(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                            float* Y, int64_t ldy) {
  tile_rows<NibTile<Mxfp4>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_tile_int4x16_amx(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                           float* Y, int64_t ldy) {
  tile_rows<NibTile<Int4Sym>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_tile_int8x16_amx(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                           float* Y, int64_t ldy) {
  tile_rows<ByteTile<Int8Parts>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

void rows_tile_fp8x16_amx(const WeightMat& m, int64_t r0, int64_t r1, const uint16_t* X, int64_t ntok, int64_t ldx,
                          float* Y, int64_t ldy) {
  tile_rows<ByteTile<Fp8Parts>>(m, r0, r1, X, ntok, ldx, Y, ldy);
}

}  // namespace ft

// Decode attention (cpu/attn_decode.h) with one-lane traits (attn_common.h's ScalarAttn), compiled with this
// file's flags.
#include "cpu/arch/attn_common.h"

namespace ft {

void attn_span_scalar(const DecodeAttn& a, int64_t b, int64_t kh, int64_t lo, int64_t hi, float* part) {
  if (a.kv_bf16)
    attn_span_impl<ScalarAttn, uint16_t>(a, b, kh, lo, hi, part);
  else
    attn_span_impl<ScalarAttn, float>(a, b, kh, lo, hi, part);
}

}  // namespace ft

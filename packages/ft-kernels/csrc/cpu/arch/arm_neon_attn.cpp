// Decode attention (cpu/attn_decode.h) with one-lane traits (attn_common.h's ScalarAttn), compiled with this
// file's flags.
#include "cpu/arch/attn_common.h"

namespace ft {

void attn_head_neon(const DecodeAttn& a, int64_t b, int64_t kh) {
  if (a.kv_bf16)
    attn_head_impl<ScalarAttn, uint16_t>(a, b, kh);
  else
    attn_head_impl<ScalarAttn, float>(a, b, kh);
}

}  // namespace ft

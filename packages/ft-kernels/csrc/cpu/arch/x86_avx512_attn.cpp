// Decode attention (cpu/attn_decode.h) in AVX-512: the task of attn_common.h over zmm vectors.
#include "cpu/arch/attn_common.h"
#include "cpu/arch/x86_avx512_attn.h"

namespace ft {

FT_ATTN_SPAN(attn_span_avx512, Avx512Attn)

}  // namespace ft

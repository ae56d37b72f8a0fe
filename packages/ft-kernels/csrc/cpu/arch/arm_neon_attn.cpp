// Decode attention (cpu/attn_decode.h) with one-lane traits (attn_common.h's ScalarAttn), compiled with this
// file's flags.
#include "cpu/arch/attn_common.h"

namespace ft {

FT_ATTN_SPAN(attn_span_neon, ScalarAttn)

}  // namespace ft

// The Gated DeltaNet decode task (cpu/gdn_decode.h) of gdn_common.h, compiled with this file's flags.
#include "cpu/arch/gdn_common.h"

namespace ft {

FT_GDN_HEAD(gdn_head_scalar)

}  // namespace ft

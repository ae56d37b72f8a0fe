// The Gated DeltaNet tasks, compiled with this file's flags: decode's (cpu/gdn_decode.h) of gdn_common.h and
// prefill's rule (cpu/gdn_prefill.h) of gdn_rule.h.
#include "cpu/arch/gdn_common.h"
#include "cpu/arch/gdn_rule.h"

namespace ft {

FT_GDN_HEAD(gdn_head_scalar)
FT_GDN_RULE(gdn_rule_scalar)

}  // namespace ft

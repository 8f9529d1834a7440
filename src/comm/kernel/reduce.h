/*
 * The local reduction kernels (reduce_local.c): what the engine applies
 * as a message arrives (comm_irecv_reduce) and what the algorithms apply
 * to their own buffers. Below the engine: includes util only.
 */
#ifndef AI_COMM_KERNEL_REDUCE_H
#define AI_COMM_KERNEL_REDUCE_H

#include "util/util.h"

/* Local reduction: dst[i] = a[i] op b[i]. dst may equal a or b. op != AVG. */
void comm_reduce_local(void *dst, const void *a, const void *b, size_t count,
                       ai_dtype dt, ai_op op);
/* comm_reduce_local without the x86 SIMD paths (kernel/reduce_local.c), so tests can
 * check the portable kernels on machines that have those paths. */
void comm_reduce_local_portable(void *dst, const void *a, const void *b, size_t count,
                                ai_dtype dt, ai_op op);

/* buf[i] /= divisor (AVG's final step; integer types divide truncating). */
void comm_scale_div(void *buf, size_t count, ai_dtype dt, int divisor);

#endif

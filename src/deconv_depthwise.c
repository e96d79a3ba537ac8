/* Depthwise transposed convolution, float and double, compiled once per ISA
 * (portable, AVX2, AVX-512 through function target attributes, never -march) and
 * dispatched at run time by the same ISA choice as the GEMM (fd_gemm_get_isa), so
 * FASTDECONV_ISA / fd_gemm_set_isa force every path here too. See deconv_depthwise.template.c. */
#include "conv_geometry.h"
#include "templating.h"
#include "gemm.h"
#include "kernels.h"

#define FD_ISA_FN(name) FD_CAT(FD_FN(name), FD_CAT(_, FD_ISA))

#define FD_TARGET
#define FD_ISA portable
#define FD_REAL float
#define FD_PREFIX s
#include "deconv_depthwise.template.c"
#undef FD_REAL
#undef FD_PREFIX
#define FD_REAL double
#define FD_PREFIX d
#include "deconv_depthwise.template.c"
#undef FD_REAL
#undef FD_PREFIX
#undef FD_TARGET
#undef FD_ISA

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define FD_HAVE_X86_CLONES 1
#define FD_TARGET __attribute__((target("avx2,fma")))
#define FD_ISA avx2
#define FD_REAL float
#define FD_PREFIX s
#include "deconv_depthwise.template.c"
#undef FD_REAL
#undef FD_PREFIX
#define FD_REAL double
#define FD_PREFIX d
#include "deconv_depthwise.template.c"
#undef FD_REAL
#undef FD_PREFIX
#undef FD_TARGET
#undef FD_ISA

#define FD_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma,avx2")))
#define FD_ISA avx512
#define FD_REAL float
#define FD_PREFIX s
#include "deconv_depthwise.template.c"
#undef FD_REAL
#undef FD_PREFIX
#define FD_REAL double
#define FD_PREFIX d
#include "deconv_depthwise.template.c"
#undef FD_REAL
#undef FD_PREFIX
#undef FD_TARGET
#undef FD_ISA
#else
#define FD_HAVE_X86_CLONES 0
#endif

#define FD_DEPTHWISE_DISPATCH(prefix, real)                                                                   \
    int fd_##prefix##deconv_depthwise_rows(const fd_geometry *geo, const ptrdiff_t *taps_y,                   \
                                           const ptrdiff_t *taps_x, const real *x, const real *wr,            \
                                           const real *bias, real *y, ptrdiff_t row_begin, ptrdiff_t row_end) \
    {                                                                                                          \
        switch (FD_HAVE_X86_CLONES ? fd_gemm_get_isa() : FD_ISA_PORTABLE) {                                    \
        DEPTHWISE_X86_CASES(prefix)                                                                            \
        default:                                                                                               \
            return fd_##prefix##deconv_depthwise_rows_portable(geo, taps_y, taps_x, x, wr, bias, y,           \
                                                               row_begin, row_end);                            \
        }                                                                                                      \
    }

#if FD_HAVE_X86_CLONES
#define DEPTHWISE_X86_CASES(prefix)                                                                           \
    case FD_ISA_AVX512:                                                                                       \
        return fd_##prefix##deconv_depthwise_rows_avx512(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end); \
    case FD_ISA_AVX2:                                                                                         \
        return fd_##prefix##deconv_depthwise_rows_avx2(geo, taps_y, taps_x, x, wr, bias, y, row_begin, row_end);
#else
#define DEPTHWISE_X86_CASES(prefix)
#endif

FD_DEPTHWISE_DISPATCH(s, float)
FD_DEPTHWISE_DISPATCH(d, double)

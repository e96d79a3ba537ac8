/* The indirect GEMM's run-time ISA choice and dispatch (gemm.h): the one table of the ISAs, their names
 * and their kernels.
 *
 * A new ISA is a set of kernel files that define fd_gemm_<isa>_available() and the float and double
 * entry points fd_?gemm_indirect_<isa> (gemm_internal.h: FD_GEMM_DECLARE_ISA), its id in gemm.h's enum
 * and its line in FD_GEMM_ISAS below. */
#include <stddef.h>

#include "gemm_internal.h"

/* Every ISA: its id (gemm.h) and its name, which is also its kernels' suffix. */
#define FD_GEMM_ISAS(ISA)          \
    ISA(FD_ISA_PORTABLE, portable) \
    ISA(FD_ISA_AVX2, avx2)         \
    ISA(FD_ISA_AVX512, avx512)     \
    ISA(FD_ISA_NEON, neon)

#define FD_GEMM_ISA_DECLARATIONS(id, isa) FD_GEMM_DECLARE_ISA(isa)
FD_GEMM_ISAS(FD_GEMM_ISA_DECLARATIONS)
#undef FD_GEMM_ISA_DECLARATIONS

typedef struct {
    const char *name;
    int (*available)(void);
    fd_sgemm_indirect_fn sgemm;
    fd_dgemm_indirect_fn dgemm;
} fd_gemm_isa;

#define FD_GEMM_ISA_ENTRY(id, isa) \
    [id] = {#isa, fd_gemm_##isa##_available, fd_sgemm_indirect_##isa, fd_dgemm_indirect_##isa},
static const fd_gemm_isa fd_gemm_isas[] = {FD_GEMM_ISAS(FD_GEMM_ISA_ENTRY)};
#undef FD_GEMM_ISA_ENTRY

/* Every id of gemm.h has its line (a negative array size fails to compile). */
typedef char fd_gemm_isa_table_complete[sizeof(fd_gemm_isas) / sizeof(fd_gemm_isas[0]) == FD_ISA_COUNT ? 1 : -1];

/* -1 until resolved (fd_choice_get). */
static int fd_gemm_isa_state = -1;

const char *fd_gemm_isa_name(int isa) {
    return isa >= 0 && isa < FD_ISA_COUNT ? fd_gemm_isas[isa].name : "unknown";
}

int fd_gemm_isa_supported(int isa) {
    return isa >= 0 && isa < FD_ISA_COUNT && fd_gemm_isas[isa].available() > 0;
}

int fd_gemm_isa_compiled(int isa) {
    return isa >= 0 && isa < FD_ISA_COUNT && fd_gemm_isas[isa].available() >= 0;
}

/* The highest supported id (the portable path is always supported). */
static int best_supported_isa(void) {
    int isa = FD_ISA_COUNT - 1;
    while (isa > FD_ISA_PORTABLE && !fd_gemm_isa_supported(isa)) isa--;
    return isa;
}

int fd_gemm_get_isa(void) { return fd_choice_get(&fd_gemm_isa_state, best_supported_isa); }

int fd_gemm_set_isa(int isa) {
    if (!fd_gemm_isa_supported(isa)) return -1;
    fd_choice_store(&fd_gemm_isa_state, isa);
    return 0;
}

/* The panel budget (gemm.h) in KiB: forced (>= 0) or automatic (-1); the automatic value is -1 until
 * resolved (fd_choice_get). Half (Intel) or a quarter (AMD) of one core's L2: measured on a Sapphire Rapids
 * class Xeon (2 MiB L2, where 256 KiB cost 5-15 % on panels of 0.3-1.1 MiB, a quarter up to 15 % on some,
 * and half ran as fast as never cutting them, or faster on a 2 MiB panel) and on Zen 5 (1 MiB L2, where a
 * quarter gained 5-20 %); asv_benches/NOTES.md. */
#define FD_GEMM_DEFAULT_PANEL_KIB 256
static int fd_gemm_panel_kib_forced = -1;
static int fd_gemm_panel_kib_auto = -1;

static int auto_panel_kib(void) {
    const long long l2 = fd_cpu_cache_kib(2);
    const int vendor = fd_cpu_vendor();
    if (l2 <= 0 || l2 > (1 << 20)) return FD_GEMM_DEFAULT_PANEL_KIB;
    return (int)(vendor == FD_CPU_VENDOR_AMD ? l2 / 4 : vendor == FD_CPU_VENDOR_INTEL ? l2 / 2 : FD_GEMM_DEFAULT_PANEL_KIB);
}

size_t fd_gemm_panel_budget(void) {
    const int forced = fd_choice_load(&fd_gemm_panel_kib_forced);
    return (size_t)(forced >= 0 ? forced : fd_choice_get(&fd_gemm_panel_kib_auto, auto_panel_kib)) * 1024;
}

void fd_gemm_set_panel_budget(long long bytes) {
    fd_choice_store(&fd_gemm_panel_kib_forced, bytes < 0 ? -1 : bytes / 1024 > (1 << 20) ? (1 << 20) : (int)(bytes / 1024));
}

/* The public entry of one element type: the ISA path chosen at run time. */
#define FD_GEMM_DISPATCH(p, real)                                                                              \
    void fd_##p##gemm_indirect(size_t M, size_t N, size_t T, size_t Kc, const real *const *a_rows,             \
                               const real *packed_b, const real *bias, real *const *c_rows, int flags) {        \
        if (M == 0 || N == 0) return;                                                                          \
        fd_gemm_isas[fd_gemm_get_isa()].p##gemm(M, N, T, Kc, a_rows, packed_b, bias, c_rows, flags);            \
    }

FD_GEMM_DISPATCH(s, float)
FD_GEMM_DISPATCH(d, double)

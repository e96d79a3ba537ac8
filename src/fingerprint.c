#include "fingerprint.h"

/* xxHash compiled into this file only. On x86 its own dispatcher (xxh_x86dispatch.c, part of
 * xxHash) compiles SSE2, AVX2 and AVX-512 variants of the hash loop with target attributes and picks
 * one at run time from CPUID and XGETBV, as src/gemm.c does for the GEMM: no -m flags. Elsewhere
 * the plain build uses what the compiler targets (NEON on arm64). */
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include "third_party/xxhash/xxh_x86dispatch.c"
#define FD_XXH3_128BITS XXH3_128bits_dispatch
#else
#define XXH_INLINE_ALL
#include "third_party/xxhash/xxhash.h"
#define FD_XXH3_128BITS XXH3_128bits
#endif

void fd_fingerprint(const void *data, size_t bytes, uint64_t out[2]) {
    XXH128_hash_t hash = FD_XXH3_128BITS(data, bytes);
    out[0] = hash.low64;
    out[1] = hash.high64;
}

#include "fingerprint.h"

#include <stdlib.h>

#include "conv_geometry.h"
#include "pool.h"

/* xxHash compiled into this file only. On x86 its own dispatcher (xxh_x86dispatch.c, part of
 * xxHash) compiles SSE2, AVX2 and AVX-512 variants of the hash loop with target attributes and picks
 * one at run time from CPUID and XGETBV, as src/kernels/gemm_dispatch.c does for the GEMM: no -m flags.
 * Elsewhere the plain build uses what the compiler targets (NEON on arm64). */
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include "third_party/xxhash/xxh_x86dispatch.c"
#define FD_XXH3_128BITS XXH3_128bits_dispatch
#else
#define XXH_INLINE_ALL
#include "third_party/xxhash/xxhash.h"
#define FD_XXH3_128BITS XXH3_128bits
#endif

typedef struct {
    const unsigned char *data;
    size_t bytes;
    XXH128_hash_t *parts;
} fingerprint_job;

static int fingerprint_part(void *context, ptrdiff_t part, int slot) {
    const fingerprint_job *job = (const fingerprint_job *)context;
    const size_t begin = (size_t)part * FD_FINGERPRINT_PART;
    const size_t left = job->bytes - begin;
    (void)slot;
    job->parts[part] = FD_XXH3_128BITS(job->data + begin, left < FD_FINGERPRINT_PART ? left : FD_FINGERPRINT_PART);
    return 0;
}

int fd_fingerprint(const void *data, size_t bytes, int participants, uint64_t out[2]) {
    XXH128_hash_t hash;
    if (bytes < FD_FINGERPRINT_PART) {
        hash = FD_XXH3_128BITS(data, bytes);
    } else {
        const size_t count = (bytes + FD_FINGERPRINT_PART - 1) / FD_FINGERPRINT_PART;
        /* the parts' hashes, then the length: two ranges of different lengths never share a list */
        XXH128_hash_t *parts = (XXH128_hash_t *)malloc((count + 1) * sizeof(*parts));
        if (parts == NULL) return FD_ERR_WORKSPACE;
        fingerprint_job job = {(const unsigned char *)data, bytes, parts};
        fd_pool_run((ptrdiff_t)count, participants, fingerprint_part, &job);
        parts[count].low64 = (XXH64_hash_t)bytes;
        parts[count].high64 = 0;
        hash = FD_XXH3_128BITS(parts, (count + 1) * sizeof(*parts));
        free(parts);
    }
    out[0] = hash.low64;
    out[1] = hash.high64;
    return 0;
}

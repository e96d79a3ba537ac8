/* CPU feature detection without the compiler's run-time library (cpu_features.h): cpuid and xgetbv
 * through <cpuid.h> and inline assembly on GCC/clang, <intrin.h> on MSVC. */
#include "cpu_features.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64) || defined(_M_IX86)
#define FD_CPU_X86 1
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
    int regs[4];
    __cpuidex(regs, (int)leaf, (int)sub);
    for (int i = 0; i < 4; i++) r[i] = (unsigned)regs[i];
}
static unsigned long long xgetbv0(void) { return _xgetbv(0); }
#else
#include <cpuid.h>
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) { __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]); }
/* xgetbv by its encoding: the mnemonic and the _xgetbv intrinsic need -mxsave on older compilers; only
 * called when cpuid reports OSXSAVE. */
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif
#else
#define FD_CPU_X86 0
#endif

/* FD_CPU_* bits, or -1 until detected. Loads and stores are atomic where the compiler has them (an
 * aligned int is read and written whole on every x86 anyway). */
static int fd_cpu_feature_state = -1;

static int load_state(void) {
#if defined(__GNUC__) || defined(__clang__)
    return __atomic_load_n(&fd_cpu_feature_state, __ATOMIC_ACQUIRE);
#else
    return *(volatile int *)&fd_cpu_feature_state;
#endif
}

static void store_state(int value) {
#if defined(__GNUC__) || defined(__clang__)
    __atomic_store_n(&fd_cpu_feature_state, value, __ATOMIC_RELEASE);
#else
    *(volatile int *)&fd_cpu_feature_state = value;
#endif
}

#if FD_CPU_X86
static unsigned max_leaf(unsigned base) {
    unsigned r[4];
    cpuid(base, 0, r);
    return r[0];
}

static unsigned detect(void) {
    unsigned r[4], features = 0;
    const unsigned top = max_leaf(0);
    if (top < 1) return 0;
    cpuid(1, 0, r);
    const unsigned ecx1 = r[2];
    unsigned ebx7 = 0;
    if (top >= 7) {
        cpuid(7, 0, r);
        ebx7 = r[1];
    }
    if (ebx7 & (1u << 3)) features |= FD_CPU_bmi;    /* scalar: no register state needed */
    if (ebx7 & (1u << 8)) features |= FD_CPU_bmi2;
    if (max_leaf(0x80000000u) >= 0x80000001u) {
        cpuid(0x80000001u, 0, r);
        if (r[2] & (1u << 5)) features |= FD_CPU_lzcnt;   /* ABM */
    }
    /* OSXSAVE (the OS enabled xgetbv) and AVX, then the state the OS saves: XMM and YMM (XCR0 bits 1,
     * 2) for every AVX feature, and opmask, ZMM0-15 upper halves and ZMM16-31 (5, 6, 7) for AVX-512. */
    if (!(ecx1 & (1u << 27)) || !(ecx1 & (1u << 28))) return features;
    const unsigned long long xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return features;
    features |= FD_CPU_avx;
    if (ecx1 & (1u << 12)) features |= FD_CPU_fma;
    if (ebx7 & (1u << 5)) features |= FD_CPU_avx2;
    if ((xcr0 & 0xe0) != 0xe0 || !(ebx7 & (1u << 16))) return features;
    features |= FD_CPU_avx512f;
    if (ebx7 & (1u << 31)) features |= FD_CPU_avx512vl;
    if (ebx7 & (1u << 30)) features |= FD_CPU_avx512bw;
    if (ebx7 & (1u << 17)) features |= FD_CPU_avx512dq;
    if (ebx7 & (1u << 28)) features |= FD_CPU_avx512cd;
    return features;
}
#else
static unsigned detect(void) { return 0; }
#endif

unsigned fd_cpu_features(void) {
    int state = load_state();
    if (state < 0) {
        state = (int)detect();
        store_state(state);
    }
    return (unsigned)state;
}

int fd_cpu_supports_all(unsigned mask) { return (fd_cpu_features() & mask) == mask; }

int fd_cpu_vendor(void) {
#if FD_CPU_X86
    unsigned r[4];
    char name[13];
    cpuid(0, 0, r);
    memcpy(name, &r[1], 4);   /* the vendor string is in ebx, edx, ecx */
    memcpy(name + 4, &r[3], 4);
    memcpy(name + 8, &r[2], 4);
    name[12] = '\0';
    if (strcmp(name, "GenuineIntel") == 0) return FD_CPU_VENDOR_INTEL;
    if (strcmp(name, "AuthenticAMD") == 0) return FD_CPU_VENDOR_AMD;
#endif
    return FD_CPU_VENDOR_OTHER;
}

long long fd_cpu_cache_kib(int level) {
#if !FD_CPU_X86
    (void)level;
#else
    const unsigned leaf = fd_cpu_vendor() == FD_CPU_VENDOR_AMD ? 0x8000001Du : 4u;
    if (max_leaf(leaf & 0x80000000u) < leaf) return 0;
    for (unsigned index = 0; index < 16; index++) {
        unsigned r[4];
        cpuid(leaf, index, r);
        const unsigned a = r[0], b = r[1], c = r[2];
        const unsigned type = a & 0x1f, cache_level = (a >> 5) & 7;
        if (type == 0) break;                        /* no more caches */
        if ((int)cache_level == level && (type == 1 || type == 3))  /* data or unified */
            return (long long)(((b >> 22) & 0x3ff) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) *
                   ((long long)c + 1) / 1024;
    }
#endif
    return 0;
}

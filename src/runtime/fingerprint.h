/* A 128-bit fingerprint of a byte range (XXH3-128, vendored from xxHash: src/third_party/xxhash).
 * The function API's packed-weight cache (fastdeconv/_weight_cache.py) is keyed by the fingerprint of
 * the weight's bytes, so an array modified in place, or a new array at a freed one's address, is
 * never mistaken for the weights it packed: only equal bytes give an equal key (up to the 2**-128
 * chance of a collision between two different contents). Reads at memory speed, far faster than
 * packing the weights.
 *
 * Ranges of FD_FINGERPRINT_PART bytes or more are hashed in parts of that size on up to
 * `participants` threads (fastdeconv's pool), and the fingerprint is the hash of the parts' hashes
 * and the length: the same value whatever the thread count. Shorter ranges are hashed whole. */
#ifndef FASTDECONV_FINGERPRINT_H
#define FASTDECONV_FINGERPRINT_H
#include <stddef.h>
#include <stdint.h>

#define FD_FINGERPRINT_PART ((size_t)1 << 18)

/* 0, or FD_ERR_WORKSPACE when the parts' hashes could not be allocated. */
int fd_fingerprint(const void *data, size_t bytes, int participants, uint64_t out[2]);

#endif

// Hashes for the suite's own files: a 64-bit checksum that notices any change of a checkpoint's
// bytes (not a cryptographic digest: it guards against damage, not against an adversary).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace memfine {

// Deterministic mix of two 64-bit values (per-layer seeds, table keys).
uint64_t mix_seed(uint64_t a, uint64_t b);

// Of `size` bytes, continuing from `h` (start with 0).
uint64_t hash_bytes(const void* data, size_t size, uint64_t h = 0);

// 16 lowercase hex digits.
std::string hex64(uint64_t v);

}  // namespace memfine

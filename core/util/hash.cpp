#include "core/util/hash.h"

#include <cstdio>
#include <cstring>

namespace memfine {

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_bytes(const void* data, size_t size, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  h = mix_seed(h, size);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {  // a word at a time: a checkpoint's hundreds of MB in a second
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = mix_seed(h, w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, size - i);
  return mix_seed(h, tail ^ (uint64_t(size - i) << 56));
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace memfine

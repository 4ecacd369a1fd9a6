// Bytes as people read them.
#pragma once
#include <string>

namespace memfine {

// "1.5 MiB": bytes in the largest unit below 1024 of it.
std::string fmt_bytes(double bytes);

}  // namespace memfine

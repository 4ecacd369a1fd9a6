#include "core/util/format.h"

#include <cmath>
#include <cstdio>

namespace memfine {

std::string fmt_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string fmt_double(const char* format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

std::string printable(const std::string& text, size_t most) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    // The length of a well-formed UTF-8 sequence starting here (1 for ASCII), 0 for a bad byte.
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    for (size_t k = 1; n > 1 && k < n; ++k)
      if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) n = 0;
    if (n == 1 && (c < 0x20 || c == 0x7f) && c != '\n' && c != '\t') n = 0;
    std::string piece;
    if (n == 0) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", unsigned(c));
      piece = b, n = 1;
    } else {
      piece = text.substr(i, n);
    }
    if (out.size() + piece.size() > most) return out + "...";
    out += piece, i += n;
  }
  return out;
}

std::string fold(const std::string& text, size_t width, size_t indent) {
  std::string out, line;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent, ' ') + word;
    } else {
      line += (line.empty() ? "" : " ") + word;
    }
    start = end + 1;
  }
  return out + line;
}

}  // namespace memfine

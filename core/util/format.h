// Bytes as people read them.
#pragma once
#include <string>

namespace memfine {

// "1.5 MiB": bytes in the largest unit below 1024 of it.
std::string fmt_bytes(double bytes);

// A number through a printf format of one double ("%.3f", "%.1f%%").
std::string fmt_double(const char* format, double v);

// A rate or count as a person reads it: four significant digits ("773", "0.1235").
inline std::string four_digits(double v) { return fmt_double("%.4g", v); }

// Prose folded at spaces into lines of at most `width` characters (a word longer stays whole),
// later lines indented by `indent` spaces.
std::string fold(const std::string& text, size_t width, size_t indent = 2);

// Text from a user's file as a message shows it: control bytes (a NUL among them) and bytes that
// are not UTF-8 written as \xNN, at most `most` bytes of it, never cut inside a character, with
// "..." where it was cut.
std::string printable(const std::string& text, size_t most = 80);

}  // namespace memfine

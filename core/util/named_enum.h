// An enum's names, declared once beside it (a specialisation of EnumNames): a file's value is
// parsed into the enum where it is read, written back and documented by name, and the code past
// that edge compares enumerators, so a renamed value fails to compile instead of to match.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memfine {

// Specialise with `static constexpr std::pair<E, const char*> all[] = {...};`, in the order the
// key reference lists them.
template <class E>
struct EnumNames;

template <class E>
std::string name_of(E e) {
  for (const auto& [v, n] : EnumNames<E>::all)
    if (v == e) return n;
  return "?";
}

template <class E>
std::optional<E> enum_named(std::string_view s) {
  for (const auto& [v, n] : EnumNames<E>::all)
    if (s == n) return v;
  return std::nullopt;
}

template <class E>
std::vector<std::string> enum_names() {
  std::vector<std::string> out;
  for (const auto& [v, n] : EnumNames<E>::all) out.emplace_back(n);
  return out;
}

}  // namespace memfine

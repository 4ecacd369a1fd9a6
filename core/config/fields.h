// A section's keys, each declared once: how it is read from YAML (typed and range-checked), written
// back into a record's config, and documented in experiments/README.md's key reference (`memfine
// keys`). A section is a table of them; what ties keys together (topk at most experts) is checked
// by the section's own code after they are read.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/config/reader.h"
#include "core/util/named_enum.h"

namespace memfine {

template <class S>
struct Field {
  std::string key, type, fallback, help;  // type and default as the key reference shows them
  std::function<void(MapReader&, S&)> read;
  std::function<nlohmann::json(const S&)> write;
  // Left out of the written config while it holds its default: a key a few files use (a whole
  // model's), so that every other file's records read as they did before it existed.
  std::function<bool(const S&)> at_default;
};

template <class S>
struct Section {
  std::string name;  // "model"; "" for the top level
  std::vector<Field<S>> fields;
};

// A key's documentation row: "model.layers", its type, default and meaning.
struct KeyDoc {
  std::string key, type, fallback, help;
};

template <class S>
void read_section(const Section<S>& sec, MapReader& r, S& s) {
  for (const auto& f : sec.fields) f.read(r, s);
}

template <class S>
nlohmann::json write_section(const Section<S>& sec, const S& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : sec.fields)
    if (!(f.at_default && f.at_default(s))) j[f.key] = f.write(s);
  return j;
}

template <class S>
std::vector<KeyDoc> section_docs(const Section<S>& sec) {
  std::vector<KeyDoc> out;
  for (const auto& f : sec.fields)
    out.push_back({sec.name.empty() ? f.key : sec.name + "." + f.key, f.type, f.fallback, f.help});
  return out;
}

namespace fields {

inline std::string range(double lo, double hi) {
  std::ostringstream s;
  s << lo << " .. " << hi;
  return s.str();
}

template <class S>
Field<S> integer(std::string key, int64_t S::*m, int64_t lo, int64_t hi, std::string help) {
  return {key,
          "int, " + std::to_string(lo) + " .. " + std::to_string(hi),
          std::to_string(S{}.*m),
          std::move(help),
          [key, m, lo, hi](MapReader& r, S& s) { r.read_int(key, s.*m, lo, hi); },
          [m](const S& s) { return nlohmann::json(s.*m); }};
}

template <class S>
Field<S> unsigned_integer(std::string key, uint64_t S::*m, std::string help) {
  return {key,
          "int >= 0",
          std::to_string(S{}.*m),
          std::move(help),
          [key, m](MapReader& r, S& s) { r.read(key, s.*m, "a non-negative integer"); },
          [m](const S& s) { return nlohmann::json(s.*m); }};
}

template <class S>
Field<S> number(std::string key, double S::*m, double lo, double hi, std::string help) {
  std::ostringstream d;
  d << S{}.*m;
  return {key,
          "number, " + range(lo, hi),
          d.str(),
          std::move(help),
          [key, m, lo, hi](MapReader& r, S& s) { r.read_number(key, s.*m, lo, hi); },
          [m](const S& s) { return nlohmann::json(s.*m); }};
}

template <class S>
Field<S> boolean(std::string key, bool S::*m, std::string help) {
  return {key,
          "true | false",
          S{}.*m ? "true" : "false",
          std::move(help),
          [key, m](MapReader& r, S& s) { r.read(key, s.*m, "true or false"); },
          [m](const S& s) { return nlohmann::json(s.*m); }};
}

// The key reference's type of a choice: `a` \| `b`.
inline std::string one_of(const std::vector<std::string>& choices) {
  std::string type;
  for (const auto& c : choices) type += (type.empty() ? "`" : " \\| `") + c + "`";
  return type;
}

template <class S>
Field<S> choice(std::string key, std::string S::*m, std::vector<std::string> choices, std::string help) {
  return {key,
          one_of(choices),
          S{}.*m,
          std::move(help),
          [key, m, choices](MapReader& r, S& s) { r.read_choice(key, s.*m, choices); },
          [m](const S& s) { return nlohmann::json(s.*m); }};
}

// Reads one of an enum's names (core/util/named_enum.h) into the enum; absent: untouched.
template <class E>
void read_enum(MapReader& r, const std::string& key, E& dst) {
  std::string v = name_of(dst);
  r.read_choice(key, v, enum_names<E>());
  dst = *enum_named<E>(v);
}

// A key holding one of an enum's names, held as the enum.
template <class S, class E>
Field<S> enumerated(std::string key, E S::*m, std::string help) {
  return {key,
          one_of(enum_names<E>()),
          name_of(S{}.*m),
          std::move(help),
          [key, m](MapReader& r, S& s) { read_enum(r, key, s.*m); },
          [m](const S& s) { return nlohmann::json(name_of(s.*m)); }};
}

// A string (a path is resolved by its section against the YAML's folder); `nullable`: written null
// when empty.
template <class S>
Field<S> text(std::string key, std::string S::*m, std::string type, std::string help, bool nullable = false) {
  const std::string fallback = (S{}.*m).empty() ? "none" : "`" + S{}.*m + "`";
  return {key,
          type,
          fallback,
          std::move(help),
          [key, m](MapReader& r, S& s) { r.read(key, s.*m, "a string"); },
          [m, nullable](const S& s) {
            return nullable && (s.*m).empty() ? nlohmann::json(nullptr) : nlohmann::json(s.*m);
          }};
}

// The same field, written only where it differs from its default.
template <class S, class T>
Field<S> when_set(Field<S> f, T S::*m) {
  f.at_default = [m](const S& s) { return s.*m == S{}.*m; };
  return f;
}

// Bytes ("512MiB", "2GiB", a count); with `none_ok`, `none` (or -1) is none, written null.
template <class S>
Field<S> bytes(std::string key, int64_t S::*m, bool none_ok, std::string help) {
  const int64_t d = S{}.*m;
  return {key,
          "bytes, `512MiB`, `2GiB`" + std::string(none_ok ? ", `none`" : ""),
          d < 0 ? "none" : std::to_string(d),
          std::move(help),
          [key, m, none_ok](MapReader& r, S& s) { r.read_bytes(key, s.*m, none_ok); },
          [m, none_ok](const S& s) { return none_ok && s.*m < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.*m); }};
}

}  // namespace fields

}  // namespace memfine

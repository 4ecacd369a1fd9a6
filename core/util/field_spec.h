// A field of a record, declared once: its key, JSON type, unit and meaning. The record schema
// (core/record/schema.h) is a table of them; a strategy declares its own counters the same way
// (core/strategy/registry.h), and `memfine schema` prints both for programs and the plots.
#pragma once
#include <string>

namespace memfine {

struct FieldSpec {
  std::string key;
  // "string", "integer", "number", "boolean", "object", "list", "spread" ({median, min, max}), or
  // several joined by '|'; "null" among them when it may be null.
  std::string type;
  std::string unit;  // "bytes", "ms", "tokens/s", "TFLOP/s", "GB", "rows", ... ("" none)
  std::string meaning;
  std::string kinds = "measured";  // the records that carry it: measured, train, predicted (space-separated)
  bool legacy = false;             // read in older records, no longer written
};

}  // namespace memfine

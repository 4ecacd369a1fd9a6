// One record schema, declared once: every field a record of this suite holds (results.jsonl's
// measured records, train.jsonl's steps, `memfine predict --json`'s lines), with its JSON type,
// unit and meaning; the strategies' own counters are declared by each strategy beside its
// parameters. The writers put fields through it (a key it does not declare is a bug, refused), the
// readers (tables, resume, compare) read a typed view of a record, and the
// plotting package reads the same declaration (`memfine schema --json`, which a test holds
// scripts/plots/schema.json to).
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/util/field_spec.h"
#include "core/util/stats.h"

namespace memfine {

using json = nlohmann::json;

const std::vector<FieldSpec>& record_schema();
// The field of `key`; nullptr where the schema does not declare it.
const FieldSpec* record_field(const std::string& key);

// Sets `key` of a record being written; std::logic_error where the schema does not declare it.
void put(json& record, const std::string& key, json value);

// Whether `value` is of `spec`'s type.
bool of_type(const json& value, const FieldSpec& spec);

// A record read through the schema: the fields the harness's readers use, typed. Where a field is
// absent or null its optional is empty. `counters` holds the rest (a strategy's own, typed by it).
struct RecordView {
  std::string experiment, point, strategy, name, role, status, error;
  int64_t rank = 0, world_size = 1, ep = 1;
  std::optional<int64_t> step;  // train.jsonl's
  std::optional<double> tokens_received, static_bytes, peak_activation_bytes, predicted_activation_bytes, budget_bytes,
      grad_max_rel_err, verify_tolerance, eval_loss, loss;
  std::optional<Spread> step_ms;  // train.jsonl's one step: median = min = max
  std::vector<double> step_ms_all;
  std::optional<bool> verified;
  json params, config, env;  // as written (objects; null where absent)
  const json* raw = nullptr;
  // Any other field by its key (a strategy's counter: chunks, dropped_fraction; a prediction's), or null.
  json get(const std::string& key) const;
};

// Reads `r` through the schema; std::runtime_error naming `where` (FILE:LINE) and the key where a
// declared field has another type.
RecordView view_of(const json& r, const std::string& where = "");

}  // namespace memfine

// `memfine schema`: the record schema (core/record/schema.h) and every registered strategy's own
// counters, as a Markdown table for people or JSON for programs (scripts/plots/schema.json is this
// output; a test holds it so).
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/cli/commands.h"
#include "core/project/report.h"
#include "core/record/schema.h"
#include "core/strategy/registry.h"

namespace memfine::cli {

namespace {

nlohmann::json field_json(const FieldSpec& f) {
  nlohmann::json j = {{"type", f.type}, {"unit", f.unit}, {"meaning", f.meaning}, {"kinds", f.kinds}};
  if (f.legacy) j["legacy"] = true;
  return j;
}

// How figures draw a strategy and say its parameters (StrategyInfo::colour, Param::phrase).
nlohmann::json look_json(const StrategyInfo& info) {
  nlohmann::json params = nlohmann::json::object();
  for (const auto& p : info.params)
    if (!p.phrase.empty() || !p.phrases.empty()) params[p.name] = {{"phrase", p.phrase}, {"phrases", p.phrases}};
  return {{"colour", info.colour}, {"marker", info.marker}, {"params", params}};
}

int schema(const Args& a) {
  if (a.has("--json")) {
    nlohmann::json fields = nlohmann::json::object(), counters = nlohmann::json::object();
    nlohmann::json strategies = nlohmann::json::array(), looks = nlohmann::json::object();
    for (const auto& f : record_schema()) fields[f.key] = field_json(f);
    for (const auto& [name, info] : strategy_registry()) {
      strategies.push_back(name);
      for (const auto& f : info.counters) counters[name][f.key] = field_json(f);
      looks[name] = look_json(info);
    }
    nlohmann::json projection = nlohmann::json::object();
    for (const auto& f : projection_schema()) projection[f.key] = field_json(f);
    std::cout << nlohmann::json{{"fields", fields},
                                {"counters", counters},
                                {"strategies", strategies},
                                {"looks", looks},
                                {"projection", projection}}
                     .dump(1)
              << "\n";
    return 0;
  }
  std::cout << "| field | type | unit | records | meaning |\n|---|---|---|---|---|\n";
  for (const auto& f : record_schema())
    std::cout << "| `" << f.key << "` | " << f.type << " | " << f.unit << " | " << f.kinds << " | " << f.meaning
              << (f.legacy ? " (older records)" : "") << " |\n";
  for (const auto& [name, info] : strategy_registry())
    for (const auto& f : info.counters)
      std::cout << "| `" << f.key << "` | " << f.type << " | " << f.unit << " | " << f.kinds << " | " << name
                << "'s counter: " << f.meaning << " |\n";
  for (const auto& f : projection_schema())
    std::cout << "| `" << f.key << "` | " << f.type << " | " << f.unit << " | " << f.kinds
              << " | memfine project --json: " << f.meaning << " |\n";
  return 0;
}

}  // namespace

Command schema_command() {
  return {"schema",
          "",
          "the record schema: every field of a record, its type, unit and meaning",
          R"(Prints every field a record holds (results.jsonl's measured records, train.jsonl's steps, memfine
predict --json's lines), with its JSON type, unit and meaning, then each registered strategy's own
counters and every field of memfine project --json's lines, as a Markdown table; --json for programs
(scripts/plots/schema.json, which the plotting package reads, is this output).
)",
          {{"--json", "", "one JSON object: fields, counters by strategy, the strategies registered, how figures draw and say each, and projection"}},
          0,
          0,
          schema};
}

}  // namespace memfine::cli

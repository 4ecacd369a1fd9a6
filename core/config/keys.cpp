// An experiment file's key reference, made from the declarations (a test holds
// experiments/README.md to it; `memfine keys` prints it).
#include "core/config/sections.h"

namespace memfine {

std::string key_table(const std::vector<KeyDoc>& rows) {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& r : rows)
    out += "| `" + r.key + "` | " + r.type + " | " + (r.fallback.empty() ? "-" : r.fallback) + " | " + r.help + " |\n";
  return out;
}

std::string experiment_key_reference() {
  std::vector<KeyDoc> rows;
  auto add = [&](const std::vector<KeyDoc>& docs) { rows.insert(rows.end(), docs.begin(), docs.end()); };
  add(section_docs(top_keys()));
  add(section_docs(model_keys()));
  add(section_docs(parallel_keys()));
  add(section_docs(workload_keys()));
  add(section_docs(memory_keys()));
  rows.push_back({"strategies", "list (required)", "",
                  "names, or maps `{name: ..., param: value}`, at most " + std::to_string(kMaxStrategies) +
                      "; each strategy's parameters are in the table below (`memfine strategies`)"});
  rows.push_back({"sweep", "map of dotted key -> list", "",
                  "the points are the cross product, e.g. `model.seq: [256, 512]`; at most " +
                      std::to_string(kMaxSweepPoints) + " points"});
  rows.push_back(
      {"paper", "map", "", "makes the file a paper-scale projection for `memfine predict` only (its keys below)"});
  rows.push_back({"train", "map", "", "makes the file a training run for `memfine train` only (its keys below)"});
  add(section_docs(paper_keys()));
  add(section_docs(train_keys()));
  return key_table(rows);
}

}  // namespace memfine

// The key references, made from the declarations (a test holds experiments/README.md to them;
// `memfine keys` prints them): an experiment file's, a project file's and a hardware preset's.
#include "core/config/project.h"
#include "core/config/sections.h"

namespace memfine {

namespace {

std::string table(const std::vector<KeyDoc>& rows) {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& r : rows)
    out += "| `" + r.key + "` | " + r.type + " | " + (r.fallback.empty() ? "-" : r.fallback) + " | " + r.help + " |\n";
  return out;
}

std::string experiment_reference() {
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
  return table(rows);
}

}  // namespace

const std::vector<std::string>& key_references() {
  static const std::vector<std::string> names = {"experiment", "project", "hardware"};
  return names;
}

std::string key_reference_markdown(const std::string& which) {
  if (which == "project") {
    std::vector<KeyDoc> rows = section_docs(project_keys());
    for (const auto& more : {section_docs(search_keys()), section_docs(framework_keys())})
      rows.insert(rows.end(), more.begin(), more.end());
    return table(rows);
  }
  if (which == "hardware") {
    Section<Hardware> plain = hardware_keys();
    plain.name.clear();  // a preset's keys, under its name
    return table(section_docs(plain));
  }
  if (which != "experiment") throw std::invalid_argument("no key reference '" + which + "'");
  return experiment_reference();
}

}  // namespace memfine

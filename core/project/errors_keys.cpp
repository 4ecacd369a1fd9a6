#include <fstream>
#include <string>
#include <vector>

#include "core/config/sections.h"
#include "core/project/config.h"

namespace memfine {

namespace {

// A `seen` entry: its runs' count, too fast, held, and lowest, median and highest error (%).
ProjectionErrors::Seen read_seen(MapReader& m) {
  ProjectionErrors::Seen s;
  m.read_int("runs", s.runs, 1, 1000000);
  m.read_int("too_fast", s.too_fast, 0, s.runs);
  m.read_int("held", s.held, 0, s.runs);
  for (auto [k, dst] : {std::pair{"low", &s.low}, {"median", &s.median}, {"high", &s.high}})
    m.read_number(k, *dst, -100, 1e6);
  m.check_unknown();
  return s;
}

}  // namespace

// errors.yaml beside the presets (scripts/projection_errors.py writes it): the ranges the validation's
// first projections give and the one calibrated constant.
ProjectionErrors read_projection_errors(const std::string& presets_dir, std::vector<std::string>& problems) {
  ProjectionErrors e;
  const std::string file = presets_dir + "/errors.yaml";
  if (!std::ifstream(file).good()) return e;
  if (const std::string why = yaml_file_problem(file); !why.empty()) {
    problems.push_back(why);
    return e;
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::Exception& x) {
    problems.push_back(file + ":" + std::to_string(x.mark.line + 1) + ": " + x.msg);
    return e;
  }
  Problems p{file, problems};
  if (!root.IsMap()) {
    problems.push_back(file + ": expected the map scripts/projection_errors.py writes");
    return e;
  }
  MapReader r(root, "", p);
  r.read_number("layer_pass_s", e.layer_pass_s, 0, 1);
  MapReader speed(r.child("speed"), "speed", p), memory(r.child("memory"), "memory", p);
  speed.read_number("level", e.level, 0.01, 0.99);
  speed.read_number("low", e.speed_low, 0.01, 1);
  speed.read_number("high", e.speed_high, 1, 100);
  double ignored = 0;
  for (const char* k : {"runs", "held_out_coverage", "held_out_half_width", "held_out_by_family_half_width",
                        "in_order_runs", "in_order_coverage", "in_order_half_width"})
    speed.read_number(k, ignored, 0, 1e9);
  speed.read_number("held_out_by_family_coverage", e.speed_held_by_family, 0, 1);
  speed.read_int("source_families", e.source_families, 0, 1000000);
  memory.read_number("level", ignored, 0, 1e9);
  for (const auto& [f, name] : EnumNames<Framework>::all) {
    const YAML::Node n = memory.child(name);
    if (!n.IsDefined() || n.IsNull()) continue;
    MapReader m(n, std::string("memory.") + name, p);
    ProjectionErrors::Range range;
    m.read_number("low", range.low, 0.01, 1);
    m.read_number("high", range.high, 1, 100);
    m.read_number("runs", ignored, 0, 1e9);
    m.check_unknown();
    e.memory[f] = range;
  }
  // seen: profile -> model preset -> its runs' first-projection errors (optional).
  MapReader seen(r.child("seen"), "seen", p);
  for (const auto& [f, name] : EnumNames<Framework>::all) {
    const YAML::Node models = seen.child(name);
    if (!models.IsDefined() || models.IsNull()) continue;
    const std::string path = std::string("seen.") + name;
    MapReader in(models, path, p);  // reports a value that is not a map, and a repeated key
    if (!models.IsMap()) continue;
    for (const auto& kv : models) {
      if (!kv.first.IsScalar()) continue;
      const std::string model = kv.first.Scalar();
      MapReader m(in.child(model), path + "." + model, p);
      if (!kv.second.IsMap()) continue;
      e.seen[{f, model}] = read_seen(m);
    }
  }
  // seen_hardware: hardware preset -> its runs' first-projection errors (optional).
  const YAML::Node by_hardware = r.child("seen_hardware");
  MapReader hardware(by_hardware, "seen_hardware", p);
  if (by_hardware.IsMap())
    for (const auto& kv : by_hardware) {
      if (!kv.first.IsScalar() || !kv.second.IsMap()) continue;
      const std::string name = kv.first.Scalar();
      MapReader m(hardware.child(name), "seen_hardware." + name, p);
      e.seen_hardware[name] = read_seen(m);
    }
  // seen_micro_batches: a bin's name -> its bounds (from, to; no to: open) and its runs' errors (optional).
  const YAML::Node by_batches = r.child("seen_micro_batches");
  MapReader batches(by_batches, "seen_micro_batches", p);
  if (by_batches.IsMap())
    for (const auto& kv : by_batches) {
      if (!kv.first.IsScalar() || !kv.second.IsMap()) continue;
      ProjectionErrors::SeenBin b;
      b.name = kv.first.Scalar();
      MapReader m(batches.child(b.name), "seen_micro_batches." + b.name, p);
      m.read_int("from", b.from, 1, 1000000000);
      m.read_int("to", b.to, b.from, 1000000000);
      b.seen = read_seen(m);
      e.seen_micro_batches.push_back(b);
    }
  for (auto* m : {&r, &speed, &memory, &seen, &hardware, &batches}) m->check_unknown();
  for (const char* k : {"speed", "memory", "layer_pass_s"})
    if (!root[k].IsDefined()) p.add(root, k, "missing");
  e.file = file;
  return e;
}

}  // namespace memfine

// `memfine export FILE.yaml --out DIR`: what a step of one point starts from (weights, input,
// target, and the routing of every step) so that a model written elsewhere (tests/pytorch_reference.py,
// eager PyTorch) computes exactly what this code computes. One process, one expert-parallel rank:
// the reference has no emulated peers. DIR/state.json holds the resolved configuration and a table of
// tensors (name, dtype, shape, byte offset); DIR/state.bin their bytes, little-endian, contiguous.
#include "core/cli/commands.h"
#include "core/run/validate.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "core/config/config.h"
#include "core/record/results.h"
#include "core/run/rank_step.h"
#include "core/workload/workload.h"

namespace memfine::cli {

namespace {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kLong:
      return "int64";
    default:
      throw std::invalid_argument(std::string("export: unsupported dtype ") + c10::toString(t));
  }
}

struct Writer {
  std::ofstream bin;
  json table = json::array();
  int64_t offset = 0;
  void put(const std::string& name, const at::Tensor& t) {
    const at::Tensor c = t.detach().cpu().contiguous();
    bin.write(static_cast<const char*>(c.data_ptr()), std::streamsize(c.nbytes()));
    table.push_back(
        {{"name", name}, {"dtype", dtype_name(c.scalar_type())}, {"shape", c.sizes().vec()}, {"offset", offset}});
    offset += int64_t(c.nbytes());
  }
};

int export_experiment(const std::string& yaml, const std::string& dir, int64_t point) {
  std::vector<std::string> errors;
  auto points = load_and_validate(yaml, errors);
  for (const auto& e : errors) std::cerr << e << "\n";
  if (!errors.empty()) return 2;
  auto refuse = [&](const std::string& why) {
    std::cerr << yaml << ": export: " << why << "\n";
    return 2;
  };
  if (point < 0 || point >= int64_t(points.size()))
    return refuse("--point " + std::to_string(point) + " is out of range (the file has " +
                  std::to_string(points.size()) + " point(s))");
  const ExperimentConfig& c = points[size_t(point)].config;
  if (c.ep != 1) return refuse("parallel.ep must be 1 (the reference is one process without emulated peers)");
  if (c.workload.kind == "router") return refuse("workload.kind router is not exported (the routing must be fixed)");
  if (c.device != "cpu") return refuse("device must be cpu");
  if (c.dtype == "bfloat16") return refuse("dtype must be float32 or float64");

  std::filesystem::create_directories(dir);
  Writer w;
  w.bin.open(dir + "/state.bin", std::ios::binary | std::ios::trunc);
  if (!w.bin) return refuse("cannot write " + dir + "/state.bin: " + std::strerror(errno));
  auto st = make_train_state(c);
  const char* names[] = {"norm1", "wq", "wk", "wv", "wo", "norm2", "router", "shared_in", "shared_out"};
  for (size_t l = 0; l < st->model.layers.size(); ++l) {
    const LayerWeights& lw = st->model.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    const at::Tensor* ts[] = {&lw.norm1, &lw.wq,     &lw.wk,        &lw.wv,        &lw.wo,
                              &lw.norm2, &lw.router, &lw.shared_in, &lw.shared_out};
    for (size_t i = 0; i < 9; ++i)
      if (ts[i]->defined()) w.put(p + names[i], *ts[i]);
    for (size_t e = 0; e < lw.w_in.size(); ++e) w.put(p + "w_in." + std::to_string(e), lw.w_in[e]);
    for (size_t e = 0; e < lw.w_out.size(); ++e) w.put(p + "w_out." + std::to_string(e), lw.w_out[e]);
  }
  w.put("final_norm", st->model.final_norm);
  w.put("input", st->input);
  w.put("target", st->target);
  const int64_t steps = c.warmup + c.repeats;
  for (int64_t s = 0; s < steps; ++s) {
    route_step(st->rank, c, s);
    for (size_t l = 0; l < st->rank.layers.size(); ++l)
      w.put("routing." + std::to_string(s) + "." + std::to_string(l), st->rank.layers[l].own_experts);
  }
  w.bin.close();
  if (!w.bin) return refuse("writing " + dir + "/state.bin failed: " + std::strerror(errno));
  json out = {
      {"config", config_to_json(c)}, {"point", points[size_t(point)].id}, {"steps", steps}, {"tensors", w.table}};
  std::ofstream js(dir + "/state.json", std::ios::trunc);
  js << out.dump(1) << "\n";
  js.close();
  if (!js) return refuse("writing " + dir + "/state.json failed: " + std::strerror(errno));
  std::cout << dir << "/state.json: point " << points[size_t(point)].id << ", " << w.table.size() << " tensors, "
            << w.offset << " bytes\n";
  return 0;
}

}  // namespace

Command export_command() {
  return {"export",
          "FILE.yaml",
          "a point's weights, data and routing for eager PyTorch",
          R"(Writes what a training step of sweep point N (0-based, default 0) starts from: every parameter,
the input and target, and the routing of each of the warmup + repeats steps, as DIR/state.bin
(raw little-endian tensors) and DIR/state.json (the resolved configuration and a table of tensor
names, dtypes, shapes and byte offsets). tests/pytorch_reference.py reads it; scripts/compare-pytorch
puts the two side by side. One process only: parallel.ep must be 1, device cpu, routing fixed.
)",
          {{"--out", "DIR", "where state.bin and state.json go (required)"},
           {"--point", "N", "the sweep point (default 0)", 1, true, 0, int64_t(kMaxSweepPoints)}},
          1,
          1,
          [](const Args& a) {
            if (!a.has("--out")) throw UsageError("export needs --out DIR");
            return export_experiment(a.operands[0], a.text("--out"), a.integer("--point", 0));
          }};
}

}  // namespace memfine::cli

// The config and the record agree: every shipped experiment's points load back from their
// records' config to the same config (YAML -> config -> record -> config), every key included;
// and the strategy label, the results' key and the figures' key, is pinned.
#include <gtest/gtest.h>

#include "scratch.h"

#include <filesystem>
#include <fstream>

#include "core/config/config.h"
#include "core/project/config.h"
#include "core/record/record.h"
#include "core/record/table.h"
#include "core/run/resume.h"
#include "core/run/validate.h"
#include "core/strategy/params.h"
#include "core/strategy/registry.h"
#include "core/util/format.h"

#include <sstream>

namespace fs = std::filesystem;
using namespace memfine;

TEST(Config, RecordConfigLoadsBackToTheSameConfig) {
  const fs::path experiments = fs::path(MEMFINE_TESTS_DIR) / ".." / "experiments";
  int files = 0, points = 0;
  for (const auto& entry : fs::directory_iterator(experiments)) {
    // Experiments only: a project file (memfine project's) is no experiment and has no record.
    if (entry.path().extension() != ".yaml" || is_project_file(entry.path().string())) continue;
    ++files;
    std::vector<std::string> errors;
    const auto loaded = load_and_validate(entry.path().string(), errors, /*runnable_here=*/false);
    ASSERT_TRUE(errors.empty()) << errors.front();
    for (const auto& pt : loaded) {
      ++points;
      const nlohmann::json first = config_to_json(pt.config);
      // JSON is YAML: the record's config is an experiment file of its own.
      const std::string path =
          memfine::test_util::scratch_root() + "/roundtrip_" + entry.path().stem().string() + ".yaml";
      std::ofstream(path) << first.dump(2);
      std::vector<std::string> again_errors;
      const auto again = load_and_validate(path, again_errors, false);
      ASSERT_TRUE(again_errors.empty()) << entry.path() << " point " << pt.id << ": " << again_errors.front();
      ASSERT_EQ(again.size(), 1u);
      EXPECT_EQ(config_to_json(again[0].config), first) << entry.path() << " point " << pt.id;
      // Every key the parser knows is in the record: a key it read but the record lacks would
      // show up here as a line without a counterpart.
      for (const auto& [key, line] : pt.config.lines) {
        if (key.rfind("strategies", 0) == 0 || key == "sweep") continue;
        nlohmann::json at = first;
        std::string rest = key;
        bool found = true;
        while (!rest.empty()) {
          const std::string part = rest.substr(0, rest.find('.'));
          rest = rest.find('.') == std::string::npos ? "" : rest.substr(rest.find('.') + 1);
          if (!at.is_object() || !at.contains(part)) {
            found = false;
            break;
          }
          at = at[part];
        }
        EXPECT_TRUE(found) << entry.path() << ": '" << key << "' (line " << line << ") is read but not recorded";
      }
    }
  }
  EXPECT_GT(files, 10);
  EXPECT_GT(points, files);
}

// The label is the results' key (resume) and the figures' key, made from the strategy's declared
// parameters: one label however the YAML writes them (block or flow lists, 1 or 1.0, a default
// written out or left out). Parameters in name order; defaults left out, except the ones a table
// needs to tell rows apart (memfine's chunks, capacity's factor and policy). Changing it orphans
// committed results: records written before it resolve through canonical_label.
TEST(Config, StrategyLabelIsOneWhateverTheYamlStyle) {
  auto label_of = [](const std::string& item) {
    const YAML::Node n = YAML::Load(item);
    StrategySpec s;
    for (const auto& kv : n) {
      if (kv.first.as<std::string>() == "name")
        s.name = kv.second.as<std::string>();
      else
        s.written[kv.first.as<std::string>()] = kv.second;
    }
    std::vector<ParamProblem> problems;
    const StrategySpec r = resolve_strategy(s, problems);
    EXPECT_TRUE(problems.empty()) << item << ": " << (problems.empty() ? "" : problems[0].message);
    return r.label();
  };
  EXPECT_EQ(label_of("{name: full_recompute}"), "full_recompute");
  for (const char* mact : {"{name: memfine, chunks: auto}", "{name: memfine, chunks: auto, bins: [1, 2, 4, 8]}",
                           "name: memfine\nchunks: auto\nbins:\n  - 1\n  - 2\n  - 4\n  - 8\n",
                           "{name: memfine, chunks: \"auto\", headroom: 0.050}"})
    EXPECT_EQ(label_of(mact), "memfine(chunks=auto)") << mact;
  EXPECT_EQ(label_of("name: memfine\nchunks: auto\nbins:\n  - 1\n  - 2\n"), "memfine(bins=[1,2],chunks=auto)");
  for (const char* one : {"{name: memfine}", "{name: memfine, chunks: 1}"})
    EXPECT_EQ(label_of(one), "memfine(chunks=1)");
  for (const char* cap : {"{name: capacity}", "{name: capacity, capacity_factor: 1}",
                          "{name: capacity, capacity_factor: 1.0, drop_policy: probs}"})
    EXPECT_EQ(label_of(cap), "capacity(capacity_factor=1.0,drop_policy=probs)") << cap;
  EXPECT_EQ(label_of("{drop_policy: position, name: capacity, capacity_factor: 1.25, pad: false}"),
            "capacity(capacity_factor=1.25,drop_policy=position)");
  EXPECT_EQ(label_of("{name: memfine, chunks: auto, store_when_fits: true}"),
            "memfine(chunks=auto,store_when_fits=true)");
  EXPECT_EQ(label_of("name: memfine\nchunks:\n  - 0\n  - 2\n"), "memfine(chunks=[0,2])");
  // Numbers as Python's repr writes them: no exponent between 1e-4 and 1e16.
  EXPECT_EQ(label_of("{name: offload, h2d_gbps: 400, d2h_gbps: 1e5, modules: [core_attn]}"),
            "offload(d2h_gbps=100000.0,h2d_gbps=400.0,modules=[core_attn])");
  EXPECT_EQ(label_of("{name: capacity, capacity_factor: 1e-6}"), "capacity(capacity_factor=1e-06,drop_policy=probs)");
  // Records written before labels were canonical read as today's.
  EXPECT_EQ(canonical_label(json{{"strategy", "memfine(bins=[1, 2, 4, 8],chunks=auto)"}}), "memfine(chunks=auto)");
  EXPECT_EQ(canonical_label(json{{"strategy", "capacity(capacity_factor=1.0)"}}),
            "capacity(capacity_factor=1.0,drop_policy=probs)");
  EXPECT_EQ(canonical_label(json{{"strategy", "memfine(chunks=auto,store_when_fits=true)"}}),
            "memfine(chunks=auto,store_when_fits=true)");
  // A record's own name and parameters decide where it has them.
  EXPECT_EQ(canonical_label(json{
                {"strategy", "whatever"}, {"name", "memfine"}, {"params", {{"chunks", 4}, {"bins", {1, 2, 4, 8}}}}}),
            "memfine(chunks=4)");
}

// A strategy's parameters are read once, typed: every declared value lands in its field (a
// nested part's, an enum's by name, one that sets several), and only from a resolved spec.
TEST(Params, ParseFillsTypedFieldsFromAResolvedSpec) {
  struct Part {
    int64_t n = 1;
    bool on = false;
  };
  struct P {
    Part part;
    double x = 0;
    std::string mode;
    StoredAs as = StoredAs::Plain;
  };
  const ParamsOf<P> params{
      nest(&P::part, bind(&Part::n, int_param("n", "a count", 3, 1, 10))),
      nest(&P::part, bind(&Part::on, bool_param("on", "a switch", false))),
      bind(&P::x, number_param("x", "a number", 0.5, 0, 1)),
      bind<P>(choice_param("mode", "one that sets two fields", "a", {"a", "b"}),
              [](const json& v, P& p) { p.mode = v.get<std::string>(), p.part.on = p.part.on || v == "b"; }),
      bind(&P::as, enum_param("as", "an enum, two of its names", StoredAs::Plain, {StoredAs::Plain, StoredAs::Bf16}))};
  StrategySpec spec;
  spec.name = "t";
  spec.written["n"] = YAML::Load("7");
  spec.written["mode"] = YAML::Load("b");
  spec.written["as"] = YAML::Load("bf16");
  EXPECT_THROW(params.parse(spec), std::logic_error);
  std::vector<ParamProblem> problems;
  const P p = params.parse(resolve_params(spec, params.params(), problems));
  ASSERT_TRUE(problems.empty());
  EXPECT_EQ(p.part.n, 7);
  EXPECT_TRUE(p.part.on);
  EXPECT_EQ(p.x, 0.5);
  EXPECT_EQ(p.mode, "b");
  EXPECT_EQ(p.as, StoredAs::Bf16);
  spec.written["n"] = YAML::Load("11");
  spec.written["as"] = YAML::Load("fp8_e4m3");
  resolve_params(spec, params.params(), problems);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].key, "n");
  EXPECT_EQ(problems[1].key, "as");
}

// The run table tells the truth at a glance: capacity's dropped share beside dropless strategies,
// ratios against the baseline where it ran out of memory (its peak at the nearest budget where it
// fit, marked), the chunk choice of MACT and of a fixed count that ran out of memory, and rows a
// --resume brought from earlier marked with their machine and commit.
TEST(Record, SummaryTableShowsDroppedChunksAndWhereRatiosComeFrom) {
  auto rec = [](const std::string& point, const std::string& strategy, const std::string& status, double act, double ms,
                nlohmann::json extra = nlohmann::json::object()) {
    nlohmann::json r = {
        {"experiment", "x"},
        {"point", point},
        {"strategy", strategy},
        {"status", status},
        {"role", strategy == "full_recompute" ? nlohmann::json("baseline") : nlohmann::json(nullptr)},
        {"tokens_received", 100},
        {"static_bytes", 1 << 20},
        {"peak_activation_bytes", status == "ok" ? nlohmann::json(act) : nlohmann::json(nullptr)},
        {"step_ms",
         status == "ok" ? nlohmann::json({{"median", ms}, {"min", ms}, {"max", ms}}) : nlohmann::json(nullptr)},
        {"budget_bytes", point == "memory.budget=100MiB" ? nlohmann::json(100 << 20) : nlohmann::json(200 << 20)},
        {"env", {{"device_name", "Old CPU"}, {"git_commit", "abc123"}, {"date", "2026-01-01"}}}};
    for (const auto& [k, v] : extra.items()) r[k] = v;
    return r;
  };
  const std::vector<nlohmann::json> records = {
      rec("memory.budget=200MiB", "full_recompute", "ok", 100, 10),
      rec("memory.budget=100MiB", "full_recompute", "oom", 0, 0),
      rec("memory.budget=100MiB", "memfine(chunks=auto)", "ok", 50, 11,
          {{"chunks", nlohmann::json::array({{1, 8}, {2, 4}})}}),
      rec("memory.budget=100MiB", "memfine(chunks=8)", "oom", 0, 0, {{"chunks", 8}}),
      rec("memory.budget=100MiB", "capacity", "ok", 40, 5, {{"dropped_fraction", 0.54}}),
  };
  const std::string t = summary_table(records, 1);
  auto row = [&](const std::string& strategy, const std::string& point) {
    std::istringstream in(t);
    for (std::string l; std::getline(in, l);)
      if (l.find(" " + strategy + " ") != std::string::npos && l.rfind(point, 0) == 0) return l;
    return std::string();
  };
  EXPECT_NE(row("capacity", "memory.budget=100MiB").find("54.0%"), std::string::npos) << t;
  EXPECT_NE(row("memfine(chunks=auto)", "memory.budget=100MiB").find(" 1-8 "), std::string::npos) << t;
  EXPECT_NE(row("memfine(chunks=auto)", "memory.budget=100MiB").find("0.500*"), std::string::npos) << t;
  EXPECT_NE(row("memfine(chunks=8)", "memory.budget=100MiB").find(" 8 "), std::string::npos) << t;
  EXPECT_NE(t.find("nearest budget where it fit"), std::string::npos);
  EXPECT_NE(row("full_recompute", "memory.budget=200MiB^").size(), 0u) << t;  // from before the resume
  EXPECT_NE(t.find("Old CPU, commit abc123"), std::string::npos) << t;
  // Every row's columns line up, however long a label.
  std::istringstream in(t);
  std::string header, rule;
  std::getline(in, header), std::getline(in, header), std::getline(in, rule);
  for (std::string l; std::getline(in, l) && l.find("----") == std::string::npos && !l.empty() && l[0] != '*' &&
                      l[0] != '^' && l.rfind("dropped", 0) != 0;)
    EXPECT_EQ(l.size(), header.size()) << l;
}

// A message shows a file's bytes, never obeys them: a NUL does not end it, a cut never splits a
// character, bytes that are not UTF-8 are written out.
TEST(Messages, ShowAFilesBytesWithoutObeyingThem) {
  EXPECT_EQ(memfine::printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(memfine::printable("x\xff"), "x\\xff");
  EXPECT_EQ(memfine::printable(std::string(79, 'a') + "\xc3\xa9"), std::string(79, 'a') + "...");
  EXPECT_EQ(memfine::printable("caf\xc3\xa9"), "caf\xc3\xa9");
  // A folder given where a file is read says so with its name (yaml-cpp would not).
  const std::string dir = memfine::test_util::scratch_root();
  EXPECT_EQ(memfine::yaml_file_problem(dir), dir + ": not a regular file (a folder)");
  try {
    memfine::read_project(dir, dir);
    ADD_FAILURE() << "a folder was read as a project";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file (a folder)"), std::string::npos) << e.what();
  }
}

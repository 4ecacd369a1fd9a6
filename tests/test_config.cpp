// The config and the record agree: every shipped experiment's points load back from their
// records' config to the same config (YAML -> config -> record -> config), every key included;
// and the strategy label, the results' key and the figures' key, is pinned.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/config/config.h"
#include "core/run/validate.h"

namespace fs = std::filesystem;
using namespace memfine;

TEST(Config, RecordConfigLoadsBackToTheSameConfig) {
  const fs::path experiments = fs::path(MEMFINE_TESTS_DIR) / ".." / "experiments";
  int files = 0, points = 0;
  for (const auto& entry : fs::directory_iterator(experiments)) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    std::vector<std::string> errors;
    const auto loaded = load_and_validate(entry.path().string(), errors, /*runnable_here=*/false);
    ASSERT_TRUE(errors.empty()) << errors.front();
    for (const auto& pt : loaded) {
      ++points;
      const nlohmann::json first = config_to_json(pt.config);
      // JSON is YAML: the record's config is an experiment file of its own.
      const std::string path = ::testing::TempDir() + "/roundtrip_" + entry.path().stem().string() + ".yaml";
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

// The label is the results' key (resume) and the figures' key: changing its format orphans every
// committed result. Parameters in name order, values as YAML flow.
TEST(Config, StrategyLabelFormatIsPinned) {
  StrategySpec plain{"full_recompute", {}};
  EXPECT_EQ(plain.label(), "full_recompute");
  StrategySpec mact{"memfine", {{"chunks", YAML::Load("auto")}, {"bins", YAML::Load("[1, 2, 4, 8]")}}};
  EXPECT_EQ(mact.label(), "memfine(bins=[1, 2, 4, 8],chunks=auto)");
  StrategySpec cap{"capacity", {{"drop_policy", YAML::Load("probs")}, {"capacity_factor", YAML::Load("1.25")}}};
  EXPECT_EQ(cap.label(), "capacity(capacity_factor=1.25,drop_policy=probs)");
  StrategySpec flags{"memfine", {{"chunks", YAML::Load("auto")}, {"store_when_fits", YAML::Load("true")}}};
  EXPECT_EQ(flags.label(), "memfine(chunks=auto,store_when_fits=true)");
}

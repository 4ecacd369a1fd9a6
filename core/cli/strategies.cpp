// `memfine strategies`: the registry as text, a Markdown table (experiments/README.md's strategy
// reference) or JSON.
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/cli/commands.h"
#include "core/strategy/registry.h"

namespace memfine::cli {

namespace {

int list_strategies(const std::string& as) {
  if (as == "markdown") {
    std::cout << "| strategy | parameter | type | default | meaning |\n|---|---|---|---|---|\n";
    for (const auto& [name, info] : strategy_registry()) {
      std::cout << "| `" << name << "` | | | | " << info.description << " |\n";
      for (const auto& p : info.params)
        std::cout << "| | `" << p.name << "` | " << p.type << " | " << label_value(p.fallback)
                  << (p.named ? " (always in the label)" : "") << " | " << p.help << " |\n";
    }
  } else if (as == "json") {
    nlohmann::json all = nlohmann::json::object();
    for (const auto& [name, info] : strategy_registry()) {
      nlohmann::json params = nlohmann::json::object();
      for (const auto& p : info.params)
        params[p.name] = {{"help", p.help}, {"type", p.type}, {"default", p.fallback}, {"named", p.named}};
      const Role role = info.role;
      all[name] = {{"description", info.description},
                   {"params", params},
                   {"role", role == Role::Reference  ? "reference"
                            : role == Role::Baseline ? "baseline"
                                                     : ""}};
    }
    std::cout << all.dump(2) << "\n";
  } else {
    for (const auto& [name, info] : strategy_registry()) {
      std::cout << name << "\n    " << info.description << "\n";
      for (const auto& p : info.params)
        std::cout << "    " << p.name << ": " << p.help << " (" << p.type << "; default " << label_value(p.fallback)
                  << ")\n";
    }
  }
  return 0;
}

}  // namespace

Command strategies_command() {
  return {"strategies",
          "",
          "the registered strategies and their parameters",
          R"(Lists the registered strategies, each with a one-line description and its parameters (type and
default).
)",
          {{"--json", "", "the same as one JSON object (name -> description, role, params)"},
           {"--markdown", "", "a table (experiments/README.md's strategy reference is this output)"}},
          0,
          0,
          [](const Args& a) {
            return list_strategies(a.has("--markdown") ? "markdown" : a.has("--json") ? "json" : "text");
          }};
}

}  // namespace memfine::cli

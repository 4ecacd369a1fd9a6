// What `memfine project` prints: the ranked table for a person (the suite's one table renderer,
// core/record/table.h) with the rejected layouts counted by reason and each part's assumptions,
// and one JSON line per estimate for programs.
#pragma once
#include <map>
#include <string>

#include "core/project/project.h"
#include "core/project/published.h"
#include "core/util/field_spec.h"

namespace memfine {

// Every field of `memfine project --json`'s lines, declared once (`memfine schema` lists them with
// the records'; the plots read the same declaration). The writer refuses a field it does not declare.
const std::vector<FieldSpec>& projection_schema();

std::string project_table(const ProjectConfig& c, const ProjectResult& r, bool wide = false);
// `published`'s figures ride with their strategy's lines; `stamp`'s keys (the commit and date the
// projection was made at) are added to each line.
std::string project_json(const ProjectConfig& c, const ProjectResult& r, const Published& published = {},
                         const std::map<std::string, std::string>& stamp = {});

}  // namespace memfine

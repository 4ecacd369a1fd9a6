// `memfine project`'s body, which `memfine predict` of a project file runs too.
#pragma once
#include "core/cli/command.h"

namespace memfine::cli {

int project_file(const Args& a);

}  // namespace memfine::cli

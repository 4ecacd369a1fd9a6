// A line on stderr in one write: ranks of one job share the launcher's pipe, and a message written
// piece by piece interleaves with the other ranks' at any character.
#pragma once
#include <string>

namespace memfine {

// Writes `line` and a newline to stderr with one write(2) (atomic on a pipe up to PIPE_BUF bytes).
void say(const std::string& line);

}  // namespace memfine

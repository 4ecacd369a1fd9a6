// `memfine export`: writes what a step of one point starts from (weights, input, target, and the
// routing of every step) so that a model written elsewhere (tests/pytorch_reference.py, eager
// PyTorch) computes exactly what this code computes. One process, one expert-parallel rank: the
// reference has no emulated peers.
#pragma once
#include <string>

namespace memfine {

// Writes DIR/state.json (the resolved configuration and a table of tensors: name, dtype, shape,
// byte offset) and DIR/state.bin (the tensors' bytes, little-endian, contiguous). `point` picks
// the sweep point (0-based). Returns the process exit code (0 ok, 2 bad input).
int export_experiment(const std::string& yaml, const std::string& dir, int64_t point);

}  // namespace memfine

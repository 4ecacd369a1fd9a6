// 8-bit (and bfloat16) storage of saved activations (COAT, arXiv 2410.19313; FP8-Flow-MoE, arXiv
// 2511.02302): a floating tensor kept as codes of a narrower format with a scale, decoded for its
// backward. LibTorch 1.13 has no 8-bit float type, so the FP8 formats are encoded by hand into
// uint8 with their definitions' rounding (OCP 8-bit floating point, E4M3 "fn": bias 7, no infinity,
// largest 448; E5M2: bias 15, largest finite 57344): round to nearest, ties to even, saturating at
// the largest finite value, subnormals kept. bfloat16 is ATen's own conversion (also ties to even).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

#include "core/moe/shape.h"

namespace memfine {

struct Encoded {
  at::Tensor codes;   // uint8 (FP8) or bfloat16, the tensor's elements in order
  at::Tensor scales;  // float32, one per block (FP8); undefined for bfloat16
  int64_t block = 0;  // elements per scale
};

// Bytes a code takes: 1 for the FP8 formats, 2 for bfloat16.
int64_t code_bytes(StoredAs f);
// The largest finite value of an FP8 format.
double fp8_max(StoredAs f);
// Every one of the 256 codes' values (float32, NaN where the code is one), from the format's
// definition: sign, exponent field and mantissa field.
at::Tensor fp8_values(StoredAs f);

// `flat`: a 1-D floating tensor. FP8: each block of `block` elements (0: the whole tensor) scaled so
// that its largest magnitude is the format's largest value, then rounded; bfloat16: converted.
Encoded encode(const at::Tensor& flat, StoredAs f, int64_t block);
// The values back, in `dtype`, on the codes' device.
at::Tensor decode(const Encoded& e, StoredAs f, at::ScalarType dtype);

// The same through ATen's ops, as on a device (a CPU tensor takes a loop above): tests hold the two
// to the same codes.
Encoded encode_ops(const at::Tensor& flat, StoredAs f, int64_t block);
at::Tensor decode_ops(const Encoded& e, StoredAs f, at::ScalarType dtype);

}  // namespace memfine

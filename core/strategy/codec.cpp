#include "core/strategy/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

namespace memfine {

namespace {

// An FP8 format's fields.
struct Fp8 {
  int mantissa_bits, bias;
  bool has_infinity;  // E5M2: the all-ones exponent is infinity and NaN; E4M3fn: only S.1111.111 is NaN
};

Fp8 fields(StoredAs f) {
  if (f == StoredAs::Fp8E4m3) return {3, 7, false};
  if (f == StoredAs::Fp8E5m2) return {2, 15, true};
  throw std::logic_error("codec: not an FP8 format");
}

// Elements encoded or decoded at a time: the temporaries of a piece stay small beside the tensor.
constexpr int64_t kPiece = int64_t(1) << 12;

// `a` (float32, >= 0, at most the format's largest) rounded to the format, as its 7-bit magnitude
// code. frexp gives each value's binade exactly; dividing by a power of two is exact, and at::round
// rounds half to even.
at::Tensor magnitude_codes(const at::Tensor& a, const Fp8& f) {
  const int64_t emin = 1 - f.bias;  // the smallest normal exponent; subnormals share its quantum
  auto binade = [&](const at::Tensor& v) { return std::get<1>(at::frexp(v)).sub(1).clamp_min(emin); };
  const at::Tensor one = at::ones({}, a.options());
  const at::Tensor quantum = at::ldexp(one, binade(a).sub(f.mantissa_bits));
  const at::Tensor r = at::round(a.div(quantum)).mul_(quantum);  // may round up into the next binade
  const at::Tensor e = binade(r);
  const at::Tensor subnormal = r.lt(std::ldexp(1.0, int(emin)));
  const at::Tensor exp_field = at::where(subnormal, at::zeros_like(e), e.add(f.bias));
  const at::Tensor scaled = r.div(at::ldexp(one, e.sub(f.mantissa_bits)));  // the significand, an integer
  const at::Tensor mantissa = at::where(subnormal, scaled, scaled.sub(double(1 << f.mantissa_bits)));
  return exp_field.to(at::kInt).bitwise_left_shift(f.mantissa_bits).bitwise_or(mantissa.to(at::kInt));
}

}  // namespace

int64_t code_bytes(StoredAs f) { return f == StoredAs::Bf16 ? 2 : 1; }

double fp8_max(StoredAs f) { return f == StoredAs::Fp8E4m3 ? 448.0 : 57344.0; }

namespace {

// The 256 codes' values of a format, from its definition; made once per format, outside ATen's
// allocator (a decode inside a measured step allocates nothing for it).
std::vector<float> values_of(StoredAs f) {
  const Fp8 fp = fields(f);
  const int exp_bits = 7 - fp.mantissa_bits, exp_ones = (1 << exp_bits) - 1, man_ones = (1 << fp.mantissa_bits) - 1;
  std::vector<float> v(256);
  for (int code = 0; code < 256; ++code) {
    const int sign = code >> 7, e = (code >> fp.mantissa_bits) & exp_ones, m = code & man_ones;
    double x;
    if (fp.has_infinity && e == exp_ones)
      x = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    else if (!fp.has_infinity && e == exp_ones && m == man_ones)
      x = std::numeric_limits<double>::quiet_NaN();
    else if (e == 0)
      x = std::ldexp(double(m), 1 - fp.bias - fp.mantissa_bits);
    else
      x = std::ldexp(double(m + (1 << fp.mantissa_bits)), e - fp.bias - fp.mantissa_bits);
    v[size_t(code)] = float(sign ? -x : x);
  }
  return v;
}

const std::vector<float>& value_table(StoredAs f) {
  static const std::vector<float> e4m3 = values_of(StoredAs::Fp8E4m3), e5m2 = values_of(StoredAs::Fp8E5m2);
  if (f == StoredAs::Fp8E5m2) return e5m2;
  if (f == StoredAs::Fp8E4m3) return e4m3;
  throw std::logic_error("codec: not an FP8 format");
}

}  // namespace

at::Tensor fp8_values(StoredAs f) { return at::tensor(value_table(f)); }

namespace {

// One piece's codes, its values divided by `scale` (broadcast over its blocks' rows).
at::Tensor piece_codes(const at::Tensor& x, const at::Tensor& scale, const Fp8& fp, double top) {
  const at::Tensor y = x.div(scale).view(-1);
  const at::Tensor mag = magnitude_codes(y.abs().clamp_max(top), fp);
  const at::Tensor code = at::where(y.lt(0), mag.bitwise_or(0x80), mag);
  return at::where(at::isnan(y), at::full_like(code, 0x7F), code);  // NaN stays NaN
}

at::Tensor scale_of(const at::Tensor& amax, double top) {
  return at::where(amax.gt(0), amax.div(top), at::ones_like(amax));
}

}  // namespace

Encoded encode_ops(const at::Tensor& flat, StoredAs f, int64_t block) {
  Encoded out;
  const int64_t n = flat.numel();
  if (f == StoredAs::Bf16) {
    out.codes = flat.to(at::kBFloat16);
    return out;
  }
  const Fp8 fp = fields(f);
  const double top = fp8_max(f);
  const bool whole = block <= 0 || block >= n;
  out.block = whole ? std::max<int64_t>(n, 1) : block;
  const int64_t blocks = (n + out.block - 1) / out.block;
  out.codes = at::empty({n}, flat.options().dtype(at::kByte));
  out.scales = at::empty({blocks}, flat.options().dtype(at::kFloat));
  if (whole) {  // one scale from the largest magnitude, found a piece at a time
    at::Tensor amax = at::zeros({}, out.scales.options());
    for (int64_t a = 0; a < n; a += kPiece)
      amax = at::maximum(amax, flat.narrow(0, a, std::min(kPiece, n - a)).abs().amax().to(at::kFloat));
    out.scales.fill_(scale_of(amax, top));
    for (int64_t a = 0; a < n; a += kPiece) {
      const int64_t len = std::min(kPiece, n - a);
      out.codes.narrow(0, a, len).copy_(piece_codes(flat.narrow(0, a, len).to(at::kFloat), out.scales, fp, top));
    }
    return out;
  }
  // Pieces of whole blocks (a block larger than a piece is a piece); the last block may be short.
  const int64_t per = std::max<int64_t>(1, kPiece / out.block) * out.block;
  for (int64_t a = 0; a < n; a += per) {
    const int64_t b = std::min(n, a + per), nb = (b - a + out.block - 1) / out.block;
    at::Tensor x = flat.narrow(0, a, b - a).to(at::kFloat);
    if ((b - a) % out.block) x = at::cat({x, at::zeros({nb * out.block - (b - a)}, x.options())});
    x = x.view({nb, out.block});
    const at::Tensor scale = scale_of(x.abs().amax(1, true), top);
    out.codes.narrow(0, a, b - a).copy_(piece_codes(x, scale, fp, top).narrow(0, 0, b - a));
    out.scales.narrow(0, a / out.block, nb).copy_(scale.view(-1));
  }
  return out;
}

at::Tensor decode_ops(const Encoded& e, StoredAs f, at::ScalarType dtype) {
  if (f == StoredAs::Bf16) return e.codes.to(dtype);
  const int64_t n = e.codes.numel();
  const at::Tensor values = fp8_values(f).to(e.codes.device());
  at::Tensor out = at::empty({n}, e.codes.options().dtype(dtype));
  for (int64_t a = 0; a < n; a += kPiece) {
    const int64_t b = std::min(n, a + kPiece), first = a / e.block, last = (b - 1) / e.block;
    // Each element's scale: its block's, repeated over the block's elements in this piece.
    std::vector<int64_t> counts;
    for (int64_t k = first; k <= last; ++k) counts.push_back(std::min(b, (k + 1) * e.block) - std::max(a, k * e.block));
    const at::Tensor s = e.scales.narrow(0, first, last - first + 1)
                             .repeat_interleave(at::tensor(counts).to(e.codes.device()), 0);
    at::Tensor v = values.index_select(0, e.codes.narrow(0, a, b - a).to(at::kLong));
    out.narrow(0, a, b - a).copy_(v.mul_(s));
  }
  return out;
}

namespace {

// One value's code (already divided by its scale), from its float32 bits: the exponent re-biased,
// the mantissa cut to the format's bits with round to nearest, ties to even (a carry moves into the
// exponent, which is the right code); below the smallest normal, the multiple of the subnormal
// quantum nearest (ties to even); saturated at the largest finite code.
struct CodeOf {
  explicit CodeOf(const Fp8& fp)
      : M(fp.mantissa_bits), drop(23 - fp.mantissa_bits), bias(fp.bias), top(fp.has_infinity ? 0x7B : 0x7E),
        smallest_normal(std::ldexp(1.0f, 1 - fp.bias)), subnormal_scale(std::ldexp(1.0f, fp.mantissa_bits - 1 + fp.bias)) {}
  uint8_t operator()(float y) const {
    uint32_t bits;
    std::memcpy(&bits, &y, sizeof bits);
    const uint32_t sign = (bits >> 24) & 0x80, abits = bits & 0x7FFFFFFF;
    if (abits > 0x7F800000) return 0x7F;  // NaN
    uint32_t code;
    if (abits < bits_of(smallest_normal)) {
      float a;
      std::memcpy(&a, &abits, sizeof a);
      code = uint32_t(std::nearbyint(a * subnormal_scale));  // exact scaling; 2^M: the smallest normal
    } else {
      const uint32_t mant = abits & 0x7FFFFF, rest = mant & ((1u << drop) - 1), half = 1u << (drop - 1);
      code = (uint32_t(int(abits >> 23) - 127 + bias) << M) | (mant >> drop);
      code += rest > half || (rest == half && (code & 1));
    }
    return uint8_t(sign | std::min(code, top));
  }
  static uint32_t bits_of(float f) {
    uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    return b;
  }
  int M, drop, bias;
  uint32_t top;
  float smallest_normal, subnormal_scale;
};

// A piece of whole blocks as float32 (a view where it already is).
at::Tensor piece_as_float(const at::Tensor& flat, int64_t a, int64_t len) {
  return flat.narrow(0, a, len).to(at::kFloat).contiguous();
}

}  // namespace

// On a CPU the codec is a loop over the values (one pass each way, as a device's fused cast is);
// elsewhere ATen's ops (encode_ops), which tests hold to the same codes.
Encoded encode(const at::Tensor& flat, StoredAs f, int64_t block) {
  if (f == StoredAs::Bf16 || !flat.is_cpu()) return encode_ops(flat, f, block);
  const Fp8 fp = fields(f);
  const float top = float(fp8_max(f));
  const int64_t n = flat.numel();
  Encoded out;
  out.block = block <= 0 || block >= n ? std::max<int64_t>(n, 1) : block;
  const int64_t blocks = (n + out.block - 1) / out.block;
  out.codes = at::empty({n}, flat.options().dtype(at::kByte));
  out.scales = at::empty({blocks}, flat.options().dtype(at::kFloat));
  uint8_t* codes = out.codes.data_ptr<uint8_t>();
  float* scales = out.scales.data_ptr<float>();
  // Pieces of whole blocks, or of kPiece values within one block larger than that.
  const int64_t per = out.block >= kPiece ? kPiece : (kPiece / out.block) * out.block;
  // Blocks within a piece, a piece within a block: each pass walks the values in order.
  auto each_block = [&](const auto& fn) {
    for (int64_t a = 0; a < n; a += per) {
      const at::Tensor x = piece_as_float(flat, a, std::min(per, n - a));
      const float* v = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel();) {
        const int64_t b = (a + i) / out.block, len = std::min(x.numel() - i, (b + 1) * out.block - (a + i));
        fn(b, v + i, a + i, len);
        i += len;
      }
    }
  };
  std::vector<float> amax(size_t(blocks), 0.0f);
  each_block([&](int64_t b, const float* v, int64_t, int64_t len) {
    float m = amax[size_t(b)];
    for (int64_t i = 0; i < len; ++i) m = std::isnan(v[i]) || std::isnan(m) ? v[i] + m : std::max(m, std::fabs(v[i]));
    amax[size_t(b)] = m;
  });
  for (int64_t b = 0; b < blocks; ++b) scales[b] = amax[size_t(b)] > 0 ? amax[size_t(b)] / top : 1.0f;
  const CodeOf code_of(fp);
  each_block([&](int64_t b, const float* v, int64_t at, int64_t len) {
    const float s = scales[b];
    for (int64_t i = 0; i < len; ++i) codes[at + i] = code_of(v[i] / s);
  });
  return out;
}

at::Tensor decode(const Encoded& e, StoredAs f, at::ScalarType dtype) {
  if (f == StoredAs::Bf16 || !e.codes.is_cpu()) return decode_ops(e, f, dtype);
  const float* t = value_table(f).data();
  const uint8_t* codes = e.codes.data_ptr<uint8_t>();
  const float* scales = e.scales.data_ptr<float>();
  const int64_t n = e.codes.numel();
  at::Tensor out = at::empty({n}, e.codes.options().dtype(dtype));
  at::Tensor piece = dtype == at::kFloat ? at::Tensor() : at::empty({std::min(n, kPiece)}, out.options().dtype(at::kFloat));
  for (int64_t a = 0; a < n; a += kPiece) {
    const int64_t len = std::min(kPiece, n - a);
    at::Tensor dst = dtype == at::kFloat ? out.narrow(0, a, len) : piece.narrow(0, 0, len);
    float* d = dst.data_ptr<float>();
    for (int64_t i = 0; i < len;) {
      const int64_t b = (a + i) / e.block, run = std::min(len - i, (b + 1) * e.block - (a + i));
      const float s = scales[b];
      for (int64_t j = i; j < i + run; ++j) d[j] = t[codes[a + j]] * s;
      i += run;
    }
    if (dtype != at::kFloat) out.narrow(0, a, len).copy_(dst);
  }
  return out;
}

}  // namespace memfine

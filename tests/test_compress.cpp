// 8-bit activation storage (core/strategy/codec.h, baselines/compress.cpp): the FP8 formats against
// their definitions, what the device keeps, and the gradient error that is the strategy's result.
// Its peak is predicted with every strategy's (test_memory_model.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "core/run/verify.h"
#include "core/strategy/codec.h"
#include "testing.h"

namespace memfine {
namespace {

using test_util::spec;

// The format's definition, written out: value = (-1)^s 2^(e - bias) (1 + m / 2^M), subnormals
// 2^(1 - bias) (m / 2^M); E4M3fn's only NaN S.1111.111, no infinity; E5M2's IEEE-like top exponent.
TEST(Codec, TheFormatsValuesAreTheirDefinitions) {
  const at::Tensor e4 = fp8_values(StoredAs::Fp8E4m3), e5 = fp8_values(StoredAs::Fp8E5m2);
  EXPECT_EQ(e4[0x38].item<float>(), 1.0f);
  EXPECT_EQ(e4[0x7E].item<float>(), 448.0f);
  EXPECT_EQ(e4[0x08].item<float>(), std::ldexp(1.0f, -6));  // the smallest normal
  EXPECT_EQ(e4[0x01].item<float>(), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(e4[0xB8].item<float>(), -1.0f);
  EXPECT_TRUE(std::isnan(e4[0x7F].item<float>()));
  EXPECT_EQ(e4[0x78].item<float>(), 256.0f);  // e = 15 is a normal exponent in E4M3fn
  EXPECT_EQ(e5[0x3C].item<float>(), 1.0f);
  EXPECT_EQ(e5[0x7B].item<float>(), 57344.0f);
  EXPECT_TRUE(std::isinf(e5[0x7C].item<float>()));
  EXPECT_TRUE(std::isnan(e5[0x7D].item<float>()));
  EXPECT_EQ(e5[0x01].item<float>(), std::ldexp(1.0f, -16));
  EXPECT_EQ(at::isnan(e4).sum().item<int64_t>(), 2);
  EXPECT_EQ(at::isnan(e5).sum().item<int64_t>(), 6);
}

// Encoding rounds to the nearest value, ties to the even code, at a scale of 1 (the largest value
// among the inputs): every finite value is its own code; a midpoint goes to the even neighbour; a
// hair either side of it, to the nearer.
TEST(Codec, RoundsToNearestTiesToEven) {
  for (StoredAs f : {StoredAs::Fp8E4m3, StoredAs::Fp8E5m2}) {
    const at::Tensor table = fp8_values(f);
    const float top = float(fp8_max(f));
    std::vector<float> in = {top};
    std::vector<int> want = {f == StoredAs::Fp8E4m3 ? 0x7E : 0x7B};
    for (int code = 0; code < 256; ++code) {
      const float v = table[code].item<float>();
      if (!std::isfinite(v) || (code == 0x80)) continue;  // -0 encodes as +0's magnitude with the sign bit
      in.push_back(v), want.push_back(code);
      if ((code & 0x7F) + 1 > 0x7F) continue;
      const float next = table[code + 1].item<float>();
      if (!std::isfinite(next) || code == 0x7F) continue;
      const float mid = (v + next) / 2;  // exact in float32
      in.push_back(mid), want.push_back((code & 1) == 0 ? code : code + 1);
      in.push_back(std::nextafter(mid, v)), want.push_back(code);
      in.push_back(std::nextafter(mid, next)), want.push_back(code + 1);
    }
    const Encoded e = encode(at::tensor(in), f, 0);
    // ATen's ops (a device's path) give the same codes as the CPU's loop.
    EXPECT_TRUE(at::equal(encode_ops(at::tensor(in), f, 0).codes, e.codes)) << int(f);
    ASSERT_EQ(e.scales.numel(), 1);
    EXPECT_EQ(e.scales.item<float>(), 1.0f);
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(e.codes[int64_t(i)].item<uint8_t>(), want[i]) << "value " << in[i] << " format " << int(f);
    const at::Tensor back = decode(e, f, at::kFloat);
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(back[int64_t(i)].item<float>(), table[want[i]].item<float>());
  }
}

// Scales per block: each block's largest magnitude becomes the format's largest, so every element
// is within half the top binade's quantum of its scale; bfloat16 is ATen's own conversion.
TEST(Codec, BlockScalesBoundTheErrorAndBfloat16IsATens) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({1000, 37}) * at::rand({1000, 1}) * 100;
  const at::Tensor flat = x.view(-1);
  const int64_t block = 16 * 37;
  const Encoded e = encode(flat, StoredAs::Fp8E4m3, block);
  EXPECT_EQ(e.scales.numel(), (flat.numel() + block - 1) / block);
  const at::Tensor back = decode(e, StoredAs::Fp8E4m3, at::kFloat);
  // E4M3's top binade [256, 448] has a quantum of 32: the error is at most 16 of the scale's units.
  const at::Tensor bound = e.scales.repeat_interleave(block).narrow(0, 0, flat.numel()) * 16;
  EXPECT_TRUE((back - flat).abs().le(bound * (1 + 1e-6)).all().item<bool>());
  EXPECT_TRUE(at::equal(decode(encode(flat, StoredAs::Bf16, 0), StoredAs::Bf16, at::kFloat),
                        flat.to(at::kBFloat16).to(at::kFloat)));
  // The device path agrees with the CPU's, per block and per tensor, both ways.
  for (StoredAs f : {StoredAs::Fp8E4m3, StoredAs::Fp8E5m2})
    for (int64_t b : {int64_t(0), block}) {
      const Encoded loop = encode(flat, f, b), ops = encode_ops(flat, f, b);
      EXPECT_TRUE(at::equal(loop.codes, ops.codes)) << int(f) << " block " << b;
      EXPECT_TRUE(at::equal(loop.scales, ops.scales)) << int(f) << " block " << b;
      EXPECT_TRUE(at::equal(decode(loop, f, at::kDouble), decode_ops(ops, f, at::kDouble))) << int(f);
    }
  // A tensor larger than the pieces it is encoded in, one scale for all.
  const Encoded whole = encode(at::randn({300000}), StoredAs::Fp8E5m2, 0);
  EXPECT_EQ(whole.scales.numel(), 1);
}

ExperimentConfig config() {
  ExperimentConfig c = test_util::tiny_config("float32", "zipf", 4);
  c.model.layers = 4, c.model.hidden = 64, c.model.ffn_hidden = 96, c.model.seq = 64;
  return c;
}

// The device keeps a quarter of what it encodes (float32 to one byte) and its peak falls below
// storing everything; the gradients differ by the format's rounding: the finer format less, bfloat16
// least, none by as little as verify's tolerance would take.
TEST(Compress, KeepsLessAndItsErrorIsItsResult) {
  const ExperimentConfig c = config();
  const int64_t plain = test_util::step_peak(c, spec("no_recompute"));
  auto st = make_train_state(c);
  std::map<std::string, double> err;
  for (const char* f : {"fp8_e4m3", "fp8_e5m2", "bf16"}) {
    const StrategySpec sp = spec("compress", {{"format", f}});
    EXPECT_TRUE(make_strategy(sp)->lossy());
    EXPECT_LT(test_util::step_peak(c, sp), plain) << f;
    auto s = make_strategy(sp);
    auto fresh = make_train_state(c);
    train_step(*fresh, *s, 0);
    const json k = s->step_counters();
    const double in = k["encoded_bytes"].get<double>(), kept = k["encoded_kept_bytes"].get<double>();
    EXPECT_GT(in, 0) << f;
    EXPECT_NEAR(kept / in, f[0] == 'b' ? 0.5 : 0.25, 0.01) << f;
    err[f] = verify_on_state(*st, sp).value();
    std::cout << f << ": gradient error " << err[f] << "\n";
  }
  EXPECT_GT(err["fp8_e4m3"], verify_tolerance("float32"));
  EXPECT_LT(err["fp8_e4m3"], err["fp8_e5m2"]);
  EXPECT_LT(err["bf16"], err["fp8_e4m3"]);
  EXPECT_LT(err["fp8_e5m2"], 0.5) << "still the same model, roughly";
}

// Compress what is offloaded (offload's `format`): the host holds the codes, a quarter of float32's
// bytes, to the byte as the model says; everything that left comes back; the device peak as predicted.
TEST(Compress, WhatIsOffloadedGoesAsCodes) {
  const ExperimentConfig c = config();
  const EmulatedRank rank = make_emulated_rank(c, -1);
  const char* all = "[attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, expert_fc2]";
  auto counters = [&](const StrategySpec& sp) {
    auto st = make_train_state(c);
    auto s = make_strategy(sp);
    train_step(*st, *s, 0);
    return s->step_counters();
  };
  const StrategySpec plain = spec("offload", {{"modules", all}}),
                     coded = spec("offload", {{"modules", all}, {"format", "fp8_e4m3"}});
  const json kp = counters(plain), kc = counters(coded);
  const Prediction p = make_strategy(coded)->predict(c, rank);
  EXPECT_EQ(kc["offload_host_peak_bytes"].get<int64_t>(), p.host_bytes);
  EXPECT_NEAR(kc["offload_to_host_bytes"].get<double>() / kp["offload_to_host_bytes"].get<double>(), 0.25, 0.02);
  EXPECT_EQ(kc["offload_to_device_bytes"], kc["offload_to_host_bytes"]);
  EXPECT_GT(kc["encoded_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(make_strategy(coded)->lossy());
  EXPECT_FALSE(make_strategy(plain)->lossy());
  const int64_t measured = test_util::step_peak(c, coded);
  EXPECT_LT(std::abs(double(p.activation_bytes - measured)), 0.05 * double(measured))
      << "predicted " << p.activation_bytes << ", measured " << measured << " (" << p.phase << ")";
}

}  // namespace
}  // namespace memfine

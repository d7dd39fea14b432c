#include <catch2/catch.hpp>

#include "planner/memory.hpp"
#include "tests/planner/support.hpp"

using namespace ep;

namespace {

ModelSpec vit_b16(Precision p = Precision::FP32) { return build_model_spec(test::vit_b16(), p); }

TrainingConfig training(Optimizer o, double momentum, Checkpointing c) {
  TrainingConfig t;
  t.optimizer = o;
  t.momentum = momentum;
  t.checkpointing = c;
  return t;
}

double saved(const ModelSpec& spec, SublayerRange r) {
  double sum = 0;
  for (int i = r.first; i < r.last; ++i) sum += spec.sublayers[i].saved_activation_bytes_per_sample;
  return sum;
}

}  // namespace

TEST_CASE("parameter memory: weights always, gradients and state for active only", "[memory]") {
  const ModelSpec spec = vit_b16();
  const SublayerRange frozen = ModelSpec::frozen_prefix(2);
  const SublayerRange active{frozen.last, frozen.last + 4};
  const double Pa = spec.params(active), Pf = spec.params(frozen);
  const StageLoad stage{active, frozen, 8, 4};

  const auto sgd = stage_memory(spec, training(Optimizer::SGD, 0.9, Checkpointing::Never), stage);
  CHECK(sgd.weights_bytes == 4 * (Pa + Pf));
  CHECK(sgd.gradients_bytes == 4 * Pa);
  CHECK(sgd.optimizer_bytes == 4 * Pa);
  CHECK(stage_memory(spec, training(Optimizer::SGD, 0, Checkpointing::Never), stage)
            .optimizer_bytes == 0);
  CHECK(stage_memory(spec, training(Optimizer::Adam, 0, Checkpointing::Never), stage)
            .optimizer_bytes == 8 * Pa);
  CHECK(stage_memory(spec, training(Optimizer::AdamW, 0, Checkpointing::Never), stage)
            .optimizer_bytes == 8 * Pa);
  CHECK(sgd.total_bytes() == sgd.weights_bytes + sgd.gradients_bytes + sgd.optimizer_bytes +
                                 sgd.activations_bytes);
}

TEST_CASE("activation memory per checkpointing mode", "[memory]") {
  const ModelSpec spec = vit_b16();
  const SublayerRange active{5, 11};
  const int mbs = 8, M = 4;
  const double A = saved(spec, active) * mbs;
  const double X = spec.sublayers[4].out_activation_bytes_per_sample * mbs;
  const StageLoad stage{active, {}, mbs, M};
  auto activations = [&](Checkpointing c) {
    return stage_memory(spec, training(Optimizer::SGD, 0.9, c), stage).activations_bytes;
  };
  CHECK(activations(Checkpointing::Never) == Approx(M * A));
  CHECK(activations(Checkpointing::Always) == Approx(M * X + A));
  CHECK(activations(Checkpointing::ExceptLast) == Approx((M - 1) * X + 2 * A));
  CHECK(activations(Checkpointing::Always) < activations(Checkpointing::ExceptLast));
  CHECK(activations(Checkpointing::ExceptLast) < activations(Checkpointing::Never));

  const StageLoad single{active, {}, mbs, 1};
  CHECK(stage_memory(spec, training(Optimizer::SGD, 0.9, Checkpointing::ExceptLast), single)
            .activations_bytes == Approx(A));
}

TEST_CASE("the first stage's input is the loader's sample", "[memory]") {
  const ModelSpec spec = vit_b16();
  const StageLoad stage{{0, 3}, {}, 2, 3};
  const auto m = stage_memory(spec, training(Optimizer::SGD, 0.9, Checkpointing::Always), stage);
  CHECK(m.activations_bytes ==
        Approx(3 * 2 * spec.input_bytes_per_sample + saved(spec, {0, 3}) * 2));
}

TEST_CASE("frozen sublayers: weights and one micro-batch's transient", "[memory]") {
  const ModelSpec spec = vit_b16();
  const SublayerRange frozen = ModelSpec::frozen_prefix(12);
  const auto m = stage_memory(spec, training(Optimizer::Adam, 0, Checkpointing::Never),
                              StageLoad{{}, frozen, 16, 6});
  CHECK(m.weights_bytes == 4 * spec.params(frozen));
  CHECK(m.gradients_bytes == 0);
  CHECK(m.optimizer_bytes == 0);
  // Largest working set among frozen sublayers: an attention's (the a·s² scores).
  CHECK(m.activations_bytes == spec.sublayers[1].saved_activation_bytes_per_sample * 16);
  CHECK(spec.sublayers[1].saved_activation_bytes_per_sample >
        spec.sublayers[2].saved_activation_bytes_per_sample);
}

TEST_CASE("BF16 halves activation memory only", "[memory]") {
  const StageLoad stage{{1, 9}, {0, 1}, 4, 8};
  const TrainingConfig t = training(Optimizer::SGD, 0.9, Checkpointing::Never);
  const auto fp32 = stage_memory(vit_b16(Precision::FP32), t, stage);
  const auto bf16 = stage_memory(vit_b16(Precision::BF16), t, stage);
  CHECK(bf16.activations_bytes == Approx(fp32.activations_bytes / 2));
  CHECK(bf16.weights_bytes == fp32.weights_bytes);
}

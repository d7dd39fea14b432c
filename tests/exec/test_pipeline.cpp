// The stage runtime against one device: every schedule, stage count and
// micro-batch count gives the loss and gradients of the whole model run at
// once, before and after a transition that freezes layers and repacks; and
// model work handed to a worker between iterations.
#include "tests/exec/pch.hpp"

#include <unistd.h>

#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "exec/cache.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "exec/torch_compat.hpp"
#include "planner/autopipe.hpp"
#include "tests/exec/support.hpp"

namespace {

using namespace ep;
using namespace ep::exec;
using testing::sgd;
using testing::split;
using testing::tiny;

at::Tensor inputs(const ModelConfig& m, int B, int seed) {
  at::manual_seed(seed);
  if (m.family == ModelFamily::ViT) return at::randn({B, m.num_channels, m.image_size, m.image_size});
  return at::randint(1, m.vocab_size, {B, m.seq_length}, at::kLong);
}

// bounds[0] = frozen_end: F_frozen on the first device (AutoPipe's layout).
Partition random_partition(int sublayers, int frozen_layers, int stages, std::mt19937& rng) {
  Partition p;
  p.frozen_layers = frozen_layers;
  p.frozen_end = ModelSpec::frozen_prefix(frozen_layers).last;
  std::vector<int> cuts;
  for (int i = p.frozen_end + 1; i < sublayers; ++i) cuts.push_back(i);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(stages - 1);
  std::sort(cuts.begin(), cuts.end());
  p.bounds.push_back(p.frozen_end);
  p.bounds.insert(p.bounds.end(), cuts.begin(), cuts.end());
  p.bounds.push_back(sublayers);
  return p;
}

Schedule schedule_for(ScheduleKind kind, int K, int M, int v, const Partition& p, bool step,
                      FrozenInput frozen_input = FrozenInput::Forward) {
  ScheduleOptions o;
  o.kind = kind;
  o.K = K;
  o.M = M;
  o.v = v;
  o.optimizer_step = step;
  if (p.bounds.front() > 0) o.frozen_input = frozen_input;
  Schedule s = build_schedule(o);
  check_schedule(s);
  return s;
}

std::vector<at::Device> cpus(int K) { return std::vector<at::Device>(K, at::Device(at::kCPU)); }

// One trained model and its optimizer, run through a pipeline.
struct Run {
  Model model;
  exec::Optimizer optimizer;
  Pipeline pipeline;
  Checkpointing ckpt;
  Run(const ModelConfig& m, int workers, Checkpointing c = Checkpointing::Never, const TrainingConfig& t = sgd(),
      const Dropout& dropout = {})
      : model(m, 7, dropout), optimizer(t), pipeline(model, optimizer, {cpus(workers), false}), ckpt(c) {}
  // `s` as a program with this run's recomputation.
  IterationResult run(Schedule s, std::span<const MicroBatch> mbs, double real, double lr, int cache_valid_layers = -1,
                      bool cache_writes_behind = false) {
    IterationProgram p = testing::program_of(std::move(s), ckpt, cache_valid_layers);
    p.setup.cache_writes_behind = cache_writes_behind;
    return pipeline.run(p, mbs, real, lr);
  }
};

std::map<std::string, at::Tensor> grads(const Model& model) {
  std::map<std::string, at::Tensor> g;
  for (const auto& p : model.named_params())
    if (p.tensor.grad().defined()) g[p.name] = p.tensor.grad().clone();
  return g;
}

void require_close(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name));
    CHECK(at::allclose(t, b.at(name), 1e-5, 1e-5));
  }
}

const ScheduleKind kKinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::LoopingBreadthFirst,
                               ScheduleKind::LoopingDepthFirst};

}  // namespace

TEST_CASE("every schedule on 1, 2 and 4 stages gives one device's loss and gradients") {
  std::mt19937 rng(5);
  for (const ModelFamily family : {ModelFamily::ViT, ModelFamily::Bert}) {
    const ModelConfig m = tiny(family);
    const at::Tensor x = inputs(m, 12, 1);
    const at::Tensor y = at::randint(0, m.num_labels, {12}, at::kLong);
    Run ref(m, 1);
    const int n = ref.model.num_sublayers();
    ref.pipeline.configure(random_partition(n, 0, 1, rng), 1, 1);
    const auto mb1 = split(x, y, 1);
    const double ref_loss = ref.run(schedule_for(ScheduleKind::GPipe, 1, 1, 1, ref.pipeline.partition(), false),
                                             mb1, 12, 0).loss;
    const auto ref_grads = grads(ref.model);
    for (const ScheduleKind kind : kKinds)
      for (const int K : {1, 2, 4}) {
        const bool looping = kind == ScheduleKind::LoopingBreadthFirst || kind == ScheduleKind::LoopingDepthFirst;
        const int v = looping && 2 * K <= n ? 2 : 1;
        if (looping && v == 1) continue;
        for (const int M : {K, 2 * K, 3 * K}) {
          if (M > 12) continue;
          INFO(to_string(kind) << " K=" << K << " M=" << M << " v=" << v << " " << to_string(family));
          Run run(m, K);
          run.pipeline.configure(random_partition(n, 0, K * v, rng), K, v);
          const auto result =
              run.run(schedule_for(kind, K, M, v, run.pipeline.partition(), false), split(x, y, M), 12, 0);
          CHECK(result.loss == Approx(ref_loss).epsilon(1e-5));
          require_close(grads(run.model), ref_grads);
        }
      }
  }
}

TEST_CASE("with dropout, every schedule, partition, frozen prefix and recomputation gives one device's loss and "
          "gradients: trained sublayers drop by sample, frozen ones not at all") {
  std::mt19937 rng(8);
  const Dropout dropout{0.2, 0.3, 0.25};
  for (const ModelFamily family : {ModelFamily::ViT, ModelFamily::Bert}) {
    const ModelConfig m = tiny(family);
    const at::Tensor x = inputs(m, 12, 3);
    const at::Tensor y = at::randint(0, m.num_labels, {12}, at::kLong);
    std::vector<std::int64_t> all_indices(12);
    std::iota(all_indices.begin(), all_indices.end(), 0);
    for (const int frozen : {0, 1, 2}) {
      // One device by hand: the frozen prefix without dropout, the rest with
      // the samples' keys.
      Model ref(m, 7, dropout);
      const int n = ref.num_sublayers(), frozen_end = ModelSpec::frozen_prefix(frozen).last;
      for (int i = 0; i < n; ++i) ref.sublayer(i).set_requires_grad(i >= frozen_end);
      const at::Tensor keys = dropout_keys(41, all_indices);
      const at::Tensor loss = at::cross_entropy_loss(
          ref.forward({frozen_end, n}, ref.forward({0, frozen_end}, x), {}, keys), y);
      loss.backward();
      const auto ref_grads = grads(ref);
      {
        Model plain(m, 7);
        const at::Tensor no_drop = at::cross_entropy_loss(plain.forward({0, n}, x), y);
        CHECK(std::abs(no_drop.item<double>() - loss.item<double>()) > 1e-4);  // the dropout is there
      }
      for (const ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
        for (const int K : {1, 2})
          for (const int M : {K, 3 * K})
            for (const Checkpointing ckpt : {Checkpointing::Never, Checkpointing::Always}) {
              INFO(to_string(kind) << " K=" << K << " M=" << M << " frozen=" << frozen << " recompute="
                                   << (ckpt == Checkpointing::Always) << " " << to_string(family));
              Run run(m, K, ckpt, sgd(), dropout);
              run.pipeline.configure(random_partition(n, frozen, K, rng), K, 1);
              run.pipeline.set_dropout_seed(41);
              const auto result =
                  run.run(schedule_for(kind, K, M, 1, run.pipeline.partition(), false), split(x, y, M), 12, 0);
              CHECK(result.loss == Approx(loss.item<double>()).epsilon(1e-5));
              require_close(grads(run.model), ref_grads);
            }
    }
  }
}

TEST_CASE("activation recomputation changes memory, not the gradients") {
  std::mt19937 rng(9);
  const ModelConfig m = tiny(ModelFamily::ViT);
  const at::Tensor x = inputs(m, 8, 2);
  const at::Tensor y = at::randint(0, m.num_labels, {8}, at::kLong);
  std::vector<std::map<std::string, at::Tensor>> results;
  for (const Checkpointing c : {Checkpointing::Never, Checkpointing::ExceptLast, Checkpointing::Always}) {
    Run run(m, 2, c);
    std::mt19937 same(3);
    run.pipeline.configure(random_partition(run.model.num_sublayers(), 1, 2, same), 2, 1);
    (void)run.run(schedule_for(ScheduleKind::OneFOneB, 2, 4, 1, run.pipeline.partition(), false),
                           split(x, y, 4), 8, 0);
    results.push_back(grads(run.model));
  }
  require_close(results[1], results[0]);
  require_close(results[2], results[0]);
}

TEST_CASE("the executor recomputes exactly the micro-batches the planner's cost and memory models assume") {
  // One rule (recomputes() in planner/memory.hpp) for iteration_costs, stage_memory
  // and the executor: every stage that trains reruns its forward for those micro-batches.
  std::mt19937 rng(17);
  const ModelConfig m = tiny(ModelFamily::ViT);
  for (int trial = 0; trial < 12; ++trial) {
    const Checkpointing c = std::array{Checkpointing::Never, Checkpointing::ExceptLast, Checkpointing::Always}[trial % 3];
    const int K = 1 << (rng() % 3), M = K + static_cast<int>(rng() % 4);
    const int frozen = static_cast<int>(rng() % 2);
    INFO("checkpointing " << to_string(c) << ", K " << K << ", M " << M << ", frozen " << frozen);
    const at::Tensor x = inputs(m, 8, trial);
    const at::Tensor y = at::randint(0, m.num_labels, {8}, at::kLong);
    Run run(m, K, c);
    run.pipeline.configure(random_partition(run.model.num_sublayers(), frozen, K, rng), K, 1);
    const Partition& p = run.pipeline.partition();
    const IterationResult r = run.run(
        schedule_for(rng() % 2 ? ScheduleKind::GPipe : ScheduleKind::OneFOneB, K, M, 1, p, false), split(x, y, M), 8, 0);
    REQUIRE(static_cast<int>(r.recomputed.size()) == K);
    for (int st = 0; st < K; ++st)
      for (int mb = 0; mb < M; ++mb) CHECK(r.recomputed[st][mb] == (!p.active(st).empty() && recomputes(c, mb, M)));
    // The memory model keeps A (saved activations) for exactly the others.
    const int kept = M - recomputed_microbatches(c, M);
    CHECK(kept == (c == Checkpointing::Never ? M : c == Checkpointing::Always ? 0 : 1));
  }
}

TEST_CASE("after a transition that freezes layers and repacks, training matches one device bit for bit in weights "
          "and within 1e-5 in loss") {
  std::mt19937 rng(13);
  const ModelConfig m = tiny(ModelFamily::ViT);
  const TrainingConfig t = sgd();
  for (int trial = 0; trial < 4; ++trial) {
    const int frozen = 1 + trial % 3;
    const int K_after = trial % 2 == 0 ? 2 : 1;
    const ScheduleKind kind = kKinds[trial];
    const bool looping = kind == ScheduleKind::LoopingBreadthFirst || kind == ScheduleKind::LoopingDepthFirst;
    INFO("trial " << trial << " frozen=" << frozen << " K 4->" << K_after << " " << to_string(kind));
    Run ref(m, 1), run(m, 4);
    const int n = ref.model.num_sublayers();
    std::vector<double> ref_losses, losses;
    ref.pipeline.configure(random_partition(n, 0, 1, rng), 1, 1);
    int K = 4, v = looping ? 2 : 1;
    run.pipeline.configure(random_partition(n, 0, K * v, rng), K, v);
    for (int it = 0; it < 5; ++it) {
      if (it == 2) {  // the transition: freeze `frozen` layers, repack onto K_after devices
        std::map<std::string, at::Tensor> before;
        for (const auto& p : run.model.named_params()) before[p.name] = p.tensor.detach().clone();
        ref.pipeline.configure(random_partition(n, frozen, 1, rng), 1, 1);
        K = K_after;
        v = looping && 2 * K <= n - ModelSpec::frozen_prefix(frozen).last ? 2 : 1;
        run.pipeline.configure(random_partition(n, frozen, K * v, rng), K, v);
        for (const auto& p : run.model.named_params()) CHECK(at::equal(p.tensor.detach(), before.at(p.name)));
        // Frozen parameters leave the optimizer; active ones keep their state.
        for (int i = 0; i < n; ++i)
          for (const auto& p : run.model.sublayer(i).params())
            CHECK(run.optimizer.contains(p.name) == (i >= run.pipeline.partition().frozen_end));
      }
      const at::Tensor x = inputs(m, 12, 100 + it);
      const at::Tensor y = at::randint(0, m.num_labels, {12}, at::kLong);
      const Partition& rp = ref.pipeline.partition();
      const Partition& pp = run.pipeline.partition();
      const double lr = learning_rate(t, it, 5);
      ref_losses.push_back(ref.run(schedule_for(ScheduleKind::GPipe, 1, 1, 1, rp, true), split(x, y, 1), 12, lr).loss);
      const auto frozen_before = run.pipeline.partition().frozen_end;
      std::map<std::string, at::Tensor> frozen_weights;
      for (int i = 0; i < frozen_before; ++i)
        for (const auto& p : run.model.sublayer(i).params()) frozen_weights[p.name] = p.tensor.detach().clone();
      const ScheduleKind used = looping && v == 1 ? ScheduleKind::OneFOneB : kind;
      losses.push_back(run.run(schedule_for(used, K, 2 * K, v, pp, true), split(x, y, 2 * K), 12, lr).loss);
      for (int i = 0; i < frozen_before; ++i)
        for (const auto& p : run.model.sublayer(i).params()) {
          CHECK(at::equal(p.tensor.detach(), frozen_weights.at(p.name)));
          CHECK_FALSE(p.tensor.grad().defined());
        }
    }
    for (std::size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == Approx(ref_losses[i]).epsilon(1e-5));
    for (const auto& p : ref.model.named_params()) {
      INFO(p.name);
      const auto other = run.model.named_params();
      const auto it = std::find_if(other.begin(), other.end(), [&](const NamedTensor& q) { return q.name == p.name; });
      CHECK(at::allclose(p.tensor.detach(), it->tensor.detach(), 1e-5, 1e-5));
    }
  }
}

TEST_CASE("an optimizer step without the gradients' norms trains the same weights and reports none") {
  // The norms only read the gradients: a step that skips them (a freeze
  // policy that reads none) leaves the same loss and weights, bit for bit.
  const ModelConfig m = tiny(ModelFamily::ViT);
  std::mt19937 rng(5);
  Run with(m, 2), without(m, 2);
  const int n = with.model.num_sublayers();
  const Partition p = random_partition(n, 1, 2, rng);
  with.pipeline.configure(p, 2, 1);
  without.pipeline.configure(p, 2, 1);
  for (int it = 0; it < 3; ++it) {
    const at::Tensor x = inputs(m, 8, 40 + it);
    const at::Tensor y = at::randint(0, m.num_labels, {8}, at::kLong);
    IterationProgram a = testing::program_of(schedule_for(ScheduleKind::OneFOneB, 2, 4, 1, p, true));
    IterationProgram b = a;
    b.setup.grad_norms = false;
    const IterationResult ra = with.pipeline.run(a, split(x, y, 4), 8, 0.05);
    const IterationResult rb = without.pipeline.run(b, split(x, y, 4), 8, 0.05);
    CHECK(ra.loss == rb.loss);
    CHECK(ra.layer_grad_sq.size() == static_cast<std::size_t>(m.num_hidden_layers));
    CHECK(rb.layer_grad_sq.empty());
  }
  const auto wa = with.model.named_params(), wb = without.model.named_params();
  REQUIRE(wa.size() == wb.size());
  for (std::size_t i = 0; i < wa.size(); ++i) CHECK(at::equal(wa[i].tensor, wb[i].tensor));
}

TEST_CASE("prepare_step makes the trained parameters' optimizer state, none of the frozen ones', and changes no update") {
  // A run's start prepares the first step; the run then trains the weights
  // and state of a run that did not, bit for bit.
  const ModelConfig m = tiny(ModelFamily::ViT);
  std::mt19937 rng(6);
  const TrainingConfig adamw = testing::update_rule(ep::Optimizer::AdamW);
  Run prepared(m, 2, Checkpointing::Never, adamw), lazy(m, 2, Checkpointing::Never, adamw);
  const Partition p = random_partition(prepared.model.num_sublayers(), 1, 2, rng);
  prepared.pipeline.configure(p, 2, 1);
  lazy.pipeline.configure(p, 2, 1);
  const IterationProgram program = testing::program_of(schedule_for(ScheduleKind::OneFOneB, 2, 4, 1, p, true));
  prepared.pipeline.prepare_step(program);
  int made = 0;
  for (int i = 0; i < prepared.model.num_sublayers(); ++i)
    for (const auto& q : prepared.model.sublayer(i).params()) {
      INFO(q.name);
      REQUIRE(prepared.optimizer.contains(q.name) == (i >= p.frozen_end));
      if (i < p.frozen_end) continue;
      const ParamState& s = prepared.optimizer.state().at(q.name);
      CHECK(s.step == 0);
      CHECK(at::equal(s.momentum, at::zeros_like(q.tensor)));
      ++made;
    }
  CHECK(made > 0);
  for (int it = 0; it < 3; ++it) {
    const at::Tensor x = inputs(m, 8, 60 + it);
    const at::Tensor y = at::randint(0, m.num_labels, {8}, at::kLong);
    CHECK(prepared.pipeline.run(program, split(x, y, 4), 8, 0.01).loss ==
          lazy.pipeline.run(program, split(x, y, 4), 8, 0.01).loss);
  }
  const auto wa = prepared.model.named_params(), wb = lazy.model.named_params();
  REQUIRE(wa.size() == wb.size());
  for (std::size_t i = 0; i < wa.size(); ++i) CHECK(at::equal(wa[i].tensor, wb[i].tensor));
  for (const auto& [name, s] : lazy.optimizer.state()) {
    CHECK(at::equal(prepared.optimizer.state().at(name).second_moment, s.second_moment));
    CHECK(prepared.optimizer.state().at(name).step == s.step);
  }
}

TEST_CASE("a stage with nothing to train works: no optimizer state, no gradient received") {
  // Without AutoPipe the frozen prefix stays inside its stages: stage 0
  // holds only frozen sublayers.
  const ModelConfig m = tiny(ModelFamily::ViT);
  Run ref(m, 1), run(m, 2);
  const int n = run.model.num_sublayers();
  Partition p;
  p.frozen_layers = 2;
  p.frozen_end = ModelSpec::frozen_prefix(2).last;
  p.bounds = {0, p.frozen_end, n};
  run.pipeline.configure(p, 2, 1);
  Partition single{2, p.frozen_end, {0, n}, {}};
  ref.pipeline.configure(single, 1, 1);
  const at::Tensor x = inputs(m, 8, 4);
  const at::Tensor y = at::randint(0, m.num_labels, {8}, at::kLong);
  const double a = run.run(schedule_for(ScheduleKind::GPipe, 2, 4, 1, p, true), split(x, y, 4), 8, 0.01).loss;
  const double b = ref.run(schedule_for(ScheduleKind::GPipe, 1, 1, 1, single, true), split(x, y, 1), 8, 0.01).loss;
  CHECK(a == Approx(b).epsilon(1e-5));
  for (int i = 0; i < p.frozen_end; ++i)
    for (const auto& q : run.model.sublayer(i).params()) CHECK_FALSE(run.optimizer.contains(q.name));
}

TEST_CASE("a failing stage stops the whole pipeline with its error instead of hanging") {
  const ModelConfig m = tiny(ModelFamily::ViT);
  Run run(m, 2);
  std::mt19937 rng(1);
  run.pipeline.configure(random_partition(run.model.num_sublayers(), 0, 2, rng), 2, 1);
  const at::Tensor x = at::randn({4, 1, 6, 6});  // wrong image size: the stem fails on device 0
  const at::Tensor y = at::zeros({4}, at::kLong);
  CHECK_THROWS(run.run(schedule_for(ScheduleKind::GPipe, 2, 2, 1, run.pipeline.partition(), false),
                                split(x, y, 2), 4, 0));
  // The pipeline is usable afterwards.
  const at::Tensor good = inputs(m, 4, 3);
  CHECK(run.run(schedule_for(ScheduleKind::GPipe, 2, 2, 1, run.pipeline.partition(), false),
                         split(good, y, 2), 4, 0).loss > 0);
}

TEST_CASE("the cached path gives recomputation's loss and gradients, and advancing stale entries gives the "
          "activations recomputed from the input") {
  const ModelConfig m = tiny(ModelFamily::ViT);
  const at::Tensor x = inputs(m, 12, 6);
  const at::Tensor y = at::randint(0, m.num_labels, {12}, at::kLong);
  const auto mbs = split(x, y, 4);
  std::mt19937 rng(2);
  Run run(m, 2);
  const int n = run.model.num_sublayers();
  // The cache is a node-shared file: this process's own, deleted on the way out.
  const std::string cache_file =
      (std::filesystem::temp_directory_path() / ("ep_test_pipeline_" + std::to_string(::getpid()) + ".cache")).string();
  ActivationCache cache(cache_file, 12, {m.tokens(), m.hidden_size}, true);
  struct Remove {
    const std::string& path;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  } remove_file{cache_file};
  run.pipeline.set_cache(&cache);
  for (const int frozen : {1, 3}) {
    INFO("frozen " << frozen);
    std::mt19937 same(frozen);
    const Partition p = random_partition(n, frozen, 2, same);
    run.pipeline.configure(p, 2, 1);
    // The advance stores its writes behind the workers, as from a GPU; the
    // reads below wait for them.
    const auto iterate = [&](FrozenInput in, int valid) {
      const IterationResult r =
          run.run(schedule_for(ScheduleKind::OneFOneB, 2, 4, 1, p, false, in), mbs, 12, 0, valid, frozen == 3);
      return std::pair{r.loss, grads(run.model)};
    };
    const auto [ref_loss, ref_grads] = iterate(FrozenInput::Forward, -1);
    // First the cache is filled (from nothing, or by advancing depth-1 entries
    // through the newly frozen layers), then read.
    const auto [fill_loss, fill_grads] =
        frozen == 1 ? iterate(FrozenInput::ForwardAndCacheWrite, 0) : iterate(FrozenInput::Advance, 1);
    CHECK(fill_loss == Approx(ref_loss).epsilon(1e-6));
    require_close(fill_grads, ref_grads);
    c10::NoGradGuard no_grad;
    const at::Tensor recomputed = run.model.forward(ModelSpec::frozen_prefix(frozen), x);
    CHECK(at::allclose(cache.read({0, 5, 11}, frozen, at::kCPU), recomputed.index_select(0, at::tensor({0, 5, 11})),
                       1e-6, 1e-6));
    const auto [read_loss, read_grads] = iterate(FrozenInput::CacheRead, -1);
    CHECK(read_loss == Approx(ref_loss).epsilon(1e-6));
    require_close(read_grads, ref_grads);
    // Rows read ahead with the batch (the loader's, on GPUs) stand in for
    // the CacheRead's own read, at its depth only.
    const auto read_with = [&](const std::function<void(MicroBatch&)>& ahead) {
      std::vector<MicroBatch> with = mbs;
      for (MicroBatch& mb : with) ahead(mb);
      return run.pipeline
          .run(testing::program_of(schedule_for(ScheduleKind::OneFOneB, 2, 4, 1, p, false, FrozenInput::CacheRead)), with,
               12, 0)
          .loss;
    };
    CHECK(read_with([&](MicroBatch& mb) {
            mb.cached = cache.read_ahead(mb.indices, frozen, false);
            mb.cached_depth = frozen;
          }) == Approx(ref_loss).epsilon(1e-6));
    const auto zeros = [&](int depth) {
      return [&, depth](MicroBatch& mb) {
        mb.cached = at::zeros_like(cache.read(mb.indices, frozen, at::kCPU));
        mb.cached_depth = depth;
      };
    };
    CHECK(read_with(zeros(frozen)) != Approx(ref_loss).epsilon(1e-3));  // taken: they are used
    CHECK(read_with(zeros(frozen + 1)) == Approx(ref_loss).epsilon(1e-6));  // another depth's: read again
  }
  // A read at the wrong depth is an error, not stale activations.
  CHECK_THROWS_WITH(cache.read({0}, 1, at::kCPU), Catch::Contains("holds depth 3, expected 1"));
}

TEST_CASE("bf16 autocast: every iteration computes with the weights the last optimizer step left") {
  // Autocast caches one bf16 copy per trained weight; kept across
  // iterations, the second iteration would still see the first one's weights.
  const ModelConfig m = tiny(ModelFamily::ViT);
  const at::Tensor x = inputs(m, 8, 6);
  const at::Tensor y = at::randint(0, m.num_labels, {8}, at::kLong);
  const auto bf16_run = [&](Model& model, exec::Optimizer& opt, double lr_first) {
    Pipeline pipe(model, opt, {cpus(1), true});
    Partition all{0, 0, {0, model.num_sublayers()}, {}};
    pipe.configure(all, 1, 1);
    const auto program = [&] { return testing::program_of(schedule_for(ScheduleKind::GPipe, 1, 1, 1, all, true)); };
    if (lr_first > 0) (void)pipe.run(program(), split(x, y, 1), 8, lr_first);
    return pipe.run(program(), split(x, y, 1), 8, 0).loss;  // lr 0: the loss at the weights as they are
  };
  Model trained(m, 7), fresh(m, 8);
  exec::Optimizer a(sgd()), b(sgd());
  const double second = bf16_run(trained, a, 0.5);
  {
    c10::NoGradGuard no_grad;
    const auto from = trained.named_params(), to = fresh.named_params();
    for (std::size_t i = 0; i < from.size(); ++i) to[i].tensor.copy_(from[i].tensor);
  }
  CHECK(second == bf16_run(fresh, b, 0));
}

TEST_CASE("model work handed to stage 0's worker runs there, with the threads given, and leaves its autocast as it was") {
  const ModelConfig m = tiny(ModelFamily::ViT);
  const at::Tensor x = inputs(m, 8, 6);
  const at::Tensor y = at::randint(0, m.num_labels, {8}, at::kLong);
  Model model(m, 7);
  exec::Optimizer opt(sgd());
  Pipeline pipe(model, opt, {cpus(2), true});  // bf16 autocast on every worker
  Partition all{0, 0, {0, model.num_sublayers()}, {}};
  pipe.configure(all, 1, 1);
  const auto loss_on = [&](Pipeline& p) {  // lr 0: the loss at the weights as they are
    return p.run(testing::program_of(schedule_for(ScheduleKind::GPipe, 1, 1, 1, all, true)), split(x, y, 1), 8, 0).loss;
  };
  const auto loss = [&] { return loss_on(pipe); };
  const double before = loss();
  Model same_weights(m, 7);
  exec::Optimizer o(sgd());
  Pipeline fp32(same_weights, o, {cpus(1), false});
  fp32.configure(all, 1, 1);
  const double fp32_loss = loss_on(fp32);

  std::vector<std::thread::id> ran_on;
  for (const int threads : {1, 2}) {
    pipe.on_worker(threads, [&] {
      ran_on.push_back(std::this_thread::get_id());
      CHECK(at::get_num_threads() == threads);
      CHECK(compat::autocast_enabled(c10::DeviceType::CPU));
      {
        // What evaluation does: float32 for itself only.
        const compat::AutocastScope fp32(c10::DeviceType::CPU, false);
        CHECK_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));
        c10::NoGradGuard no_grad;
        CHECK(pipe.infer(x).scalar_type() == at::kFloat);
      }
      CHECK(compat::autocast_enabled(c10::DeviceType::CPU));
      CHECK(compat::autocast_dtype(c10::DeviceType::CPU) == at::kBFloat16);
    });
  }
  REQUIRE(ran_on.size() == 2);
  CHECK(ran_on[0] != std::this_thread::get_id());
  CHECK(ran_on[0] == ran_on[1]);  // the same persistent worker
  CHECK(loss() == before);        // still bf16:
  CHECK(std::abs(before - fp32_loss) > 1e-6);  // float32 gives another loss

  CHECK_THROWS_WITH(pipe.on_worker(1, [] { throw Error("task failed"); }), "task failed");
  CHECK(loss() == before);  // usable afterwards
}

#if AT_PARALLEL_OPENMP  // elsewhere ATen's thread count is one for the whole process
TEST_CASE("a thread's intra-op count holds in libtorch's own operators after another thread sets another") {
  // The main thread keeps one thread while a stage worker takes two: the
  // main thread's first parallel operator inside libtorch must not take
  // the worker's count (a second OpenMP team slows every worker).
  int seen = 0;
  std::thread main_like([&] {
    compat::set_thread_count(1);
    std::thread([] { compat::set_thread_count(2); }).join();
    seen = at::get_num_threads();  // libtorch's, with its own "initialised" flag
  });
  main_like.join();
  CHECK(seen == 1);
}
#endif

// Decision 0037: layers frozen inside (behind a trainable one) stay in their
// stages and pass their input's gradient on, but take none themselves.
TEST_CASE("for random models, frozen sets and partitions, a pipelined run equals one device with those "
          "parameters' requires_grad off, and frozen weights never change") {
  std::mt19937 rng(37);
  const Dropout dropout{0.2, 0.3, 0.25};
  for (int trial = 0; trial < 24; ++trial) {
    const ModelFamily family = trial % 2 == 0 ? ModelFamily::ViT : ModelFamily::Bert;
    const ModelConfig m = tiny(family);
    const int L = m.num_hidden_layers;
    Partition set;  // the frozen set: a prefix, and layers inside at random
    set.frozen_layers = static_cast<int>(rng() % 2);
    set.frozen_end = ModelSpec::frozen_prefix(set.frozen_layers).last;
    for (int l = set.frozen_layers + 1; l < L; ++l)
      if (rng() % 2 == 0) set.frozen_inside.push_back(l);
    if (set.frozen_inside.empty()) set.frozen_inside.push_back(L - 1);
    const at::Tensor x = inputs(m, 12, 50 + trial);
    const at::Tensor y = at::randint(0, m.num_labels, {12}, at::kLong);
    std::vector<std::int64_t> all_indices(12);
    std::iota(all_indices.begin(), all_indices.end(), 0);

    // One device by hand: requires_grad off for the frozen set, the prefix
    // without dropout, the rest with the samples' keys.
    Model ref(m, 7, dropout);
    const int n = ref.num_sublayers();
    for (int i = 0; i < n; ++i) ref.sublayer(i).set_requires_grad(set.trains(i));
    const at::Tensor keys = dropout_keys(41, all_indices);
    const at::Tensor loss =
        at::cross_entropy_loss(ref.forward({set.frozen_end, n}, ref.forward({0, set.frozen_end}, x), {}, keys), y);
    loss.backward();
    const auto ref_grads = grads(ref);

    const int K = std::vector<int>{1, 2, 4}[rng() % 3];
    const int M = K * static_cast<int>(1 + rng() % 2);
    const ScheduleKind kind = rng() % 2 == 0 ? ScheduleKind::GPipe : ScheduleKind::OneFOneB;
    const Checkpointing ckpt = rng() % 2 == 0 ? Checkpointing::Never : Checkpointing::Always;
    Partition part = random_partition(n, set.frozen_layers, K, rng);
    part.frozen_inside = set.frozen_inside;
    INFO("trial " << trial << " " << to_string(family) << " " << part << " " << to_string(kind) << " M=" << M
                  << " recompute=" << (ckpt == Checkpointing::Always));
    Run run(m, K, ckpt, sgd(), dropout);
    run.pipeline.configure(part, K, 1);
    run.pipeline.set_dropout_seed(41);
    const auto result = run.run(schedule_for(kind, K, M, 1, part, false), split(x, y, M), 12, 0);
    CHECK(result.loss == Approx(loss.item<double>()).epsilon(1e-5));
    require_close(grads(run.model), ref_grads);  // the same trained parameters have gradients, and equal ones

    // Trained with steps (momentum and weight decay, which would move any
    // weight the optimizer held): the frozen set's weights stay bit for bit.
    std::map<std::string, at::Tensor> before;
    for (const auto& p : run.model.named_params()) before[p.name] = p.tensor.detach().clone();
    for (int it = 0; it < 3; ++it)
      (void)run.run(schedule_for(kind, K, M, 1, part, true), split(x, y, M), 12, 0.05);
    for (int i = 0; i < n; ++i)
      for (const auto& p : run.model.sublayer(i).params()) {
        INFO(p.name);
        CHECK(run.optimizer.contains(p.name) == part.trains(i));
        if (!part.trains(i)) CHECK(at::equal(p.tensor.detach(), before.at(p.name)));
        else CHECK_FALSE(at::equal(p.tensor.detach(), before.at(p.name)));
      }
  }
}

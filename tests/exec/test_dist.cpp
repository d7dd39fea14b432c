// Data parallelism on c10d Gloo (two ranks as two threads of this process,
// meeting at a TCPStore on loopback), collective timeouts, and AutoCache's
// advance of stale entries through newly frozen layers.
#include "tests/exec/pch.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "exec/cache.hpp"
#include "exec/dist.hpp"
#include "exec/launch.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "exec/replica_run.hpp"
#include "exec/trainer.hpp"
#include "planner/autopipe.hpp"
#include "tests/exec/support.hpp"

namespace {

using namespace ep;
using namespace ep::exec;
using namespace std::chrono_literals;

ModelConfig tiny_vit() { return testing::tiny(ModelFamily::ViT); }
using testing::sgd;

ProcessEnv env_of(int rank, int world, int port) { return local_env(rank, world, port, "test"); }

// Two Dist objects (ranks 0 and 1) built concurrently, with an active group
// of both over `lanes` lanes.
std::pair<std::unique_ptr<Dist>, std::unique_ptr<Dist>> two_ranks(std::chrono::milliseconds timeout, int lanes) {
  const int port = free_port();
  std::unique_ptr<Dist> d1;
  std::exception_ptr error;
  std::thread t([&] {
    try {
      d1 = std::make_unique<Dist>(env_of(1, 2, port), timeout);
      d1->rebuild_active(0, {0, 1}, lanes);
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::unique_ptr<Dist> d0;
  std::exception_ptr error0;
  try {
    d0 = std::make_unique<Dist>(env_of(0, 2, port), timeout);
    d0->rebuild_active(0, {0, 1}, lanes);
  } catch (...) {
    error0 = std::current_exception();
  }
  t.join();  // always: a joinable thread's destructor would terminate the test binary
  if (error0) std::rethrow_exception(error0);
  if (error) std::rethrow_exception(error);
  return {std::move(d0), std::move(d1)};
}

Partition partition(int frozen_layers, std::vector<int> cuts, int sublayers) {
  Partition p;
  p.frozen_layers = frozen_layers;
  p.frozen_end = ModelSpec::frozen_prefix(frozen_layers).last;
  p.bounds.push_back(p.frozen_end);
  p.bounds.insert(p.bounds.end(), cuts.begin(), cuts.end());
  p.bounds.push_back(sublayers);
  return p;
}

std::vector<MicroBatch> batches(const at::Tensor& x, const at::Tensor& y, std::int64_t first, std::int64_t n, int M) {
  std::vector<MicroBatch> out;
  std::int64_t at = first;
  for (const int k : micro_batch_sizes(static_cast<int>(n), M)) {
    MicroBatch mb(x.narrow(0, at, k), y.narrow(0, at, k), at::ones({k}));
    for (int i = 0; i < k; ++i) mb.indices.push_back(at + i);
    out.push_back(mb);
    at += k;
  }
  return out;
}

}  // namespace

TEST_CASE("two data-parallel replicas with bucketed all-reduce equal one replica on the whole batch", "[dist]") {
  const ModelConfig mc = tiny_vit();
  auto [d0, d1] = two_ranks(30s, 2);
  const int B = 12, sublayers = 2 * mc.num_hidden_layers + 2;
  const Partition p = partition(1, {6}, sublayers);  // 1 frozen layer, 2 stages

  // Reference: one pipeline, the whole batch, no all-reduce.
  Model ref(mc, 5);
  exec::Optimizer ref_opt(sgd());
  Pipeline ref_pipe(ref, ref_opt, {{at::kCPU, at::kCPU}, false});
  ref_pipe.configure(p, 2, 1);
  ScheduleOptions o;
  o.kind = ScheduleKind::OneFOneB;
  o.K = 2;
  o.M = 4;
  o.optimizer_step = true;
  o.frozen_input = FrozenInput::Forward;
  const Schedule single = build_schedule(o);
  // Replicas: half the batch each, 2 buckets per stage all-reduced.
  o.M = 2;
  o.buckets_per_stage = {2, 2};
  const Schedule replicated = build_schedule(o);
  check_schedule(replicated);

  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::unique_ptr<exec::Optimizer>> opts;
  std::vector<std::unique_ptr<Pipeline>> pipes;
  for (Dist* d : {d0.get(), d1.get()}) {
    models.push_back(std::make_unique<Model>(mc, 5));
    opts.push_back(std::make_unique<exec::Optimizer>(sgd()));
    pipes.push_back(std::make_unique<Pipeline>(*models.back(), *opts.back(),
                                               PipelineOptions{{at::kCPU, at::kCPU}, false}));
    pipes.back()->configure(p, 2, 1);
    pipes.back()->set_reducer(d);
  }
  for (int it = 0; it < 3; ++it) {
    at::manual_seed(100 + it);
    const at::Tensor x = at::randn({B, 1, 8, 8});
    const at::Tensor y = at::randint(0, mc.num_labels, {B}, at::kLong);
    const IterationResult r = ref_pipe.run(testing::program_of(single), batches(x, y, 0, B, 4), B, 1e-2);
    IterationResult parts[2];
    std::thread other([&] { parts[1] = pipes[1]->run(testing::program_of(replicated), batches(x, y, 6, 6, 2), B, 1e-2, std::chrono::steady_clock::now()); });
    parts[0] = pipes[0]->run(testing::program_of(replicated), batches(x, y, 0, 6, 2), B, 1e-2, std::chrono::steady_clock::now());
    other.join();
    CHECK(parts[0].loss + parts[1].loss == Approx(r.loss).epsilon(1e-5));
    // Both replicas measure the same (all-reduced) gradient norms as the reference.
    REQUIRE(parts[0].layer_grad_sq.size() == static_cast<std::size_t>(mc.num_hidden_layers));
    REQUIRE(parts[1].layer_grad_sq.size() == r.layer_grad_sq.size());
    REQUIRE(r.layer_grad_sq.size() == parts[0].layer_grad_sq.size());
    for (int l = 0; l < mc.num_hidden_layers; ++l) {
      CHECK(parts[0].layer_grad_sq[l] == parts[1].layer_grad_sq[l]);
      CHECK(parts[0].layer_grad_sq[l] == Approx(r.layer_grad_sq[l]).epsilon(1e-4).margin(1e-12));
    }
    // Every bucket's all-reduce is recorded with its completion time.
    int reduces = 0;
    for (const ActionRecord& rec : parts[0].records)
      if (rec.action.kind == ActionKind::AllReduce) {
        ++reduces;
        CHECK(rec.end_s >= rec.start_s);
      }
    CHECK(reduces == 4);
  }
  const auto a = models[0]->named_params(), b = models[1]->named_params(), c = ref.named_params();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    CHECK(at::equal(a[i].tensor, b[i].tensor));  // replicas stay bit-identical
    CHECK(at::allclose(a[i].tensor, c[i].tensor, 1e-5, 1e-5));
  }
}

TEST_CASE("a collective a peer never joins fails within the timeout, naming rank and operation", "[dist]") {
  // 4 s: also the rendezvous's limit, which a loaded CI machine must meet.
  auto [d0, d1] = two_ranks(4000ms, 1);
  at::Tensor x = at::ones({8});
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(d0->allreduce(0, x, "all-reduce of stage 0 bucket 0")->wait(),
                    Catch::StartsWith("rank 0: all-reduce of stage 0 bucket 0 (lane 0, active group 0 of ranks 0,1)") &&
                        Catch::Contains("failed after"));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(s >= 3.0);
  CHECK(s < 4.0 + 6.0);
  // A state transfer nobody sends times out the same way.
  CHECK_THROWS_WITH(d1->recv_bytes(0, 7, "training state"), Catch::StartsWith("rank 1: receiving training state from rank 0"));
}

TEST_CASE("successive active groups each reduce over their own ranks, a rank ends right after a rebuild",
          "[dist]") {
  // The previous group retires on a thread of its own: each new group must
  // work at once, whatever the old one's state, and the end must wait for it.
  auto [d0, d1] = two_ranks(30s, 2);
  const auto sum_on = [](Dist& d, int lane, float v) {
    at::Tensor x = at::full({4}, v);
    d.allreduce(lane, x, "test")->wait();
    return x[0].item<float>();
  };
  for (int generation = 1; generation <= 4; ++generation) {
    const bool both = generation % 2 == 0;  // {0, 1}, then {0} alone, and again
    const int lanes = generation == 4 ? 2 : 1;
    std::thread t;
    float got1 = 0;
    if (both)
      t = std::thread([&, lanes] {
        d1->rebuild_active(generation, {0, 1}, lanes);
        got1 = sum_on(*d1, lanes - 1, 2.0f);
      });
    else
      CHECK(d1->rebuild_active(generation, {0}, 1) == 0.0);  // it leaves: its old group retires
    d0->rebuild_active(generation, both ? std::vector<int>{0, 1} : std::vector<int>{0}, lanes);
    const float got0 = sum_on(*d0, lanes - 1, 1.0f);
    if (t.joinable()) t.join();
    CHECK(got0 == (both ? 3.0f : 1.0f));
    if (both) CHECK(got1 == 3.0f);
  }
  // Rebuilt and gone at once: the retired group ends before the process's Dist.
  std::thread t([&] {
    d1->rebuild_active(5, {0, 1}, 1);
    d1.reset();
  });
  d0->rebuild_active(5, {0, 1}, 1);
  d0.reset();
  t.join();
}

TEST_CASE("back-to-back rebuilds: a rank that retires a group at once never breaks a peer still building it",
          "[dist]") {
  // As profile times a rebuild: group g built, then g + 1 at once, which
  // retires g. A rank done with g's connections before a peer had
  // completed its own made that peer read "Connection closed by peer".
  for (const int n : {2, 3}) {
    INFO(n << " ranks");
    std::vector<int> done(n, 0);
    with_ranks(n, 30s, [&](Dist& d, int r, const std::vector<int>& ranks) {
      for (int generation = 0; generation < 25; ++generation) (void)d.rebuild_active(generation, ranks, 1);
      at::Tensor x = at::ones({2});
      d.allreduce(0, x, "test")->wait();
      done[r] = static_cast<int>(x[0].item<float>());
    });
    CHECK(done == std::vector<int>(n, n));
  }
}

TEST_CASE("control messages reach every rank, state transfers arrive intact", "[dist]") {
  auto [d0, d1] = two_ranks(30s, 1);
  nlohmann::json got;
  std::thread t([&] { got = d1->control("step/1"); });
  std::this_thread::sleep_for(100ms);  // rank 1 waits first: it must not time out
  d0->control("step/1", {{"frozen", 3}});
  t.join();
  CHECK(got.at("frozen") == 3);
  std::vector<std::uint8_t> bytes(100000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7);
  std::vector<std::uint8_t> received;
  std::thread r([&] { received = d1->recv_bytes(0, 3, "state"); });
  d0->send_bytes(bytes, 1, 3, "state");
  r.join();
  CHECK(received == bytes);
}

TEST_CASE("a failing rank reports its error while its peers still wait on it, they fail once it is gone",
          "[dist]") {
  // Two replicas as two threads. Rank 0 cannot resume (no such checkpoint);
  // rank 1 goes on into training and waits on rank 0, whose store it uses.
  const Config c = parse_config(testing::kTiny, "tiny.toml",
                                {"cluster.gpus_per_node=2", "planner.K=1", "planner.autodp=true",
                                 "exec.collective_timeout_s=60"});
  const int port = free_port();
  std::atomic<bool> peer_failed{false};
  std::string peer_error;
  std::thread peer([&] {
    TrainOptions o;
    o.process = env_of(1, 2, port);
    try {
      (void)train(c, o);
    } catch (const std::exception& e) {
      peer_error = e.what();
    }
    peer_failed = true;
  });
  TrainOptions o;
  o.process = env_of(0, 2, port);
  o.resume = "/nonexistent/checkpoints";
  int reports = 0;
  bool peer_failed_when_reported = true;
  o.report_error = [&](const std::exception& e) {
    ++reports;
    CHECK_THAT(std::string(e.what()), Catch::Contains("/nonexistent/checkpoints"));
    // The peer would fail within this time of the connections closing.
    std::this_thread::sleep_for(1500ms);
    peer_failed_when_reported = peer_failed.load();
  };
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(train(c, o), Catch::Contains("/nonexistent/checkpoints"));
  peer.join();
  CHECK(reports == 1);
  CHECK_FALSE(peer_failed_when_reported);
  CHECK(peer_failed);
  CHECK_FALSE(peer_error.empty());
  // Well within the collective timeout: the closed connections end it.
  CHECK(std::chrono::steady_clock::now() - t0 < 30s);
}

TEST_CASE("advancing stale cache entries through the newly frozen layers equals recomputing from the input",
          "[autocache]") {
  const ModelConfig mc = tiny_vit();
  Model model(mc, 11);
  exec::Optimizer opt(sgd());
  const int sublayers = 2 * mc.num_hidden_layers + 2, N = 10;
  at::manual_seed(4);
  const at::Tensor x = at::randn({N, 1, 8, 8});
  const at::Tensor y = at::randint(0, mc.num_labels, {N}, at::kLong);
  at::Tensor shape_probe;
  {
    c10::NoGradGuard g;
    shape_probe = model.forward({0, 1}, x.narrow(0, 0, 1));
  }
  const auto path = std::filesystem::temp_directory_path() / ("ep-advance-" + std::to_string(getpid()) + ".cache");
  ActivationCache cache(path.string(), N, shape_probe.sizes().slice(1).vec(), true);
  std::vector<std::int64_t> all;
  for (int i = 0; i < N; ++i) all.push_back(i);
  {  // entries at depth 1, as an epoch with one frozen layer wrote them
    c10::NoGradGuard g;
    cache.write(all, model.forward(ModelSpec::frozen_prefix(1), x), 1);
  }
  // The boundary moves to 3 frozen layers: CR (depth 1), FZ through layers 1..2, CW (depth 3).
  const Partition p = partition(3, {}, sublayers);
  Pipeline pipe(model, opt, {{at::kCPU}, false});
  pipe.configure(p, 1, 1);
  pipe.set_cache(&cache);
  ScheduleOptions o;
  o.kind = ScheduleKind::GPipe;
  o.K = 1;
  o.M = 2;
  o.optimizer_step = false;
  o.frozen_input = FrozenInput::Advance;
  const Schedule s = build_schedule(o);
  check_schedule(s);
  (void)pipe.run(testing::program_of(s, Checkpointing::Never, /*cache_valid_layers=*/1), batches(x, y, 0, N, 2), N, 0);
  at::Tensor expected;
  {
    c10::NoGradGuard g;
    expected = model.forward(ModelSpec::frozen_prefix(3), x);
  }
  const at::Tensor advanced = cache.read(all, 3, at::kCPU);
  CHECK(at::allclose(advanced, expected, 1e-6, 1e-6));
  // Entries now hold depth 3: a read at the old depth is refused.
  CHECK_THROWS_WITH(cache.read({0}, 1, at::kCPU), Catch::Contains("sample 0"));
  cache.remove();
}

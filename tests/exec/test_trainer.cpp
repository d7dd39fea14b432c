// Whole training runs on tiny synthetic configs: deterministic, learning,
// freezing per the plan, and refusing what one process cannot run.
#include "tests/exec/pch.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/exec/support.hpp"
#include "tests/temp_dir.hpp"
#include "exec/cache.hpp"
#include "exec/job.hpp"
#include "exec/profiler.hpp"
#include "exec/progress.hpp"
#include "exec/torch_compat.hpp"
#include "exec/trainer.hpp"
#include "planner/cost_model.hpp"
#include "planner/freeze.hpp"
#include "planner/partition.hpp"
#include "planner/run_plan.hpp"
#include "planner/validation.hpp"
#include "traces/trace.hpp"

namespace {

using namespace ep;

using exec::testing::kTiny;

Config tiny(const Overrides& o = {}) { return parse_config(kTiny, "tiny.toml", o); }

}  // namespace

TEST_CASE("the same config and seed give the same loss sequence twice") {
  for (const char* schedule : {"\"gpipe\"", "\"1f1b\"", "\"looping_df\""}) {
    INFO(schedule);
    const Config c = tiny({std::string("planner.schedule=") + schedule,
                           schedule[1] == 'l' ? "planner.virtual_stages=2" : "planner.virtual_stages=1"});
    const exec::TrainResult a = exec::train(c, {});
    const exec::TrainResult b = exec::train(c, {});
    REQUIRE(a.iteration_losses.size() == 45);
    CHECK(a.iteration_losses == b.iteration_losses);
    CHECK(a.epochs.back().loss < a.epochs.front().loss);  // it learns
  }
}

TEST_CASE("queuing each iteration before reading the last one's results changes nothing the run records") {
  // Checkpoints every iteration make the host read each iteration before it
  // queues the next; without them it runs one ahead. Same losses, same
  // gradient norms (so the same freeze decisions).
  const auto dir = std::filesystem::temp_directory_path() / ("ep_ahead_" + std::to_string(::getpid()));
  exec::TrainOptions o;
  o.out_dir = dir.string();
  const exec::TrainResult ahead = exec::train(tiny(), {});
  const exec::TrainResult in_step = exec::train(tiny({"exec.checkpoint_every=1"}), o);
  std::filesystem::remove_all(dir);
  REQUIRE(ahead.iteration_losses.size() == 45);
  CHECK(ahead.iteration_losses == in_step.iteration_losses);
  CHECK(ahead.grad_norms == in_step.grad_norms);
  REQUIRE(ahead.epochs.size() == in_step.epochs.size());
  for (std::size_t e = 0; e < ahead.epochs.size(); ++e) CHECK(ahead.epochs[e].frozen_layers == in_step.epochs[e].frozen_layers);
}

// The run's start runs the first plan's iterations on the epoch's first
// batch and updates nothing: a run resumed mid-epoch starts again there and
// must record exactly the uninterrupted run's losses. The start is in no
// epoch, and the run's time holds it.
TEST_CASE("the run's start is apart from the epochs and updates nothing: a resumed run starts again, same losses") {
  const auto dir = std::filesystem::temp_directory_path() / ("ep_start_" + std::to_string(::getpid()));
  std::vector<std::string> lines;
  exec::TrainOptions o;
  o.out_dir = dir.string();
  o.log = [&](const std::string& l) { lines.push_back(l); };
  const Config c = tiny({"exec.checkpoint_every=4", "exec.checkpoint_keep=100"});
  const exec::TrainResult whole = exec::train(c, o);
  REQUIRE(whole.iteration_losses.size() == 45);
  const auto starts = [&] {
    return std::count_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("start: ", 0) == 0; });
  };
  CHECK(starts() == 1);
  CHECK_THAT(lines.front(), Catch::StartsWith("start: "));  // before epoch 1's line
  CHECK(whole.start_s > 0);
  double epochs = 0;
  for (const auto& e : whole.epochs) epochs += e.epoch_s;
  CHECK(whole.total_s == Approx(whole.start_s + epochs));
  const trace::RunSummary summary = trace::read_summary_json((dir / "summary.json").string());
  CHECK(summary.modes.front().start_s == whole.start_s);
  const trace::Trace t = trace::read_chrome_trace((dir / "trace.json").string());
  CHECK(std::stod(t.metadata.at(trace::kStartKey)) == Approx(whole.start_s).epsilon(1e-3));
  CHECK(std::count_if(t.events.begin(), t.events.end(), [](const trace::Event& e) {
          return e.category == "transition" && e.name == trace::kStartEventName;
        }) == 1);
  // Step 23 is mid-epoch 2 (15 iterations per epoch, checkpoints every 4
  // of an epoch and at its end): the resumed run starts there.
  lines.clear();
  exec::TrainOptions r = o;
  r.out_dir = (dir / "resumed").string();
  r.resume = (dir / "checkpoints" / "step-0000000023").string();
  REQUIRE(std::filesystem::exists(r.resume));
  const exec::TrainResult resumed = exec::train(c, r);
  CHECK(starts() == 1);
  CHECK(resumed.iteration_losses == whole.iteration_losses);
  // Its time holds both processes' starts and every epoch (epoch 2 in two parts).
  double resumed_epochs = 0;
  for (const auto& e : resumed.epochs) resumed_epochs += e.epoch_s;
  CHECK(resumed.total_s == Approx(whole.start_s + resumed.start_s + resumed_epochs));
  std::filesystem::remove_all(dir);
}

// data.augment draws from (seed, epoch, sample): a resumed run repeats the
// uninterrupted one's draws, so its losses. Where the same run caches
// without augmentation, AutoCache stays off with it, and the log says so.
TEST_CASE("augmented training: its own losses, the same again on resume, and never a cache") {
  ep::test::TempDir dir("augment");
  std::vector<std::string> lines;
  exec::TrainOptions o;
  o.out_dir = dir.file("run");
  o.log = [&](const std::string& l) { lines.push_back(l); };
  const Overrides alpha = {"planner.freeze_policy=\"alpha\"", "exec.checkpoint_every=4", "exec.checkpoint_keep=100"};
  Overrides cached = alpha, augmented = alpha;
  cached.push_back("planner.cache=\"on\"");
  augmented.push_back("planner.cache=\"auto\"");
  augmented.push_back("data.augment=[\"hflip\", \"crop\"]");
  const exec::TrainResult plain = exec::train(tiny(cached), {});
  REQUIRE(std::any_of(plain.epochs.begin(), plain.epochs.end(), [](const auto& e) { return e.cache; }));
  const exec::TrainResult whole = exec::train(tiny(augmented), o);
  REQUIRE(whole.iteration_losses.size() == 45);
  CHECK(whole.iteration_losses != plain.iteration_losses);
  CHECK(whole.iteration_losses.front() != plain.iteration_losses.front());  // epoch 1's first batch is transformed too
  for (const auto& e : whole.epochs) CHECK_FALSE(e.cache);
  CHECK(std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
          return l.rfind("augmentation: hflip, crop (crop pads 1x1)", 0) == 0 && l.find("no activation cache") != std::string::npos;
        }) == 1);
  exec::TrainOptions r = o;
  r.out_dir = dir.file("resumed");
  r.resume = dir.file("run/checkpoints/step-0000000023");  // mid-epoch 2
  REQUIRE(std::filesystem::exists(r.resume));
  CHECK(exec::train(tiny(augmented), r).iteration_losses == whole.iteration_losses);
}

TEST_CASE("training freezes per the gradient-norm policy, and the simulator can replay the recorded norms") {
  const auto dir = std::filesystem::temp_directory_path() / ("ep_train_" + std::to_string(::getpid()));
  const Config c = tiny();
  exec::TrainOptions o;
  o.out_dir = dir.string();
  const exec::TrainResult r = exec::train(c, o);
  REQUIRE(r.grad_norms.size() == 2);  // freeze steps after epochs 1 and 2
  // Eq. 1 decides from the measured norms: replaying them plans the same frozen counts.
  const GradNormTrace recorded = load_grad_norm_trace((dir / "grad_norms.csv").string(), 4);
  CHECK(recorded.steps == r.grad_norms);
  const Config replay = tiny({"planner.freeze_policy=\"replay\"",
                              "planner.replay_grad_norms_file=\"" + (dir / "grad_norms.csv").string() + "\""});
  const FreezeTimeline t = freeze_timeline(replay, 2);
  for (int e = 0; e < 3; ++e) CHECK(t.frozen[e] == r.epochs[e].frozen_layers);
  CHECK(r.epochs.back().frozen_layers > 0);
  // The trace and metrics read back with the shared readers.
  const trace::Trace tr = trace::read_chrome_trace((dir / "trace.json").string());
  CHECK(tr.source == "exec");
  CHECK(std::any_of(tr.events.begin(), tr.events.end(), [](const trace::Event& e) { return e.category == "transition"; }));
  CHECK((trace::read_epoch_csv((dir / "epochs.csv").string()) == r.epochs));
  std::filesystem::remove_all(dir);
}

// Decision 0037: the per-layer policy freezes the layers of least measured
// norm; a run resumed after its frozen set changed repeats its losses.
TEST_CASE("per-layer freezing freezes the layers of least measured gradient norm, and resumes to the same losses") {
  ep::test::TempDir dir("per_layer");
  exec::TrainOptions o;
  o.out_dir = dir.file("run");
  const Config c = tiny({"planner.freeze_policy=\"gradient_norm_per_layer\"", "exec.checkpoint_every=4",
                         "exec.checkpoint_keep=100"});
  const exec::TrainResult whole = exec::train(c, o);
  REQUIRE(whole.grad_norms.size() == 2);
  REQUIRE(whole.iteration_losses.size() == 45);
  // Each step's set is the policy's answer on the norms the run measured.
  const auto policy = make_per_layer_policy(4, c.planner);
  std::vector<int> set;
  for (int T = 1; T <= 2; ++T) {
    const int count = policy->next(T, static_cast<int>(set.size()), whole.grad_norms[T - 1]);
    set = policy->which(T, set, count, whole.grad_norms[T - 1]);
    const FrozenSet f = frozen_set_of(set);
    const trace::EpochMetrics& e = whole.epochs[T];
    CAPTURE(T, e.frozen_layers, e.frozen_inside);
    CHECK(e.frozen_layers == f.prefix);
    CHECK(e.frozen_inside == layer_list(f.inside));
  }
  CHECK(set.size() == 3);
  // Here the norms are least above the bottom layer: layers freeze inside.
  CHECK(std::any_of(whole.epochs.begin(), whole.epochs.end(), [](const auto& e) { return e.frozen_inside != "-"; }));
  CHECK((trace::read_epoch_csv(dir.file("run/epochs.csv")) == whole.epochs));
  // Resumed mid-epoch 3, after both steps: the steps' sets come from the checkpoint.
  exec::TrainOptions r = o;
  r.out_dir = dir.file("resumed");
  r.resume = dir.file("run/checkpoints/step-0000000038");
  REQUIRE(std::filesystem::exists(r.resume));
  const exec::TrainResult resumed = exec::train(c, r);
  CHECK(resumed.iteration_losses == whole.iteration_losses);
  CHECK(resumed.epochs.back().frozen_inside == whole.epochs.back().frozen_inside);
}

TEST_CASE("a run whose freeze policy reads no gradient norms computes none, and freezes as planned") {
  const Config c = tiny({"planner.freeze_policy=\"alpha\""});
  const exec::TrainResult r = exec::train(c, {});
  CHECK(r.grad_norms.empty());
  const FreezeTimeline planned = freeze_timeline(c, 2);
  for (int e = 0; e < 3; ++e) CHECK(r.epochs[e].frozen_layers == planned.frozen[e]);
  CHECK(r.epochs.back().frozen_layers > 0);
}

TEST_CASE("what one process cannot run is refused up front with the config's file:line") {
  // Data parallelism needs one process per device (train --nproc 4).
  CHECK_THROWS_WITH(exec::train(tiny({"planner.autodp=true"}), {}),
                    Catch::Contains("4 data-parallel replicas (at K = 1)") && Catch::Contains("--nproc 4"));
  CHECK_THROWS_WITH(exec::train(tiny({"planner.K=2"}), {}), Catch::Contains("--nproc 4"));
  exec::TrainOptions three;
  three.process.world_size = 3;
  three.process.local_world_size = 3;
  CHECK_THROWS_WITH(exec::train(tiny(), three), Catch::Contains("3 processes") && Catch::Contains("one per device"));
  // Without compression K only shrinks when too few active sublayers remain
  // (here 2 * min_active_layers = 4 >= K), so AutoDP never adds a replica.
  CHECK(exec::train(tiny({"planner.autodp=true", "planner.compression=\"none\"", "planner.min_active_layers=2",
                          "training.epochs=1"}), {})
            .epochs.size() == 1);
  std::string text = kTiny;
  const std::string needle = "name = \"synthetic-images\"";
  text.replace(text.find(needle), needle.size(), "name = \"imagenet\"");
  const Config bad = parse_config(text, "bad.toml");
  CHECK_THROWS_WITH(exec::train(bad, {}), Catch::StartsWith("bad.toml:31:") && Catch::Contains("key 'data.name'"));
  CHECK_THROWS_WITH(exec::train(bad, {}), Catch::Contains("fashion-mnist|synthetic-images|synthetic-tokens"));
  CHECK_THROWS_WITH(exec::train(tiny({"data.name=\"fashion-mnist\"", "data.path=\"/nonexistent/fmnist\"",
                                      "model.num_labels=10"}), {}),
                    Catch::Contains("/nonexistent/fmnist") && Catch::Contains("dataset-fashion-mnist"));
}

TEST_CASE("a BERT-style encoder trains on synthetic token sequences") {
  std::string text = kTiny;
  const auto vit_keys = text.find("image_size = 8");
  text.replace(vit_keys, text.find("num_labels") - vit_keys,
               "seq_length = 12\nvocab_size = 40\nmax_position_embeddings = 16\n");
  text.replace(text.find("\"vit\""), 5, "\"bert\"");
  const Config c = parse_config(text, "bert.toml", {"data.name=\"synthetic-tokens\"", "training.epochs=2"});
  const exec::TrainResult r = exec::train(c, {});
  CHECK(r.epochs.back().loss < r.epochs.front().loss);
  CHECK(r.final_accuracy > 0.25);
}

TEST_CASE("a freeze step that keeps the micro-batches finds the new plan's first batch assembled ahead") {
  // The last iteration of an epoch starts on the next epoch's first batch:
  // with M fixed and no cache, every freeze step keeps it, and
  // transitions.json says so.
  const auto dir = std::filesystem::temp_directory_path() / ("ep_ahead_batch_" + std::to_string(::getpid()));
  exec::TrainOptions o;
  o.out_dir = dir.string();
  const exec::TrainResult r =
      exec::train(tiny({"planner.chunk_search=false", "planner.M=2", "planner.cache=\"off\""}), o);
  const auto transitions = trace::read_transitions_json((dir / "transitions.json").string());
  std::filesystem::remove_all(dir);
  REQUIRE(!transitions.empty());
  for (const auto& t : transitions) {
    CHECK(t.first_batch_prefetched);
    CHECK(t.first_batch_wait_s >= 0);
  }
}

TEST_CASE("a new plan's warm-up is the device's extra time in its first iteration") {
  // Iterations of 10 on the device, the first 4 longer, each queued while
  // the one before runs: the meter takes when the device was done with
  // each (not when the host read it, after queuing the next).
  exec::WarmupMeter m;
  m.start();
  double warmup = -1, done = 0;
  std::vector<bool> finished;
  for (int i = 0; i < 6; ++i) {
    const double launch = i == 0 ? 0.0 : done - 8;
    done += 10 + (i == 0 ? 4 : 0);
    finished.push_back(m.add(launch, done, false, warmup));
  }
  CHECK(finished == std::vector<bool>{false, false, false, false, false, true});
  CHECK(warmup == Approx(4));
  CHECK_FALSE(m.on());
  // A host that launches after the device went idle: that idle time is the
  // host's, not the plan's (a later iteration counts from its launch); the
  // epoch ending early: the median of what there is.
  m.start();
  CHECK_FALSE(m.add(0, 12, false, warmup));
  CHECK_FALSE(m.add(20, 30, false, warmup));
  CHECK(m.add(25, 40, true, warmup));
  CHECK(warmup == Approx(2));
}

// The host line of an epoch: medians of the queuing times and of the
// intervals between results, the first result's time, and the cache's
// host times per call over the epoch (the difference of two snapshots).
TEST_CASE("an epoch's host line gives medians per iteration and the cache's times per call") {
  exec::HostPace h;
  h.queue_s = {0.009, 0.003, 0.004, 0.003, 0.005};
  h.done_s = {0.020, 0.037, 0.054, 0.072, 0.089};  // intervals 17, 17, 18, 17 ms
  exec::ActivationCache::HostTimes before, now;
  before.reads = 3;
  before.read_copy_s = 1.0;
  now.reads = 8;
  now.read_copy_s = 1.0085;  // 5 reads, 1.7 ms each
  now.read_wait_s = 0.0005;
  before.writes = now.writes = 2;  // none this epoch
  now.flush_s = before.flush_s = 0.25;
  h.cache = exec::HostPace::since(before, now);
  CHECK(h.cache.reads == 5);
  CHECK(h.cache.writes == 0);
  const std::string line = exec::format_host_pace(h);
  CHECK_THAT(line, Catch::Contains("5 iterations, each queued in 4.00 ms"));
  CHECK_THAT(line, Catch::Contains("results read every 17.00 ms"));
  CHECK_THAT(line, Catch::Contains("the first's at 20.00 ms"));
  CHECK_THAT(line, Catch::Contains("5 reads, each 1.70 ms copying rows after 0.10 ms waiting"));
  CHECK_THAT(line, !Catch::Contains("writes"));
  CHECK_THAT(line, Catch::Contains("end-of-epoch flush 0.00 ms"));
  // Writes alone; no cache at all.
  now.reads = before.reads;
  now.writes = 6;
  now.store_copy_s = 0.0208;  // 4 writes, 5.2 ms each
  now.store_device_s = 0.004;
  now.flush_s = 0.2541;
  h.cache = exec::HostPace::since(before, now);
  CHECK_THAT(exec::format_host_pace(h),
             Catch::Contains("cache: 4 writes, each held 0.00 ms for a queue place, stored in 5.20 ms after 1.00 ms "
                             "bringing them off the device; end-of-epoch flush 4.10 ms"));
  h.cache = {};
  CHECK_THAT(exec::format_host_pace(h), !Catch::Contains("cache"));
  // Pinned blocks: named where the build counts them, absent where not.
  CHECK_THAT(exec::format_host_pace(h), !Catch::Contains("pinned"));
  h.pinned = exec::PinnedAllocs{2, 0.0415, 128.0 * (1 << 20) + 1024};
  CHECK_THAT(exec::format_host_pace(h),
             Catch::EndsWith("; pinned memory: 2 new blocks (128.0 MB), 41.50 ms making them"));
  h.pinned = exec::PinnedAllocs{1, 0.02, 4 << 20};
  CHECK_THAT(exec::format_host_pace(h), Catch::EndsWith("; pinned memory: 1 new block (4.0 MB), 20.00 ms making them"));
}

TEST_CASE("an epoch's host pace holds what the cache counted between its begin and its end") {
  ep::test::TempDir tmp;
  exec::ActivationCache cache(tmp.file("c"), 4, {8}, true, std::chrono::milliseconds(0));
  cache.write({0, 1}, at::ones({2, 8}), 0);  // before the epoch: not its part
  exec::HostPace pace;
  pace.begin(&cache, /*gpu=*/false);
  cache.write({2, 3}, at::ones({2, 8}), 0);
  (void)cache.read({0, 3}, 0, at::kCPU);
  (void)cache.read({1}, 0, at::kCPU);
  pace.end(&cache);
  CHECK(pace.cache.writes == 1);
  CHECK(pace.cache.reads == 2);
  CHECK_FALSE(pace.pinned.has_value());  // not a GPU epoch
  exec::HostPace none;  // no cache: nothing counted
  none.begin(nullptr, false);
  none.end(nullptr);
  CHECK(none.cache.reads == 0);
  CHECK(none.cache.writes == 0);
}

TEST_CASE("pinned host blocks are counted only where the build can count them") {
  const std::optional<exec::PinnedAllocs> now = exec::pinned_allocs_now();
#if defined(ELASTICPIPE_CUDA) && EP_TORCH_2_8
  REQUIRE(now.has_value());
  CHECK(now->blocks >= 0);
  CHECK(now->alloc_s >= 0);
#else
  CHECK_FALSE(now.has_value());
#endif
  // An interval is counted only from a start that was.
  CHECK_FALSE(exec::pinned_allocs_since(std::nullopt).has_value());
  const std::optional<exec::PinnedAllocs> since = exec::pinned_allocs_since(exec::PinnedAllocs{});
  CHECK(since.has_value() == now.has_value());
  if (since) CHECK(since->blocks >= now->blocks);  // everything made since a start of none
  CHECK(exec::format_pinned({0, 0}) == "pinned memory: 0 new blocks, 0.00 ms making them");
}

TEST_CASE("a traced iteration's bubble is the share of its span the devices compute nothing") {
  const auto rec = [](const char* action, int device, double start, double end) {
    return exec::ActionRecord{parse_action(action), device, start, end};
  };
  // One device: a frozen forward, the pipeline's F and B, the optimizer, back
  // to back, then a cache read before a gap: the frozen forward and the
  // optimizer are compute (they once made a lone device report a bubble).
  exec::IterationResult one;
  one.records = {rec("0FZ0", 0, 0, 2), rec("0CW0", 0, 2, 2), rec("0F0", 0, 2, 3), rec("0B0", 0, 3, 5),
                 rec("0OPT", 0, 5, 6)};
  exec::TracedMeasures m;
  m.add(one, 1);
  CHECK(m.bubble == Approx(0.0).margin(1e-12));
  CHECK(m.compute_s == Approx(6));
  one.records.push_back(rec("0CR1", 0, 6, 7));
  one.records.push_back(rec("0F1", 0, 8, 9));  // waited 1 after the read
  exec::TracedMeasures gap;
  gap.add(one, 1);
  CHECK(gap.bubble == Approx(1 - 7.0 / 9));
  // Two stages, one micro-batch: each device computes 3 of the span of 6.
  exec::IterationResult two;
  two.records = {rec("0F0", 0, 0, 1), rec("1F0", 1, 1, 2), rec("1B0", 1, 2, 4), rec("0B0", 0, 4, 6)};
  exec::TracedMeasures pipe;
  pipe.add(two, 2);
  CHECK(pipe.bubble == Approx(0.5));
  CHECK(pipe.compute_s == Approx(3));
}

TEST_CASE("the batch loader assembles the requested micro-batches as make_batch does, one request at a time") {
  using namespace ep::exec;
  const Dataset d = synthetic_images(40, 1, 8, 4, 5, true);
  BatchLoader loader(d);
  const std::vector<std::vector<std::int64_t>> mbs{{3, 1, -1}, {7, 39}}, other{{0, 2}, {5, -1}};
  const auto same_as_make_batch = [&](const std::vector<MicroBatch>& got, const std::vector<std::vector<std::int64_t>>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      const MicroBatch m = make_batch(d, want[i]);
      CHECK(at::equal(got[i].input, m.input));
      CHECK(at::equal(got[i].labels, m.labels));
      CHECK(at::equal(got[i].weights, m.weights));
      CHECK(got[i].indices == m.indices);
    }
  };
  // Nothing requested: assembled on the spot.
  same_as_make_batch(loader.take({other, at::kCPU, at::kCPU, true}), other);
  CHECK_FALSE(loader.last_take().prefetched);
  loader.request({mbs, at::kCPU, at::kCPU, true});
  CHECK_THROWS_WITH(loader.request({mbs, at::kCPU, at::kCPU, true}), Catch::Contains("already pending"));
  same_as_make_batch(loader.take({mbs, at::kCPU, at::kCPU, true}), mbs);
  CHECK(loader.last_take().prefetched);
  CHECK(loader.last_take().wait_s >= 0);
  // A guess the plan proved wrong (other samples, or the cache now standing
  // in for the stem input) is dropped: the batch taken is the one asked for.
  loader.request({mbs, at::kCPU, at::kCPU, true});
  same_as_make_batch(loader.take({other, at::kCPU, at::kCPU, true}), other);
  CHECK_FALSE(loader.last_take().prefetched);
  loader.request({mbs, at::kCPU, at::kCPU, true});
  const std::vector<MicroBatch> cached = loader.take({mbs, at::kCPU, at::kCPU, false});
  CHECK_FALSE(loader.last_take().prefetched);
  CHECK_FALSE(cached[0].input.defined());
  CHECK(at::equal(cached[1].labels, make_batch(d, mbs[1]).labels));
  CHECK(at::equal(cached[0].weights, make_batch(d, mbs[0]).weights));
}

// Where the plan reads the cache ahead (on GPUs), the loader reads the rows
// with the batch, off the stage worker; rows not all there are left to the
// CacheRead, which waits for them or fails as it should.
TEST_CASE("the batch loader reads the cache's rows with the batch where all are there") {
  using namespace ep::exec;
  ep::test::TempDir tmp;
  const Dataset d = synthetic_images(40, 1, 8, 4, 5, true);
  ActivationCache cache(tmp.file("c"), 40, {2, 3}, true, std::chrono::milliseconds(0));
  at::manual_seed(2);
  const at::Tensor rows = at::randn({3, 2, 3});
  cache.write({3, 1, 7}, rows, 2);
  BatchLoader loader(d);
  const std::vector<std::vector<std::int64_t>> mbs{{3, 1, -1}, {7, 39}};
  BatchLoader::Request r{mbs, at::kCPU, at::kCPU, false, &cache, 2};
  loader.request(r);
  const std::vector<MicroBatch> got = loader.take(r);
  CHECK(loader.last_take().prefetched);
  REQUIRE(got[0].cached.defined());
  CHECK(got[0].cached_depth == 2);
  CHECK(at::equal(got[0].cached, cache.read({3, 1, -1}, 2, at::kCPU)));
  CHECK_FALSE(got[0].input.defined());  // the cache stands in for the stem
  CHECK_FALSE(got[1].cached.defined());  // 39 not written: left to the CacheRead
  CHECK(got[1].cached_depth == -1);
  // Another depth is another request: a guess at the old one is dropped.
  loader.request(r);
  BatchLoader::Request deeper = r;
  deeper.cache_depth = 3;
  const std::vector<MicroBatch> none = loader.take(deeper);
  CHECK_FALSE(loader.last_take().prefetched);
  CHECK_FALSE(none[0].cached.defined());
  // Without a cache nothing is read.
  BatchLoader::Request plain{mbs, at::kCPU, at::kCPU, false};
  CHECK_FALSE(loader.take(plain)[0].cached.defined());
  loader.request(r);
  loader.settle();  // done, and still the pending request
  CHECK(loader.take(r)[0].cached.defined());
  CHECK(loader.last_take().prefetched);
}

TEST_CASE("a node of more GPUs than this process sees is refused naming cluster.gpus_per_node") {
  using namespace ep::exec;
  const Config c = parse_config(testing::kTiny, "tiny.toml", {"exec.device=\"cuda\""});  // 4 GPUs per node
  CHECK_NOTHROW(check_gpus_visible(c, 4));
  CHECK_NOTHROW(check_gpus_visible(c, 8));
  CHECK_THROWS_WITH(check_gpus_visible(c, 1), Catch::StartsWith("tiny.toml:") && Catch::Contains("cluster.gpus_per_node") &&
                                                 Catch::Contains("at most the 1 GPU(s) this process sees") &&
                                                 Catch::Contains("found 4"));
  CHECK_NOTHROW(check_gpus_visible(parse_config(testing::kTiny, "tiny.toml"), 1));  // CPU: nothing to check
}

TEST_CASE("training with AutoCache runs its model work on the worker: no OpenMP threads are left to the caller's thread") {
  // The cache's probe and entry shape run torch operators. On the calling
  // thread with more than one intra-op thread they would start an OpenMP
  // team there, which outlives the run (its threads belong to the caller)
  // and, beside the workers' teams, puts libgomp past one thread per core,
  // where every worker's parallel region waits for its team to wake.
  const auto threads_now = [] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& t : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
  };
  // Once the threads a run leaves exiting (its batch loader's, say) are
  // gone: the count unchanged over 200 ms, 5 s at most.
  const auto settled_threads = [&] {
    std::size_t n = threads_now();
    for (int stable = 0, i = 0; stable < 10 && i < 250; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const std::size_t m = threads_now();
      stable = m == n ? stable + 1 : 0;
      n = m;
    }
    return n;
  };
  const Overrides one_worker = {"cluster.gpus_per_node=1",     "planner.K=1",        "exec.threads_per_worker=2",
                                "planner.freeze_policy=\"alpha\"", "planner.compression=\"none\""};
  const auto with_cache = [&](const char* mode) {
    Overrides o = one_worker;
    o.push_back(std::string("planner.cache=") + mode);
    return tiny(o);
  };
  (void)exec::train(with_cache("\"off\""), {});  // whatever starts once per process starts here
  const std::size_t before = settled_threads();
  const exec::TrainResult on = exec::train(with_cache("\"on\""), {});  // the entry shape, the fills
  REQUIRE(std::any_of(on.epochs.begin(), on.epochs.end(), [](const auto& e) { return e.cache; }));
  CHECK(settled_threads() == before);
  (void)exec::train(with_cache("\"auto\""), {});  // the probe at every freeze step
  CHECK(settled_threads() == before);
}

TEST_CASE("the node's cache file is made while the plan before the cache trains, and the step that turns it on takes it") {
  ep::test::TempDir dir("cache_ahead");
  const auto files = [&] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir.path())) ++n;
    return n;
  };
  for (const char* policy : {"\"on\"", "\"off\""}) {
    INFO(policy);
    const Overrides o = {"cluster.gpus_per_node=1", "planner.K=1", "planner.freeze_policy=\"alpha\"",
                         "planner.compression=\"none\"", std::string("planner.cache=") + policy,
                         "exec.cache_memory_dir=\"" + dir.path() + "\""};
    const Config c = tiny(o);
    const RunPlan plans = plan_run(c, AnalyticCostModel(c.cluster, c.training));
    REQUIRE(plans.plans.size() > 1);
    const bool on = std::string(policy) == "\"on\"";
    CHECK(plans.plans.front().cache_file_ahead.has_value() == on);  // the planner's decision, carried out
    std::vector<std::string> lines;
    std::size_t files_in_epoch_1 = 0;
    exec::TrainOptions opt;
    opt.log = [&](const std::string& line) {
      lines.push_back(line);
      if (line.rfind("epoch 1/", 0) == 0) files_in_epoch_1 = files();
    };
    const exec::TrainResult r = exec::train(c, opt);
    CHECK(std::any_of(r.epochs.begin(), r.epochs.end(), [](const auto& e) { return e.cache; }) == on);
    const auto first_transition = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
      return l.rfind("transition frozen 0->", 0) == 0;
    });
    REQUIRE(first_transition != lines.end());
    CHECK((first_transition->find("made ahead in") != std::string::npos) == on);
    if (!on) CHECK(files_in_epoch_1 == 0);  // nothing made for a cache that cannot come
    CHECK(files() == 0);                    // and nothing left
  }
}

// validate's measurement: each plan's iteration and the host's queuing of
// it, the latter a part of the former (on a CPU nearly all of it: the
// pipeline's launch runs the work there).
TEST_CASE("validate's measured plans give each iteration's queuing on the host, within the iteration") {
  const Config c = tiny();
  const AnalyticCostModel cost(c.cluster, c.training);
  const PlanContext ctx(c, cost, 2);
  std::vector<ValidationPlan> plans = validation_plans(ctx);
  REQUIRE(plans.size() >= 2);
  plans.resize(2);
  const std::vector<exec::MeasuredIterations> m = exec::measure_iterations(c, plans, 2);
  REQUIRE(m.size() == 2);
  for (const exec::MeasuredIterations& p : m) {
    CHECK(p.seconds > 0);
    CHECK(p.queue_s > 0);
    CHECK(p.queue_s <= p.seconds);
  }
}

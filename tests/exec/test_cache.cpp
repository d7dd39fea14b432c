// The node-shared activation cache: round trips at several depths, the file
// layout cache.hpp documents, two processes sharing one file (fork), waiting
// for an entry another process publishes, and the errors: wrong depth,
// header mismatch, missing file.
#include "tests/exec/pch.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "exec/cache.hpp"
#include "exec/data.hpp"
#include "exec/job.hpp"
#include "exec/measure.hpp"
#include "exec/model.hpp"
#include "tests/exec/support.hpp"
#include "tests/temp_dir.hpp"

namespace {

using ep::exec::ActivationCache;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

using ep::test::TempDir;

// Runs `body` in a forked child that exits 0 on success, 1 on an exception
// (printed). _exit: the child must not run the parent's atexit handlers
// (Catch's report, ATen's teardown).
pid_t spawn(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      rc = 1;
    }
    ::_exit(rc);
  }
  REQUIRE(pid > 0);
  return pid;
}

int join(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// `rows` at `pick` stacked: the expected read of those rows.
at::Tensor rows_of(const at::Tensor& rows, const std::vector<std::int64_t>& pick) {
  return rows.index_select(0, at::tensor(pick, at::kLong));
}

}  // namespace

TEST_CASE("the cache gives back the rows written at each depth, and masked slots read zeros", "[cache]") {
  TempDir tmp;
  at::manual_seed(1);
  ActivationCache cache(tmp.file("c"), 10, {3, 5}, true, milliseconds(0));
  CHECK(cache.entry_bytes() == 60);
  CHECK(cache.file_bytes() == static_cast<std::int64_t>(fs::file_size(cache.path())));

  const std::vector<std::int64_t> idx{0, 3, 7, 9};
  const at::Tensor d1 = at::randn({4, 3, 5});
  cache.write(idx, d1, 1);
  const at::Tensor r = cache.read({7, -1, 0, 7}, 1, at::kCPU);
  CHECK(r.sizes().vec() == std::vector<std::int64_t>{4, 3, 5});
  CHECK(r.scalar_type() == at::kFloat);
  CHECK(at::equal(r[0], d1[2]));
  CHECK(at::equal(r[1], at::zeros({3, 5})));
  CHECK(at::equal(r[2], d1[0]));
  CHECK(at::equal(r[3], d1[2]));
  CHECK(cache.read({}, 1, at::kCPU).sizes().vec() == std::vector<std::int64_t>{0, 3, 5});

  // Advancing to a deeper prefix; a masked slot in a write is skipped. Any
  // float dtype and layout is stored as float32.
  const at::Tensor d3 = at::randn({5, 5, 3}, at::kDouble).transpose(1, 2);
  cache.write({9, -1, 0, 3, 7}, d3, 3);
  CHECK(at::equal(cache.read({0, 3, 7, 9}, 3, at::kCPU), rows_of(d3, {2, 3, 4, 0}).to(at::kFloat)));
  // A second instance of the same file sees the same entries.
  ActivationCache other(tmp.file("c"), 10, {3, 5}, false, milliseconds(0));
  CHECK(at::equal(other.read({9}, 3, at::kCPU)[0], d3[0].to(at::kFloat)));

  // Older depth than the cache holds: an error at once, for reads and writes.
  CHECK_THROWS_WITH((cache.read({3}, 1, at::kCPU)), Catch::Contains("sample 3 holds depth 3, expected 1"));
  CHECK_THROWS_WITH((cache.write({3}, at::zeros({1, 3, 5}), 2)),
                    Catch::Contains("sample 3 holds depth 3, refusing to write older depth 2"));
  // Never written, no wait allowed: the error names the sample and both depths.
  CHECK_THROWS_WITH((cache.read({0, 4}, 3, at::kCPU)), Catch::Contains("sample 4 holds depth -1 (empty), expected 3"));
  // Bad shapes and indices.
  CHECK_THROWS_WITH((cache.write({1, 2}, at::zeros({2, 5, 3}), 3)), Catch::Contains("expected floats [2, 3, 5]"));
  CHECK_THROWS_WITH((cache.write({1}, at::zeros({1, 3, 5}, at::kLong), 3)), Catch::Contains("expected floats"));
  CHECK_THROWS_WITH((cache.write({10}, at::zeros({1, 3, 5}), 3)), Catch::Contains("sample index 10 out of range"));
  CHECK_THROWS_WITH((cache.read({10}, 3, at::kCPU)), Catch::Contains("sample index 10 out of range"));

  // Creating again replaces the file: the new one is all empty, and an
  // instance still mapping the old one keeps reading what it held.
  ActivationCache fresh(tmp.file("c"), 10, {3, 5}, true, milliseconds(0));
  CHECK_THROWS_WITH((fresh.read({9}, 3, at::kCPU)), Catch::Contains("sample 9 holds depth -1 (empty)"));
  CHECK(at::equal(other.read({9}, 3, at::kCPU)[0], d3[0].to(at::kFloat)));
}

// A read ahead of its iteration (the batch loader's) must neither wait nor
// fail: it gives the rows only where every one is at the depth, and leaves
// the rest to that iteration's read.
TEST_CASE("a read ahead gives the rows where all are at the depth, else nothing, at once", "[cache]") {
  TempDir tmp;
  at::manual_seed(3);
  ActivationCache cache(tmp.file("c"), 10, {3, 5}, true, std::chrono::seconds(30));
  const at::Tensor d1 = at::randn({3, 3, 5});
  cache.write({2, 4, 6}, d1, 1);
  const at::Tensor got = cache.read_ahead({6, -1, 2}, 1, /*pinned=*/false);
  REQUIRE(got.defined());
  CHECK(at::equal(got, cache.read({6, -1, 2}, 1, at::kCPU)));
  CHECK(cache.host_times().reads == 2);  // counted as a read
  const auto t0 = Clock::now();
  CHECK_FALSE(cache.read_ahead({2, 5}, 1, false).defined());  // 5 not written: no 30 s wait
  CHECK(ms_since(t0) < 1000);
  cache.write({2}, at::zeros({1, 3, 5}), 2);
  CHECK_FALSE(cache.read_ahead({2, 4}, 1, false).defined());  // 2 holds a newer depth: no error
  CHECK_FALSE(cache.read_ahead({4, 10}, 1, false).defined());  // out of range: read() says so
  CHECK_FALSE(cache.read_ahead({4}, -1, false).defined());
  CHECK(cache.host_times().reads == 2);  // refusals copy nothing
  CHECK(cache.read_ahead({}, 1, false).sizes().vec() == std::vector<std::int64_t>{0, 3, 5});
  cache.remove();
  CHECK_FALSE(cache.read_ahead({4}, 1, false).defined());
}

TEST_CASE("batches of many rows, copied by several threads, land row for row, as a copy in order would", "[cache]") {
  // Random sizes around the 1 MiB a copy task takes, so most batches are
  // split over the intra-op threads; duplicates and masked slots included.
  TempDir tmp;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    const std::int64_t n = 64 + static_cast<std::int64_t>(rng() % 200), width = 256 + static_cast<std::int64_t>(rng() % 4000);
    ActivationCache cache(tmp.file("p"), n, {width}, true, milliseconds(0));
    at::manual_seed(trial);
    const int batch = 1 + static_cast<int>(rng() % 400);
    std::vector<std::int64_t> idx(batch);
    for (auto& i : idx) i = rng() % 5 == 0 ? -1 : static_cast<std::int64_t>(rng() % n);
    const at::Tensor v = at::randn({batch, width});
    cache.write(idx, v, 1);
    // Each written sample holds its last row in the batch.
    std::map<std::int64_t, int> last;
    for (int k = 0; k < batch; ++k)
      if (idx[k] >= 0) last[idx[k]] = k;
    std::vector<std::int64_t> back, expected;
    for (const auto& [i, k] : last) {
      back.push_back(i);
      expected.push_back(k);
    }
    back.push_back(-1);  // a masked slot reads zeros
    const at::Tensor r = cache.read(back, 1, at::kCPU);
    INFO("trial " << trial << ": " << batch << " rows of " << width << " floats");
    CHECK(at::equal(r.narrow(0, 0, static_cast<std::int64_t>(expected.size())), rows_of(v, expected)));
    CHECK(at::equal(r[r.size(0) - 1], at::zeros({width})));
    // A write refused for one sample changes none of the others.
    if (last.size() >= 2) {
      const std::int64_t a = last.begin()->first, b = std::next(last.begin())->first;
      cache.write({a}, at::zeros({1, width}), 2);
      CHECK_THROWS_WITH((cache.write({b, a}, at::ones({2, width}), 1)),
                        Catch::Contains("sample " + std::to_string(a) + " holds depth 2"));
      CHECK(at::equal(cache.read({b}, 1, at::kCPU)[0], v[last.at(b)]));
    }
  }
}

TEST_CASE("writes from several threads at once, each of its own samples, stored now or behind, all land", "[cache]") {
  TempDir tmp;
  constexpr int kThreads = 4, kPer = 50, kWidth = 3000;  // 600 KB a write
  ActivationCache cache(tmp.file("t"), kThreads * kPer, {kWidth}, true, milliseconds(0));
  at::manual_seed(12);
  const at::Tensor v = at::randn({kThreads * kPer, kWidth});
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {  // each thread's samples, interleaved with the others'
        std::vector<std::int64_t> idx;
        for (int k = round; k < kPer; k += 5) idx.push_back(k * kThreads + t);
        cache.write(idx, rows_of(v, idx), 1 + round % 2 + (round > 2 ? 1 : 0), /*behind=*/round % 2 == 0);
      }
    });
  for (auto& w : writers) w.join();
  cache.flush();
  std::vector<std::int64_t> all(kThreads * kPer);
  for (int i = 0; i < kThreads * kPer; ++i) all[i] = i;
  for (int depth = 1; depth <= 3; ++depth) {
    std::vector<std::int64_t> at_depth;
    for (const std::int64_t i : all)
      if (1 + (i / kThreads) % 5 % 2 + ((i / kThreads) % 5 > 2 ? 1 : 0) == depth) at_depth.push_back(i);
    CHECK(at::equal(cache.read(at_depth, depth, at::kCPU), rows_of(v, at_depth)));
  }
}

TEST_CASE("a write behind lands after it returns: a reader waits for its tags, and a later write is not overtaken",
          "[cache]") {
  TempDir tmp;
  constexpr int kN = 64, kWidth = 20000;  // 80 KB entries: a few ms a batch
  ActivationCache cache(tmp.file("b"), kN, {kWidth}, true, milliseconds(30000));
  at::manual_seed(13);
  std::vector<std::int64_t> all(kN);
  for (int i = 0; i < kN; ++i) all[i] = i;
  // More batches behind than the 4 held: write() waits for room, and every
  // batch lands in order (each sample's last depth wins).
  std::vector<at::Tensor> batches;
  for (int d = 1; d <= 6; ++d) {
    batches.push_back(at::randn({kN, kWidth}));
    cache.write(all, batches.back(), d, /*behind=*/true);
  }
  // No flush: the read waits for depth 6's tags.
  CHECK(at::equal(cache.read(all, 6, at::kCPU), batches.back()));
  // A write now after writes behind: stored after them, never overtaken.
  const at::Tensor b7 = at::randn({kN, kWidth}), b8 = at::randn({kN, kWidth});
  cache.write(all, b7, 7, /*behind=*/true);
  cache.write({0, 1}, b8.narrow(0, 0, 2), 8);
  cache.flush();
  CHECK(at::equal(cache.read({0, 1}, 8, at::kCPU), b8.narrow(0, 0, 2)));
  CHECK(at::equal(cache.read({2, 3}, 7, at::kCPU), b7.narrow(0, 2, 2)));
  // Refused before it is queued: nothing lands.
  CHECK_THROWS_WITH((cache.write({5, 0}, at::zeros({2, kWidth}), 7, /*behind=*/true)),
                    Catch::Contains("sample 0 holds depth 8"));
  cache.flush();
  CHECK(at::equal(cache.read({5}, 7, at::kCPU)[0], b7[5]));
  // Pending writes are stored before the cache unmaps: a second instance sees them.
  {
    ActivationCache writer(tmp.file("b"), kN, {kWidth}, false, milliseconds(0));
    writer.write({9}, b8.narrow(0, 9, 1), 9, /*behind=*/true);
  }
  CHECK(at::equal(cache.read({9}, 9, at::kCPU)[0], b8[9]));
}

// The host times a GPU run's epoch line reports: every call counted, a
// read's wait for an entry another thread writes later counted as waiting
// (not copying), a store's copy.
TEST_CASE("the cache counts its calls and where the host's time went", "[cache]") {
  TempDir tmp;
  constexpr int kN = 16, kWidth = 20000;
  ActivationCache cache(tmp.file("t"), kN, {kWidth}, true, milliseconds(30000));
  std::vector<std::int64_t> all(kN);
  for (int i = 0; i < kN; ++i) all[i] = i;
  const at::Tensor rows = at::randn({kN, kWidth});
  CHECK(cache.host_times().reads == 0);
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(60));
    cache.write(all, rows, 0);
  });
  CHECK(at::equal(cache.read(all, 0, at::kCPU), rows));  // waits for the late write
  late.join();
  ActivationCache::HostTimes t = cache.host_times();
  CHECK(t.reads == 1);
  CHECK(t.writes == 1);
  CHECK(t.read_wait_s >= 0.05);
  CHECK(t.read_copy_s > 0);
  CHECK(t.read_copy_s < t.read_wait_s);  // the copy of 1.3 MB is not the wait
  CHECK(t.store_copy_s > 0);
  CHECK(t.store_device_s == 0);  // rows from the CPU: no device copy to wait for
  for (int d = 1; d <= 3; ++d) cache.write(all, rows, d, /*behind=*/true);
  cache.flush();
  (void)cache.read({3, 5}, 3, at::kCPU);
  t = cache.host_times();
  CHECK(t.reads == 2);
  CHECK(t.writes == 4);
}

TEST_CASE("the cache file holds the layout cache.hpp documents", "[cache]") {
  TempDir tmp;
  at::manual_seed(2);
  const std::int64_t N = 600;  // tags: 4800 bytes, so the data starts on the third 4 KiB page
  ActivationCache cache(tmp.file("c"), N, {2, 3}, true);
  const at::Tensor v = at::randn({2, 2, 3});
  cache.write({5, 599}, v, 4);

  std::ifstream in(cache.path(), std::ios::binary);
  std::vector<char> f((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(static_cast<std::int64_t>(f.size()) == cache.file_bytes());
  const auto i64 = [&](std::size_t at) {
    std::int64_t x;
    std::memcpy(&x, f.data() + at, 8);
    return x;
  };
  const auto u32 = [&](std::size_t at) {
    std::uint32_t x;
    std::memcpy(&x, f.data() + at, 4);
    return x;
  };
  const std::int64_t page = ::sysconf(_SC_PAGESIZE);
  CHECK(std::string(f.data(), 8) == "EPCACHE1");
  CHECK(u32(8) == 1);   // version
  CHECK(u32(12) == 2);  // ndim
  CHECK(i64(16) == N);
  CHECK(i64(24) == 6);   // entry_numel
  CHECK(i64(32) == 64);  // entry_stride: 24 bytes rounded up to 64
  CHECK(i64(40) == 128);
  const std::int64_t data = i64(48);
  CHECK(data == (128 + 8 * N + page - 1) / page * page);
  CHECK(i64(56) == data + N * 64);
  CHECK(i64(64) == 2);
  CHECK(i64(72) == 3);
  CHECK(i64(80) == 0);
  // Tags: depth + 1, 0 for empty.
  CHECK(i64(128 + 8 * 5) == 5);
  CHECK(i64(128 + 8 * 599) == 5);
  CHECK(i64(128 + 8 * 6) == 0);
  // Entries: float32, row-major, at data + i * stride.
  std::vector<float> row(6);
  std::memcpy(row.data(), f.data() + data + 599 * 64, 24);
  CHECK(at::equal(at::tensor(row).view({2, 3}), v[1]));
}

TEST_CASE("two processes share the file: a reader waits for the writer's entries and gets exactly its values",
          "[cache]") {
  TempDir tmp;
  const std::string path = tmp.file("shared");
  at::manual_seed(3);
  ActivationCache parent(path, 16, {4, 8}, true, std::chrono::seconds(10));
  const std::vector<std::int64_t> idx{1, 4, 9, 10, 15};
  // Made before fork: the child runs no ATen kernel (write() of a contiguous
  // float CPU tensor only memcpy's), so the parent's thread pools do not matter.
  const at::Tensor d2 = at::randn({5, 4, 8});
  const at::Tensor d3 = at::randn({5, 4, 8});

  // The child opens its own instance, as another replica's process would.
  const pid_t writer = spawn([&] { ActivationCache(path, 16, {4, 8}, false).write(idx, d2, 2); });
  REQUIRE(join(writer) == 0);
  CHECK(at::equal(parent.read(idx, 2, at::kCPU), d2));
  CHECK(at::equal(parent.read({15, -1, 1}, 2, at::kCPU)[2], d2[0]));

  // The read starts before the child advances the entries to depth 3: the
  // parent sees depth 2 (below), waits, and gets the depth-3 values.
  const Clock::time_point t0 = Clock::now();
  const pid_t late = spawn([&] {
    ActivationCache child(path, 16, {4, 8}, false);
    std::this_thread::sleep_for(milliseconds(100));
    child.write(idx, d3, 3);
  });
  const at::Tensor got = parent.read({10, 1, 15, 4, 9}, 3, at::kCPU);
  const double waited = ms_since(t0);
  REQUIRE(join(late) == 0);
  CHECK(at::equal(got, rows_of(d3, {3, 0, 4, 1, 2})));
  CHECK(waited >= 90);
  // Tagged above the depth read: an error at once, not a wait.
  const Clock::time_point t2 = Clock::now();
  CHECK_THROWS_WITH((parent.read({4}, 2, at::kCPU)),
                    Catch::Contains("sample 4 holds depth 3, expected 2: depths only grow"));
  CHECK(ms_since(t2) < 1000);

  // An entry nobody writes: the read gives up after publish_wait, naming
  // the sample and both depths; entries that are there do not help.
  ActivationCache impatient(path, 16, {4, 8}, false, milliseconds(200));
  const Clock::time_point t1 = Clock::now();
  CHECK_THROWS_WITH((impatient.read({1, 3}, 3, at::kCPU)),
                    Catch::Contains("sample 3 holds depth -1 (empty), expected 3 after waiting 200 ms"));
  const double failed_after = ms_since(t1);
  CHECK(failed_after >= 200);
  CHECK(failed_after < 200 + 1000);
  // Present at an older depth and never advanced: the same, with the depth found.
  CHECK_THROWS_WITH((impatient.read({1}, 4, at::kCPU)), Catch::Contains("sample 1 holds depth 3, expected 4 after"));
}

TEST_CASE("opening a cache file checks it: missing, not a cache, or made for another dataset or shape", "[cache]") {
  TempDir tmp;
  const std::string path = tmp.file("c");
  CHECK_THROWS_WITH((ActivationCache(path, 10, {3, 5}, false)),
                    Catch::Contains(path) && Catch::Contains("cannot open: No such file or directory"));
  { ActivationCache(path, 10, {3, 5}, true); }
  CHECK(fs::exists(path));  // the destructor keeps the file
  CHECK_NOTHROW(ActivationCache(path, 10, {3, 5}, false));
  CHECK_THROWS_WITH((ActivationCache(path, 11, {3, 5}, false)),
                    Catch::Contains(path) && Catch::Contains("header field dataset_size is 10, expected 11"));
  CHECK_THROWS_WITH((ActivationCache(path, 10, {5, 3}, false)),
                    Catch::Contains(path) && Catch::Contains("header field entry_shape is [3, 5], expected [5, 3]"));
  CHECK_THROWS_WITH((ActivationCache(path, 10, {15}, false)),
                    Catch::Contains("header field entry_shape is [3, 5], expected [15]"));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const std::uint32_t v = 7;
    f.seekp(8);
    f.write(reinterpret_cast<const char*>(&v), 4);
  }
  CHECK_THROWS_WITH((ActivationCache(path, 10, {3, 5}, false)), Catch::Contains("header field version is 7, expected 1"));
  const std::string junk = tmp.file("junk");
  std::ofstream(junk) << std::string(4096, 'x');
  CHECK_THROWS_WITH((ActivationCache(junk, 10, {3, 5}, false)), Catch::Contains("header field magic is 'xxxxxxxx'"));
  std::ofstream(junk) << "short";
  CHECK_THROWS_WITH((ActivationCache(junk, 10, {3, 5}, false)), Catch::Contains("too short for the header"));
  // A file cut short after creation.
  { ActivationCache(path, 10, {3, 5}, true); }
  fs::resize_file(path, fs::file_size(path) - 64);
  CHECK_THROWS_WITH((ActivationCache(path, 10, {3, 5}, false)), Catch::Contains("truncated"));
  // Bad arguments and an uncreatable path.
  CHECK_THROWS_WITH((ActivationCache(path, 0, {3, 5}, true)), Catch::Contains("dataset size must be positive"));
  CHECK_THROWS_WITH((ActivationCache(path, 10, {}, true)), Catch::Contains("1 to 8 dimensions"));
  CHECK_THROWS_WITH((ActivationCache(path, 10, {3, 0}, true)), Catch::Contains("non-positive size"));
  CHECK_THROWS_WITH((ActivationCache(tmp.file("no/such/dir"), 10, {3}, true)),
                    Catch::Contains("cannot create: No such file or directory"));
}

TEST_CASE("entries larger than a page work, prefetch accepts the window, remove() deletes the file", "[cache]") {
  TempDir tmp;
  at::manual_seed(4);
  ActivationCache cache(tmp.file("big"), 5, {3, 1000}, true);  // 12000 bytes an entry
  CHECK(cache.entry_bytes() == 12000);
  CHECK(cache.file_bytes() == static_cast<std::int64_t>(fs::file_size(cache.path())));
  const at::Tensor v = at::randn({5, 3, 1000});
  cache.write({4, 2, 0, 3, 1}, v, 1);
  CHECK_NOTHROW(cache.prefetch({0, 1, 2, 3, 4, -1}));
  CHECK_NOTHROW(cache.prefetch({3, 1, 3}));
  CHECK_NOTHROW(cache.prefetch({}));
  CHECK_THROWS_WITH((cache.prefetch({5})), Catch::Contains("sample index 5 out of range"));
  CHECK(at::equal(cache.read({0, 1, 2, 3, 4}, 1, at::kCPU), rows_of(v, {2, 4, 1, 3, 0})));
  cache.remove();
  CHECK_FALSE(fs::exists(cache.path()));
  CHECK_THROWS_WITH((cache.read({0}, 1, at::kCPU)), Catch::Contains("used after remove()"));
  CHECK_THROWS_WITH((cache.remove()), Catch::Contains("cannot delete"));
}

TEST_CASE("AutoCache's probe keeps its batch and file from one frozen depth to the next, and removes the file after",
          "[cache]") {
  using namespace ep;
  using namespace ep::exec;
  TempDir tmp;
  const ModelConfig m = testing::tiny(ModelFamily::ViT);
  const Dataset d = synthetic_images(16, m.num_channels, m.image_size, m.num_labels, 3, true);
  Model model(m, 7);
  c10::NoGradGuard no_grad;
  const at::Tensor stem = model.forward({0, 1}, make_batch(d, first_samples(d, 8)).input);
  const std::string path = tmp.file("probe");
  {
    CacheProbe probe(d, 8, at::kCPU, false, path, stem.sizes().slice(1).vec());
    for (int frozen = 1; frozen < m.num_hidden_layers; ++frozen) {
      INFO("frozen " << frozen);
      std::vector<int> asked;
      const MeasuredCache got = probe.measure(model, frozen, [&](int sublayer) {
        asked.push_back(sublayer);
        return at::Device(at::kCPU);
      });
      // Each sublayer of the prefix was placed (once, or again where a run ends).
      const SublayerRange prefix = ModelSpec::frozen_prefix(frozen);
      for (int i = prefix.first; i < prefix.last; ++i) CHECK(std::count(asked.begin(), asked.end(), i) >= 1);
      CHECK(got.read_s > 0);
      CHECK(got.frozen_forward_s > 0);
      // The file holds the batch's frozen output at this depth.
      const at::Tensor want = model.forward(ModelSpec::frozen_prefix(frozen), make_batch(d, first_samples(d, 8)).input);
      ActivationCache file(path, 8, stem.sizes().slice(1).vec(), false);
      CHECK(at::allclose(file.read({0, 3, 7}, frozen, at::kCPU), rows_of(want, {0, 3, 7})));
    }
  }
  CHECK_FALSE(fs::exists(path));
}

// The platform's network against the cost model's formulas.
//
// Each TEST_CASE constructs at most one Simulator: SimGrid allows one
// engine per process, and ctest runs every TEST_CASE in its own process
// (catch_discover_tests). So no SECTIONs around a Simulator (Catch re-runs
// the test case body once per section), and run the binary by hand one
// test case at a time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <tuple>

#include "planner/error.hpp"
#include "sim/platform.hpp"
#include "support.hpp"

using namespace ep;
using ep::sim::Simulator;

namespace {
constexpr LinkSpec kPcie{10e9, 5e-6};
constexpr LinkSpec kIb{5e9, 3e-6};
}  // namespace

TEST_CASE("a point-to-point transfer costs latency + bytes / bandwidth", "[sim][network]") {
  Simulator sim(test::cluster(2, 2, kPcie, kIb));
  const double S = 64e6;
  // Inside a node: PCIe up, PCIe down.
  CHECK(sim.run_transfers({{0, 1, S}}) == Approx(kPcie.latency_s + S / kPcie.bandwidth_bytes_per_s).epsilon(1e-9));
  // Across nodes: PCIe, NIC, NIC, PCIe; both latencies, the slower bandwidth.
  CHECK(sim.run_transfers({{0, 3, S}}) ==
        Approx(kPcie.latency_s + kIb.latency_s + S / kIb.bandwidth_bytes_per_s).epsilon(1e-9));
  {  // Traced: one span on the destination GPU, one per link of the route.
    trace::Trace tr;
    const double t = sim.run_transfers({{0, 3, S}}, &tr, "move weights");
    std::vector<std::string> tracks;
    for (const auto& e : tr.events) {
      CHECK(e.end_s == t);
      CHECK(e.bytes == static_cast<std::int64_t>(S));
      const auto& k = tr.tracks.at(e.track);
      tracks.push_back(std::to_string(k.node) + ":" + k.name);
      CHECK(e.name == "move weights");
      CHECK(e.category == "transition");
    }
    CHECK(tracks == std::vector<std::string>{"0:pcie0.up", "-1:ib0.up", "-1:ib1.down", "1:pcie1.down", "1:gpu1 #1"});
  }
  // Zero bytes or the same GPU: free.
  CHECK(sim.run_transfers({{0, 1, 0}, {2, 2, S}}) == 0);
  {  // A pipeline hop in a schedule: the receiver waits for the transfer.
    ScheduleOptions o;
    o.K = 2;
    auto q = test::request(build_schedule(o), test::costs(unit_cost(0, 0, 1), S));
    const auto r = sim.run(q);
    const double hop = kPcie.latency_s + S / kPcie.bandwidth_bytes_per_s;
    CHECK(r.iteration_end_s.at(0) == Approx(2 * hop).epsilon(1e-9));  // activation, then gradient
    CHECK(r.p2p_s == Approx(hop).epsilon(1e-9));  // one receive per device; waiting for the sender is idle
  }
}

TEST_CASE("transfers sharing a link share its bandwidth", "[sim][network]") {
  Simulator sim(test::cluster(1, 4, kPcie));
  const double S = 100e6;
  const double alone = sim.run_transfers({{0, 1, S}});
  CHECK(sim.run_transfers({{0, 1, S}, {0, 2, S}}) / alone == Approx(2).epsilon(0.01));  // GPU 0's uplink
  CHECK(sim.run_transfers({{0, 2, S}, {1, 2, S}}) / alone == Approx(2).epsilon(0.01));  // GPU 2's downlink
  CHECK(sim.run_transfers({{0, 1, S}, {1, 0, S}}) == Approx(alone).epsilon(1e-9));      // split duplex
  CHECK(sim.run_transfers({{0, 1, S}, {2, 3, S}}) == Approx(alone).epsilon(1e-9));      // disjoint routes
}

TEST_CASE("a ring all-reduce costs 2(n-1)/n S/B + 2(n-1) latency", "[sim][network]") {
  Simulator sim(test::cluster(1, 8, kPcie));
  const double S = 80e6;  // divisible by every n: chunks are whole bytes
  for (const int n : {2, 4, 8}) {
    CAPTURE(n);
    ScheduleOptions o;  // one stage, one bucket, per replica
    o.buckets_per_stage = {1};
    o.optimizer_step = true;
    std::vector<int> first(n);
    std::iota(first.begin(), first.end(), 0);
    const auto r = sim.run(test::request(build_schedule(o), test::costs(unit_cost(0, 0, 1), 0, S), first));
    const double expected = 2.0 * (n - 1) / n * S / kPcie.bandwidth_bytes_per_s + 2.0 * (n - 1) * kPcie.latency_s;
    CHECK(r.iteration_end_s.at(0) == Approx(expected).epsilon(0.01));
    CHECK(r.allreduce_s == Approx(expected).epsilon(0.01));
  }
}

TEST_CASE("the platform scales to 32 nodes x 8 GPUs", "[sim][network]") {
  Simulator sim(test::cluster(32, 8, kPcie, kIb));
  const double S = 1e6;
  CHECK(sim.run_transfers({{0, 31 * 8 + 7, S}}) ==
        Approx(kPcie.latency_s + kIb.latency_s + S / kIb.bandwidth_bytes_per_s).epsilon(1e-9));
  CHECK(sim.run_transfers({{31 * 8, 31 * 8 + 1, S}}) ==
        Approx(kPcie.latency_s + S / kPcie.bandwidth_bytes_per_s).epsilon(1e-9));
}

TEST_CASE("a bad cluster or a second Simulator is an ep::Error", "[sim][errors]") {
  CHECK_THROWS_WITH(Simulator(test::cluster(1, 2, {0, 1e-6})),
                    Catch::Contains("intra_node.bandwidth_bytes_per_s must be positive"));
  CHECK_THROWS_WITH(Simulator(test::cluster(1, 2, kPcie, {1e9, -1})),
                    Catch::Contains("inter_node.latency_s must be >= 0"));
  // A rejected spec does not use up the process's one engine.
  Simulator first(test::cluster(1, 2, kPcie));
  CHECK_THROWS_AS(Simulator(test::cluster(1, 2, kPcie)), Error);
  CHECK_THROWS_WITH(Simulator(test::cluster(1, 2, kPcie)), Catch::Contains("one engine per process"));
}

TEST_CASE("cache IO crosses the host's memory link and the GPU's PCIe link, and the disk streamed through them",
          "[sim][network][cache]") {
  Simulator sim(test::cluster(1, 2, kPcie));  // host memory 10 GB/s, disk 1 GB/s
  const ClusterSpec& c = sim.cluster();
  const double S = 50e6;
  const double link = kPcie.latency_s / 2 + S / std::min(c.host.memory_bandwidth_bytes_per_s, kPcie.bandwidth_bytes_per_s);
  const double disk = kPcie.latency_s / 2 + S / c.host.disk_bandwidth_bytes_per_s;
  for (const auto input : {FrozenInput::CacheRead, FrozenInput::ForwardAndCacheWrite, FrozenInput::Advance})
    for (const auto tier : {CacheTier::HostMemory, CacheTier::Disk})
      for (const bool behind : {false, true}) {
        CAPTURE(static_cast<int>(input), static_cast<int>(tier), behind);
        ScheduleOptions o;
        o.frozen_input = input;
        IterationCosts costs;
        costs.duration = unit_cost(0, 0, 1);
        costs.bytes = [&](const Action& a) {
          return a.kind == ActionKind::CacheRead || a.kind == ActionKind::CacheWrite ? S : 0.0;
        };
        auto q = test::request(build_schedule(o), costs, {1});
        q.cache_tier = tier;
        q.cache_writes_behind = behind;
        // A write behind the device is not waited for: the device reads only.
        const int ios = (input == FrozenInput::CacheRead || input == FrozenInput::Advance) +
                        (input != FrozenInput::CacheRead && !behind);
        const double expected = ios * (tier == CacheTier::Disk ? disk : link);
        trace::Trace tr;
        const auto r = sim.run(q, &tr);
        CHECK(r.iteration_end_s.at(0) == Approx(expected).epsilon(1e-9).margin(1e-15));
        CHECK(r.cache_io_s == Approx(expected).epsilon(1e-9).margin(1e-15));
        // The disk's reads go up its link, its writes down.
        int reads = 0, writes = 0;
        for (const auto& e : tr.events) {
          reads += tr.tracks.at(e.track).name == "disk.up";
          writes += tr.tracks.at(e.track).name == "disk.down";
        }
        const bool reads_cache = input != FrozenInput::ForwardAndCacheWrite;
        CHECK(reads == (tier == CacheTier::Disk && reads_cache ? 1 : 0));
        CHECK(writes == (tier == CacheTier::Disk && input != FrozenInput::CacheRead ? 1 : 0));
      }
}

// A profile's cache copy is slower than the platform's links (pageable
// memory, the host's own copy): the simulated one takes the cost model's
// time alone, and GPUs at once still share the links.
TEST_CASE("cache IO runs at the cost model's rate for it alone, and GPUs at once still share the links",
          "[sim][network][cache]") {
  ClusterSpec c = test::cluster(1, 4, kPcie);  // PCIe 10 GB/s, disk 1 GB/s
  c.host.memory_bandwidth_bytes_per_s = 6e9;
  Simulator sim(c);
  const double S = 50e6, half = kPcie.latency_s / 2;
  const auto read = [&](double alone_s, CacheTier tier, std::vector<int> gpus) {
    ScheduleOptions o;
    o.frozen_input = FrozenInput::CacheRead;
    IterationCosts costs;
    costs.duration = [](const Action&) { return 0.0; };
    costs.alone = [=](const Action& a) { return a.kind == ActionKind::CacheRead ? alone_s : 0.0; };
    costs.bytes = [=](const Action& a) { return a.kind == ActionKind::CacheRead ? S : 0.0; };
    auto q = test::request(build_schedule(o), costs, std::move(gpus));
    q.cache_tier = tier;
    return sim.run(q).iteration_end_s.at(0);
  };
  // 2.5 GB/s alone; four GPUs share memory's 6 GB/s, 1.5 each.
  CHECK(read(S / 2.5e9, CacheTier::HostMemory, {1}) == Approx(half + S / 2.5e9).epsilon(1e-9));
  CHECK(read(S / 2.5e9, CacheTier::HostMemory, {0, 1}) == Approx(half + S / 2.5e9).epsilon(1e-9));
  CHECK(read(S / 2.5e9, CacheTier::HostMemory, {0, 1, 2, 3}) == Approx(half + S / 1.5e9).epsilon(1e-9));
  // Faster than the platform: its links bind (memory, 6 GB/s).
  CHECK(read(S / 50e9, CacheTier::HostMemory, {1}) == Approx(half + S / 6e9).epsilon(1e-9));
  // The disk tier: 0.4 GB/s alone, under the disk's 1 GB/s; three at once share the disk.
  CHECK(read(S / 0.4e9, CacheTier::Disk, {1}) == Approx(half + S / 0.4e9).epsilon(1e-9));
  CHECK(read(S / 0.4e9, CacheTier::Disk, {0, 1, 2}) == Approx(half + S / (1e9 / 3)).epsilon(1e-9));
  // Writes behind the device at their writer's time alone:
  // the queued ones share that rate, as one writer stores them in turn, so
  // M of them pace the iteration once the queue is full.
  const int M = 4, n = 8;
  ScheduleOptions o;
  o.M = M;
  o.frozen_input = FrozenInput::ForwardAndCacheWrite;
  IterationCosts costs;
  costs.duration = [](const Action&) { return 0.0; };
  costs.alone = [=](const Action& a) { return a.kind == ActionKind::CacheWrite ? S / 2.5e9 : 0.0; };
  costs.bytes = [=](const Action& a) { return a.kind == ActionKind::CacheWrite ? S : 0.0; };
  auto q = test::request(build_schedule(o), costs, {0});
  q.iterations = n;
  q.cache_writes_behind = true;
  const auto end = sim.run(q).iteration_end_s;
  CHECK(end[n - 1] - end[n - 2] == Approx(M * S / 2.5e9).epsilon(0.01));
}

// A DGX-like node: GPUs joined by NVLink, each on its own PCIe link to
// host memory, which they all share.
TEST_CASE("cache IO moves at the GPU's own host link, and GPUs reading at once share host memory",
          "[sim][network][cache]") {
  constexpr LinkSpec kNvlink{450e9, 3e-6};
  ClusterSpec c = test::cluster(1, 4, kNvlink);
  c.host.gpu_link_bandwidth_bytes_per_s = 25e9;
  c.host.memory_bandwidth_bytes_per_s = 60e9;
  Simulator sim(c);
  const double S = 50e6;
  ScheduleOptions o;
  o.frozen_input = FrozenInput::CacheRead;
  IterationCosts costs;
  costs.duration = unit_cost(0, 0, 1);
  costs.bytes = [&](const Action& a) { return a.kind == ActionKind::CacheRead ? S : 0.0; };
  // Alone: its link binds (25 GB/s, not NVLink's 450 nor memory's 60).
  trace::Trace tr;
  const auto alone = sim.run(test::request(build_schedule(o), costs, {1}), &tr);
  CHECK(alone.iteration_end_s.at(0) == Approx(kNvlink.latency_s / 2 + S / 25e9).epsilon(1e-9));
  std::vector<std::string> links;
  for (const auto& e : tr.events)
    if (tr.tracks.at(e.track).kind == trace::TrackKind::Link) links.push_back(tr.tracks.at(e.track).name);
  std::sort(links.begin(), links.end());
  CHECK(links == std::vector<std::string>{"host.up", "hostlink1.up", "pcie1.down"});
  // Two at once fit in memory's 60 GB/s; four share it, 15 GB/s each.
  CHECK(sim.run(test::request(build_schedule(o), costs, {0, 2})).iteration_end_s.at(0) ==
        Approx(kNvlink.latency_s / 2 + S / 25e9).epsilon(1e-9));
  CHECK(sim.run(test::request(build_schedule(o), costs, {0, 1, 2, 3})).iteration_end_s.at(0) ==
        Approx(kNvlink.latency_s / 2 + S / 15e9).epsilon(1e-9));
}

// Writes behind the device (as the executor stores a GPU's): hidden behind
// its compute while they keep up, pacing its iterations once
// kCacheWritesInFlight of them wait on the link or the disk.
TEST_CASE("cache writes behind the device hide behind compute, or pace it when the writer is slower",
          "[sim][network][cache]") {
  Simulator sim(test::cluster(1, 2, kPcie));  // host memory 10 GB/s, PCIe 10 GB/s, disk 1 GB/s
  const ClusterSpec& c = sim.cluster();
  const int M = 4, n = 8;
  const auto run = [&](double per_mb_s, double S, CacheTier tier, bool behind) {
    ScheduleOptions o;
    o.M = M;
    o.frozen_input = FrozenInput::ForwardAndCacheWrite;
    IterationCosts costs;
    costs.duration = [=](const Action& a) {
      return a.kind == ActionKind::Forward ? per_mb_s / 4 : a.kind == ActionKind::Backward ? per_mb_s / 2
             : a.kind == ActionKind::FrozenForward                                     ? per_mb_s / 4
                                                                                        : 0.0;
    };
    costs.bytes = [=](const Action& a) { return a.kind == ActionKind::CacheWrite ? S : 0.0; };
    auto q = test::request(build_schedule(o), costs, {0});
    q.iterations = n;
    q.cache_tier = tier;
    q.cache_writes_behind = behind;
    return sim.run(q);
  };
  const double bw = std::min(c.host.memory_bandwidth_bytes_per_s, kPcie.bandwidth_bytes_per_s);
  const double write = kPcie.latency_s / 2 + 5e6 / bw;  // 0.5 ms, against 6 ms of compute per micro-batch
  const auto now = run(6e-3, 5e6, CacheTier::HostMemory, false);
  const auto hidden = run(6e-3, 5e6, CacheTier::HostMemory, true);
  for (int i = 0; i < n; ++i) {
    CHECK(now.iteration_end_s[i] == Approx((i + 1) * M * (6e-3 + write)).epsilon(1e-9));
    CHECK(hidden.iteration_end_s[i] == Approx((i + 1) * M * 6e-3).epsilon(1e-9));
  }
  CHECK(hidden.cache_io_s == 0);
  // 0.35 ms of compute per micro-batch against 5 ms per write, on the link
  // (50 MB at 10 GB/s) or on the disk (5 MB at 1 GB/s): once the queue is
  // full, each iteration takes its writes' time.
  for (const auto& [S, tier, per_write] : {std::tuple{5e7, CacheTier::HostMemory, 5e7 / bw},
                                           std::tuple{5e6, CacheTier::Disk, 5e6 / c.host.disk_bandwidth_bytes_per_s}}) {
    CAPTURE(S, static_cast<int>(tier));
    const auto paced = run(0.35e-3, S, tier, true);
    const auto& end = paced.iteration_end_s;
    CHECK(end[n - 1] - end[n - 2] == Approx(M * per_write).epsilon(0.01));
    CHECK(end[n - 1] < n * M * per_write);  // the last writes land after it
    CHECK(paced.cache_io_s > 0.5 * M * per_write);
  }
}

// Reads ahead of the device (as the executor reads for a GPU): the next
// iteration's reads copied while the device computes, so only the first
// read waits; reads slower than the compute pace the iterations.
TEST_CASE("cache reads ahead of the device hide behind the previous iteration, or pace it when slower",
          "[sim][network][cache]") {
  Simulator sim(test::cluster(1, 2, kPcie));  // host memory 10 GB/s, PCIe 10 GB/s
  const ClusterSpec& c = sim.cluster();
  const int M = 4, n = 8;
  const auto run = [&](double per_mb_s, double S, bool ahead) {
    ScheduleOptions o;
    o.M = M;
    o.frozen_input = FrozenInput::CacheRead;
    IterationCosts costs;
    costs.duration = [=](const Action& a) {
      return a.kind == ActionKind::Forward ? per_mb_s / 3 : a.kind == ActionKind::Backward ? 2 * per_mb_s / 3 : 0.0;
    };
    costs.bytes = [=](const Action& a) { return a.kind == ActionKind::CacheRead ? S : 0.0; };
    auto q = test::request(build_schedule(o), costs, {0});
    q.iterations = n;
    q.cache_reads_ahead = ahead;
    return sim.run(q);
  };
  const double bw = std::min(c.host.memory_bandwidth_bytes_per_s, kPcie.bandwidth_bytes_per_s);
  const double read = kPcie.latency_s / 2 + 5e6 / bw;  // 0.5 ms, against 6 ms of compute per micro-batch
  const auto now = run(6e-3, 5e6, false);
  const auto hidden = run(6e-3, 5e6, true);
  for (int i = 0; i < n; ++i) {
    CHECK(now.iteration_end_s[i] == Approx((i + 1) * M * (6e-3 + read)).epsilon(1e-9));
    CHECK(hidden.iteration_end_s[i] == Approx(read + (i + 1) * M * 6e-3).epsilon(1e-9));
  }
  CHECK(now.cache_io_s == Approx(M * read).epsilon(1e-9));
  CHECK(hidden.cache_io_s == Approx(read / n).epsilon(1e-9));  // the first read, waited for once
  // 0.3 ms of compute per micro-batch against 5 ms per read: the reader
  // never idles, and each iteration takes its reads' time.
  const double slow = kPcie.latency_s / 2 + 5e7 / bw;
  const auto paced = run(0.3e-3, 5e7, true);
  for (int i = 1; i < n; ++i)
    CHECK(paced.iteration_end_s[i] - paced.iteration_end_s[i - 1] == Approx(M * slow).epsilon(1e-6));
  // After the last read lands: its forward, then GPipe's M backwards.
  CHECK(paced.iteration_end_s[n - 1] == Approx(n * M * slow + 0.1e-3 + M * 0.2e-3).epsilon(1e-6));
}

TEST_CASE("leaf switches: a route across leaves adds both uplinks, which their nodes share", "[sim][network]") {
  ClusterSpec c = test::cluster(4, 2, kPcie, kIb);
  c.topology = {2, 2, 1e-6};  // two leaves of two nodes; uplink = 2 NICs / 2 = one NIC's bandwidth
  Simulator sim(c);
  const double S = 64e6, nic = kIb.bandwidth_bytes_per_s;
  const double within = kPcie.latency_s + kIb.latency_s;
  // Nodes 0 and 1 share leaf 0: NIC, NIC, as in the flat layout.
  CHECK(sim.run_transfers({{0, 2, S}}) == Approx(within + S / nic).epsilon(1e-9));
  // Node 0 to node 2: NIC, uplink 0, uplink 1, NIC.
  CHECK(sim.run_transfers({{0, 4, S}}) == Approx(within + 2e-6 + S / nic).epsilon(1e-9));
  // Both nodes of leaf 0 sending across: their uplink halves each flow.
  CHECK(sim.run_transfers({{0, 4, S}, {2, 6, S}}) == Approx(within + 2e-6 + 2 * S / nic).epsilon(1e-6));
  // Within the leaf they do not meet.
  CHECK(sim.run_transfers({{0, 2, S}, {4, 6, S}}) == Approx(within + S / nic).epsilon(1e-9));
}

#include "exec/dist.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef ELASTICPIPE_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include "exec/streams.hpp"
#include "exec/torch_compat.hpp"
#include "planner/error.hpp"

namespace ep::exec {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string join(const std::vector<int>& v) {
  std::string s;
  for (const int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// c10d's flight recorder (torch 2.x) inserts each process group into a map
// before taking its lock, so two groups of one process enqueueing their
// first collectives at once corrupt it (seen: a segfault in
// FlightRecorder::recordWithResetEnabled with replicas as threads in
// `validate`; the pipeline's K lanes do the same in training). It is off
// unless the user asks for it (TORCH_FR_BUFFER_SIZE), before any group exists.
void flight_recorder_off_by_default() {
  static std::once_flag once;
  std::call_once(once, [] { ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0); });
}

// Gloo binds to GLOO_SOCKET_IFNAME when given (multi-node), to loopback for
// a local job, else to the address this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> gloo_device(const ProcessEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (env.master_addr == "127.0.0.1" || env.master_addr == "localhost")
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                      const std::string& prefix, int rank, int size,
                                                      const std::shared_ptr<::gloo::transport::Device>& device,
                                                      std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(device);
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(prefix, store), rank,
                                                     size, options);
}

class Pending final : public PendingReduce {
 public:
  Pending(c10::intrusive_ptr<c10d::Work> work, int rank, std::string what, const at::Device& device)
      : work_(std::move(work)), rank_(rank), what_(std::move(what)), device_(device), launched_(Clock::now()) {
    auto done = done_;
    compat::when_done(*work_->getFuture(),
                      [done] { done->store(Clock::now().time_since_epoch().count(), std::memory_order_release); });
  }
  void wait() override {
    try {
#ifdef ELASTICPIPE_CUDA
      if (device_.is_cuda() && !end_) {
        // A stream that waits for the collective and then records an event:
        // with nothing else to run, the event's time is the collective's end.
        const c10::StreamGuard on(side_stream(device_, SideUse::CollectiveEnd));
        work_->wait();
        end_ = std::make_shared<c10::Event>(compat::recorded_event(device_));
      }
#endif
      work_->wait();  // the current stream's next work comes after the collective
    } catch (const std::exception& e) {
      throw PeerError(describe_collective_failure(rank_, what_, seconds(launched_, Clock::now()), e.what()));
    }
  }
  [[nodiscard]] Clock::time_point completed_at() const override {
    const auto t = done_->load(std::memory_order_acquire);
    return t ? Clock::time_point(Clock::duration(t)) : Clock::now();
  }
  [[nodiscard]] std::shared_ptr<c10::Event> device_end() const override { return end_; }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  int rank_;
  std::string what_;
  at::Device device_;
  Clock::time_point launched_;
  std::shared_ptr<c10::Event> end_;
  std::shared_ptr<std::atomic<Clock::rep>> done_ = std::make_shared<std::atomic<Clock::rep>>(0);
};

// Runs a blocking c10d call, turning its failure into our error.
template <class F>
void checked(int rank, const std::string& what, F&& f) {
  const auto t0 = Clock::now();
  try {
    f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerError(describe_collective_failure(rank, what, seconds(t0, Clock::now()), e.what()));
  }
}

}  // namespace

std::string describe_collective_failure(int rank, const std::string& what, double s, const std::string& reason) {
  // c10d's messages carry a C++ stack after the first line: keep the line.
  const std::string first = reason.substr(0, reason.find('\n'));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return "rank " + std::to_string(rank) + ": " + what + " failed after " + buf + " s: " + first;
}

// One lane of the active group: Gloo for CPU tensors; NCCL for CUDA ones
// (built only with ELASTICPIPE_CUDA against a CUDA LibTorch 2.x).
struct Lane {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#ifdef ELASTICPIPE_CUDA
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;
#endif
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& t) {
#ifdef ELASTICPIPE_CUDA
    if (nccl) return nccl->allreduce(t);
#endif
    return gloo->allreduce(t);
  }
};

struct Dist::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<::gloo::transport::Device> device;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> message;
  std::vector<Lane> lanes;
  std::vector<at::Device> lane_devices;
  int generation = -1;
  // The previous active group's Gloo lanes, destroyed off the transition's
  // path: Gloo closes each connection only at its event loop's next tick
  // (an epoll_wait of up to 10 ms, gloo/transport/tcp), so a 4-rank group
  // took 18-30 ms to tear down on a 2-core VM, half the rebuild. Joined
  // before the next group retires and before the device goes. NCCL lanes
  // are torn down in place, as before: their communicators aborted on one
  // thread while the next are made on the same GPU is a case left untried.
  std::thread retiring;

  void retire_lanes() {
    if (retiring.joinable()) retiring.join();
#ifdef ELASTICPIPE_CUDA
    for (Lane& l : lanes) l.nccl.reset();
#endif
    retiring = std::thread([old = std::move(lanes)]() mutable { old.clear(); });
    lanes.clear();  // moved from: empty, made so
  }
  ~Impl() {
    if (retiring.joinable()) retiring.join();
  }
};

Dist::Dist(const ProcessEnv& env, std::chrono::milliseconds timeout)
    : env_(env), timeout_(timeout), impl_(std::make_unique<Impl>()) {
  flight_recorder_off_by_default();
  if (env.master_port <= 0)
    throw Error("rank " + std::to_string(env.rank) + ": MASTER_PORT is not set; the job's processes meet at "
                "MASTER_ADDR:MASTER_PORT (rank 0 hosts the store there)");
  checked(env.rank, "connecting to the store at " + env.master_addr + ":" + std::to_string(env.master_port), [&] {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(env.master_port);
    // Under torchrun its agent hosts the store at MASTER_PORT: rank 0 is a
    // client there too (as a server it failed to bind, and c10d said so on
    // stderr).
    const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    o.isServer = env.rank == 0 && !(agent_store && std::string(agent_store) == "True");
    o.numWorkers = env.world_size;
    o.waitWorkers = false;
    o.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  });
  // Under torchrun the store is its agent's, kept across the restarts it
  // makes (--max-restarts): each attempt's keys apart, or a restarted job
  // would meet the addresses the failed attempt's ranks published.
  if (const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT"); attempt && *attempt)
    impl_->store = c10::make_intrusive<c10d::PrefixStore>("attempt-" + std::string(attempt), impl_->store);
  impl_->device = gloo_device(env);
  checked(env.rank, "building the message group of " + std::to_string(env.world_size) + " ranks", [&] {
    impl_->message = gloo_group(impl_->store, "message", env.rank, env.world_size, impl_->device, timeout);
    // No rank goes on before every rank holds the whole mesh: one that
    // failed right after (a bad --resume) would otherwise close a connection
    // another rank was still completing, whose error then hid the cause.
    impl_->message->barrier()->wait();
  });
}

Dist::~Dist() = default;

nlohmann::json Dist::control(const std::string& key, const nlohmann::json& value) {
  const std::string k = "control/" + key;
  if (rank() == 0) {
    const std::string text = value.dump();
    checked(rank(), "publishing control message " + key,
            [&] { impl_->store->set(k, std::vector<std::uint8_t>(text.begin(), text.end())); });
    return value;
  }
  // Polls: a waiting process holds no collective (which would time out)
  // and costs one small store request every 20 ms.
  std::vector<std::uint8_t> bytes;
  checked(rank(), "waiting for control message " + key, [&] {
    while (!impl_->store->check({k})) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    bytes = impl_->store->get(k);
  });
  return nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
}

void Dist::barrier(const std::string& what) {
  checked(rank(), "barrier (" + what + ") of all " + std::to_string(world_size()) + " ranks",
          [&] { impl_->message->barrier()->wait(); });
}

std::vector<std::int64_t> Dist::all_gather(std::span<const std::int64_t> mine, const std::string& what) {
  std::vector<std::int64_t> out;
  checked(rank(), what + " of all " + std::to_string(world_size()) + " ranks", [&] {
    const auto n = static_cast<std::int64_t>(mine.size());
    std::vector<at::Tensor> in{at::empty({n}, at::kLong)};
    std::copy(mine.begin(), mine.end(), in[0].data_ptr<std::int64_t>());
    std::vector<std::vector<at::Tensor>> all(1);
    for (int r = 0; r < world_size(); ++r) all[0].push_back(at::empty({n}, at::kLong));
    impl_->message->allgather(all, in)->wait();
    for (const at::Tensor& t : all[0]) out.insert(out.end(), t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + n);
  });
  return out;
}

void Dist::send_bytes(std::span<const std::uint8_t> bytes, int dst, int tag, const std::string& what) {
  checked(rank(), "sending " + what + " to rank " + std::to_string(dst), [&] {
    std::vector<at::Tensor> size{at::full({1}, static_cast<std::int64_t>(bytes.size()), at::kLong)};
    impl_->message->send(size, dst, tag)->wait();
    std::vector<at::Tensor> data{at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte)};
    std::copy(bytes.begin(), bytes.end(), data[0].data_ptr<std::uint8_t>());
    impl_->message->send(data, dst, tag)->wait();
  });
}

std::vector<std::uint8_t> Dist::recv_bytes(int src, int tag, const std::string& what) {
  std::vector<std::uint8_t> out;
  checked(rank(), "receiving " + what + " from rank " + std::to_string(src), [&] {
    std::vector<at::Tensor> size{at::zeros({1}, at::kLong)};
    impl_->message->recv(size, src, tag)->wait();
    std::vector<at::Tensor> data{at::empty({size[0].item<std::int64_t>()}, at::kByte)};
    impl_->message->recv(data, src, tag)->wait();
    const auto* p = data[0].data_ptr<std::uint8_t>();
    out.assign(p, p + data[0].numel());
  });
  return out;
}

double Dist::rebuild_active(int generation, const std::vector<int>& active_ranks, int lanes,
                            const std::vector<at::Device>& lane_devices) {
  const auto t0 = Clock::now();
  impl_->retire_lanes();
  impl_->lane_devices = lane_devices;
  active_ranks_ = active_ranks;
  impl_->generation = generation;
  const auto me = std::find(active_ranks.begin(), active_ranks.end(), rank());
  if (me == active_ranks.end()) return 0;
  const int local = static_cast<int>(me - active_ranks.begin());
  const int size = static_cast<int>(active_ranks.size());
  for (int k = 0; k < lanes; ++k) {
    const std::string prefix = "active/" + std::to_string(generation) + "/lane" + std::to_string(k);
    checked(rank(),
            "building lane " + std::to_string(k) + " of active group " + std::to_string(generation) + " (ranks " +
                join(active_ranks) + ")",
            [&] {
              const bool cuda = k < static_cast<int>(lane_devices.size()) && lane_devices[k].is_cuda();
              Lane lane;
              if (!cuda) {
                lane.gloo = gloo_group(impl_->store, prefix, local, size, impl_->device, timeout_);
              } else {
#ifdef ELASTICPIPE_CUDA
                auto options = c10d::ProcessGroupNCCL::Options::create();
                options->timeout = timeout_;
                lane.nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
                    c10::make_intrusive<c10d::PrefixStore>(prefix, impl_->store), local, size, options);
#if EP_TORCH_2_4
                // The communicator now, with the group (every rank builds the
                // lanes in one order): made lazily, it would land in the first
                // all-reduce, outside the rebuild's time.
                lane.nccl->eagerConnectSingleDevice(lane_devices[k]);
#endif
#else
                throw Error("CUDA lanes need a build with -DELASTICPIPE_CUDA=ON (ProcessGroupNCCL)");
#endif
              }
              // Building a Gloo group is no synchronisation point: a rank
              // done with its connections could retire the group (at its
              // next rebuild) while a peer still completes its own, which
              // then reads "Connection closed by peer". After the barrier
              // every rank holds the group. (NCCL's eager connect is one.)
              if (lane.gloo) lane.gloo->barrier()->wait();
              impl_->lanes.push_back(std::move(lane));
            });
  }
  return seconds(t0, Clock::now());
}

std::shared_ptr<PendingReduce> Dist::allreduce(int lane, at::Tensor flat, const std::string& what) {
  const std::string full = what + " (lane " + std::to_string(lane) + ", active group " +
                           std::to_string(impl_->generation) + " of ranks " + join(active_ranks_) + ")";
  if (lane < 0 || lane >= static_cast<int>(impl_->lanes.size()))
    throw Error("rank " + std::to_string(rank()) + ": " + full + ": this process has no such lane");
  std::vector<at::Tensor> tensors{std::move(flat)};
  c10::intrusive_ptr<c10d::Work> work;
  checked(rank(), full, [&] { work = impl_->lanes[lane].allreduce(tensors); });
  return std::make_shared<Pending>(std::move(work), rank(), full, tensors.front().device());
}

void Dist::allreduce_now(at::Tensor& t, const std::string& what) {
  // NCCL reduces device tensors: small host values go through lane 0's device.
  const bool cuda = !impl_->lane_devices.empty() && impl_->lane_devices[0].is_cuda();
  at::Tensor x = cuda ? t.to(impl_->lane_devices[0]) : t;
  allreduce(0, x, what)->wait();
  if (cuda) t.copy_(x.cpu());
}

}  // namespace ep::exec

// How the driver gets SimGrid runs done: a Runner memoises iteration runs
// by their exact request, for several planning threads (one per mode) at
// once. Internal to sim/ (driver.cpp).
#pragma once

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "planner/autodp.hpp"
#include "planner/iteration.hpp"
#include "planner/timeline.hpp"
#include "sim/driver.hpp"
#include "sim/simulator.hpp"

namespace ep::sim {

// What one simulated iteration run gives the driver.
struct Measured {
  SimResult sim;
  double compute_per_device_s = 0;  // compute time (is_compute) of one device of one replica, per iteration
  // Idle share of the devices' time at this period (Timeline's definition).
  [[nodiscard]] double bubble_fraction(double period_s) const { return idle_share(compute_per_device_s, period_s); }
};

// Runs iterations of lowered programs on SimGrid, memoised across plans, modes and
// trainings on the same platform: the key is Simulator::request_key, a
// digest of the run as the child is sent it, so two requests share a
// result exactly when SimGrid would be given the same input. The misses of a batch run in parallel; a
// request another thread is already running is waited for, not run twice.
// Thread-safe.
class Runner {
 public:
  Runner(Simulator& sim, int jobs) : sim_(sim), jobs_(jobs) {}
  [[nodiscard]] int jobs() const { return jobs_; }

  std::vector<Measured> run(const PlanContext& ctx, const SimConfig& sim, const std::vector<IterationProgram>& programs,
                            int iterations) {
    std::vector<std::string> keys;
    std::vector<SimRequest> misses;
    std::vector<std::string> miss_keys;
    {
      std::vector<SimRequest> requests;
      for (const IterationProgram& p : programs) {
        requests.push_back(program_request(ctx, sim, p, iterations, -1));
        keys.push_back(sim_.request_key(requests.back()));
      }
      const std::lock_guard lock(mutex_);
      for (std::size_t i = 0; i < programs.size(); ++i) {
        if (memo_.count(keys[i]) || running_.count(keys[i])) continue;
        running_.insert(keys[i]);
        misses.push_back(std::move(requests[i]));
        miss_keys.push_back(keys[i]);
      }
    }
    std::vector<SimResult> results;
    try {
      results = sim_.run_batch(misses, jobs_);
    } catch (const std::exception& e) {
      const std::lock_guard lock(mutex_);
      for (const std::string& k : miss_keys) running_.erase(k), failed_.emplace(k, e.what());
      ready_.notify_all();
      throw;
    }
    std::unique_lock lock(mutex_);
    for (std::size_t i = 0; i < misses.size(); ++i) {
      memo_.emplace(miss_keys[i], Measured{results[i], compute_per_device(misses[i])});
      running_.erase(miss_keys[i]);
    }
    ready_.notify_all();
    std::vector<Measured> out;
    for (const std::string& k : keys) {
      ready_.wait(lock, [&] { return memo_.count(k) || failed_.count(k); });
      if (const auto f = failed_.find(k); f != failed_.end()) throw Error(f->second);
      out.push_back(memo_.at(k));
    }
    return out;
  }

  // Each program's first `iterations` traced, in parallel (not memoised:
  // the traces are the point).
  std::vector<trace::Trace> trace(const PlanContext& ctx, const SimConfig& sim, const std::vector<IterationProgram>& programs,
                                  const std::vector<int>& plan_ids, const std::vector<int>& iterations) {
    std::vector<SimRequest> requests;
    for (std::size_t i = 0; i < programs.size(); ++i)
      requests.push_back(program_request(ctx, sim, programs[i], iterations.at(i), plan_ids[i]));
    std::vector<trace::Trace> traces;
    (void)sim_.run_batch(requests, jobs_, &traces);
    return traces;
  }

 private:
  // Compute time (is_compute) of one device of one replica, per iteration.
  static double compute_per_device(const SimRequest& req) {
    double busy = 0;
    for (const auto& device : req.schedule.devices)
      for (const Action& a : device)
        if (is_compute(a.kind)) busy += req.costs.duration(a);
    return busy / req.schedule.K;
  }

  Simulator& sim_;
  int jobs_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::string, Measured> memo_;
  std::set<std::string> running_;
  std::map<std::string, std::string> failed_;
};

}  // namespace ep::sim

// Carrying out a plan on this process, and the transition between two:
// onboarding of woken replicas (from the live one the plan names), the
// repartition, the active group's rebuild, the node's cache file, and a
// check that all replicas hold the same state.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "exec/state.hpp"
#include "exec/torch_compat.hpp"
#include "exec/trainer_impl.hpp"
#include "planner/transition.hpp"

namespace ep::exec {

using nlohmann::json;

std::vector<at::Device> Trainer::plan_devices() const {
  std::vector<at::Device> d = devices(c_);
  if (c_.device != DeviceKind::CUDA || !active()) return d;
  const int visible = std::max<int>(1, static_cast<int>(at::getNumGPUs()));
  const auto& gpus = replica().gpus;  // stage -> global GPU id, AutoDP's layout
  for (std::size_t k = 0; k < gpus.size() && k < d.size(); ++k)
    d[k] = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpus[k] % c_.cluster.gpus_per_node % visible));
  return d;
}

namespace {

bool unchanged(const Plan& prev, const Plan& plan) {
  return !repartitioned(prev, plan) && !refrozen(prev, plan) && prev.M == plan.M &&
         prev.layout.active_ranks == plan.layout.active_ranks && prev.cache.on == plan.cache.on &&
         prev.cache.tier == plan.cache.tier && plan.cache_fill_from < 0 && prev.cache_file_ahead == plan.cache_file_ahead;
}

}  // namespace

void Trainer::enter_plan(TransitionCost* move) {
  const bool was_active = previous_plan_ != nullptr &&
                          std::count(previous_plan_->layout.active_ranks.begin(),
                                     previous_plan_->layout.active_ranks.end(), env_.rank) > 0;
  // A freeze step the planner did not act on keeps the plan as it was:
  // nothing to move, repartition or rebuild (the planner charges nothing).
  if (previous_plan_ && was_active && unchanged(*previous_plan_, *plan_)) return;
  Clock::time_point t = Clock::now();
  if (dist_ && previous_plan_) onboard();
  if (move) move->state_transfer_s = seconds(t, Clock::now());
  t = Clock::now();
  const bool now_active = active();
  if (now_active) repartition();
  if (move) move->repartition_s = seconds(t, Clock::now());
  t = Clock::now();
  // The group is made again only for new ranks or lanes (one per device:
  // K), as the planner prices it (predict_transition).
  const bool regroup = !previous_plan_ || previous_plan_->layout.active_ranks != plan_->layout.active_ranks ||
                       previous_plan_->K != plan_->K;
  if (dist_ && (now_active || was_active) && regroup)
    dist_->rebuild_active(plan_->id, plan_->layout.active_ranks, plan_->K, plan_devices());
  if (move) move->rebuild_s = seconds(t, Clock::now());
  t = Clock::now();
  if (now_active) {
    if (plan_->cache.on && !cache_)
      cache_ = std::make_unique<ActivationCache>(node_cache_file(plan_->cache.tier), data_.train.size, entry_shape(),
                                                 false);
    pipeline_->set_cache(cache_.get());
    if (dist_ && plan_->layout.replicas > 1) check_replicas();
    make_cache_ahead();
  }
  if (move) move->repartition_s += seconds(t, Clock::now());
  resumed_ = false;
}

// Each woken rank receives the training state (weights, optimizer state,
// run state) from the rank the plan names.
void Trainer::onboard() {
  const auto& woken = plan_->woken_ranks;
  for (std::size_t i = 0; i < woken.size(); ++i) {
    const int dst = woken[i], src = plan_->onboarding.at(i).source;  // the plan names the sender
    const int tag = static_cast<int>(plan_->id) * 4096 + dst;
    if (env_.rank == src) {
      const std::vector<std::uint8_t> bytes =
          pack_state(model_, optimizer_, json::parse(trace::run_state_json(p_)));
      dist_->send_bytes(bytes, dst, tag, "training state (" + std::to_string(bytes.size()) + " bytes)");
    } else if (env_.rank == dst) {
      const std::vector<std::uint8_t> bytes = dist_->recv_bytes(src, tag, "training state");
      const std::string what = "state from rank " + std::to_string(src);
      const json meta = unpack_state(bytes, model_, optimizer_, what);
      trace::RunState received = trace::parse_run_state(meta.dump(), what);
      received.steps = p_.steps;  // planned here, in lockstep
      received.chunk_times.insert(p_.chunk_times.begin(), p_.chunk_times.end());
      p_ = std::move(received);
    }
  }
}

// This process's pipeline for the plan: devices, threads, sublayers (the
// plan's programs carry the schedules); the node's first process creates the cache file before the
// group rebuild (a barrier), the others open it after.
void Trainer::repartition() {
  ever_active_ = true;
  const std::vector<at::Device> devices = plan_devices();
  compat::use_device(devices.front());  // this thread's GPU before it touches one (see use_device)
  pipeline_->set_devices(devices);
  pipeline_->configure(plan_->partition, plan_->K, plan_->v);
  if (plan_->cache.on && !cache_ && leader_) {
    const Clock::time_point t0 = Clock::now();
    double made_ahead_s = 0;
    if (cache_ahead_.valid()) {  // made while the plan before trained: here its wait, if any
      MadeCache made = cache_ahead_.get();
      if (made.tier == plan_->cache.tier) {
        cache_ = std::move(made.cache);
        made_ahead_s = made.seconds;
      } else {
        made.cache->remove();
      }
    }
    if (!cache_)
      cache_ = std::make_unique<ActivationCache>(node_cache_file(plan_->cache.tier), data_.train.size, entry_shape(),
                                                 true);
    meter_.cache_file(seconds(t0, Clock::now()), made_ahead_s);
    if (resumed_) rebuild_cache();
  }
}

// The node's first process makes the cache file on a host thread while a
// plan without the cache trains, where the planner says a later freeze step
// may turn it on; once no later step may, the file goes. A file that could
// not be made fails the step that takes it, as if made there.
void Trainer::make_cache_ahead() {
  if (!leader_ || cache_) return;
  if (plan_->cache_file_ahead && !cache_ahead_.valid()) {
    const CacheTier tier = *plan_->cache_file_ahead;
    cache_ahead_ = std::async(std::launch::async, [tier, path = node_cache_file(tier), samples = data_.train.size,
                                                    shape = entry_shape()] {
      const Clock::time_point t0 = Clock::now();
      MadeCache made{std::make_unique<ActivationCache>(path, samples, shape, true), tier};
      made.seconds = seconds(t0, Clock::now());
      return made;
    });
  } else if (!plan_->cache_file_ahead) {
    drop_cache_ahead();
  }
}

void Trainer::drop_cache_ahead() {
  if (!cache_ahead_.valid()) return;
  try {
    cache_ahead_.get().cache->remove();
  } catch (const Error& e) {  // not needed after all: said, not fatal
    log(std::string("the cache file made ahead is not needed, and could not be made: ") + e.what());
  }
}

std::uint32_t Trainer::state_crc() const {
  const std::vector<std::uint8_t> bytes = pack_state(model_, optimizer_, json::object());
  std::uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  return crc;
}

// Every replica must hold bit-identical weights and optimizer state (the
// CRC-32 that closes pack_state's bytes): gathered by a sum all-reduce of
// a one-hot vector, compared on every rank.
void Trainer::check_replicas() {
  const std::uint32_t crc = state_crc();
  const auto& ranks = plan_->layout.active_ranks;
  const auto me = std::find(ranks.begin(), ranks.end(), env_.rank) - ranks.begin();
  at::Tensor all = at::zeros({static_cast<std::int64_t>(ranks.size())}, at::kLong);
  all[me] = static_cast<std::int64_t>(crc);
  dist_->allreduce_now(all, "replica state check");
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (all[static_cast<std::int64_t>(i)].item<std::int64_t>() != all[0].item<std::int64_t>())
      throw Error("rank " + std::to_string(env_.rank) + ": replica state differs after the transition to plan " +
                  std::to_string(plan_->id) + ": rank " + std::to_string(ranks[i]) + " holds crc " +
                  hex(all[static_cast<std::int64_t>(i)].item<std::int64_t>()) + ", rank " +
                  std::to_string(ranks[0]) + " " + hex(all[0].item<std::int64_t>()));
  char buf[160];
  std::snprintf(buf, sizeof buf, "replicas %zu hold identical weights and optimizer state (crc32 %08x)",
                ranks.size(), crc);
  log(buf);
}

// After a resume the node's cache file is new: its leader recomputes every
// entry the plan will read, at the depth the uninterrupted run would hold
// (in a fill epoch, the slots consumed before the checkpoint are already
// advanced).
void Trainer::rebuild_cache() {
  const Clock::time_point t0 = Clock::now();
  const std::vector<std::int64_t> order = node_order(sampler_, node_, p_.epoch);
  const bool fill = filling();
  std::map<int, std::vector<std::int64_t>> by_depth;
  for (std::size_t j = 0; j < order.size(); ++j) {
    if (order[j] < 0) continue;
    const int depth = !fill || static_cast<std::int64_t>(j) < p_.consumed ? plan_->frozen_layers : plan_->cache_fill_from;
    if (depth > 0) by_depth[depth].push_back(order[j]);
  }
  const at::Device dev = pipeline_->device_of_sublayer(0);
  const int chunk = eval_batch_;
  on_worker([&] {  // as the fill would have run: at the training precision
    c10::NoGradGuard no_grad;
    for (auto& [depth, idx] : by_depth) {
      std::sort(idx.begin(), idx.end());
      for (std::size_t at = 0; at < idx.size(); at += chunk) {
        const std::vector<std::int64_t> part(idx.begin() + at, idx.begin() + std::min(idx.size(), at + chunk));
        const MicroBatch mb = make_batch(data_.train, part);
        const at::Tensor lengths = mb.lengths.defined() ? mb.lengths.to(dev) : at::Tensor();
        cache_->write(part, model_.forward(ModelSpec::frozen_prefix(depth), mb.input.to(dev), lengths), depth);
      }
    }
  });
  char buf[128];
  std::snprintf(buf, sizeof buf, "node %d: cache rebuilt after resume (%.2f s)", node_, seconds(t0, Clock::now()));
  log(buf);
}

// The run loop enters a plan: a process active in the plan before moves
// (transition), any other just takes its place in the new one.
void Trainer::enter(const Plan& plan, const Plan* previous) {
  meter_.planned();
  const bool was_active = previous && plan_ && active();
  if (previous) prev_storage_ = *previous;
  previous_plan_ = previous ? &prev_storage_ : nullptr;
  plan_storage_ = plan;
  plan_ = &plan_storage_;
  if (was_active) transition(*previous);
  else enter_plan(nullptr);
}

// At a plan's end epoch, the next freeze step's plan entered; a move
// (frozen count or K changed) is recorded, traced and logged, and its
// warm-up measured over the next iterations (TransitionMeter).
void Trainer::transition(const Plan& previous) {
  const int epoch = p_.epoch;
  enter_plan(&meter_.move());
  std::fill(p_.interval_norm_sum.begin(), p_.interval_norm_sum.end(), 0.0);
  p_.interval_iterations = 0;
  if (!meter_.moved(previous, *plan_, epoch)) return;
  timeline_.transition(seconds(origin_, meter_.step_start()), seconds(origin_, meter_.move_end()), epoch,
                       "transition " + meter_.what());
  log(meter_.line());
}

}  // namespace ep::exec

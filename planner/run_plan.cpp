#include "planner/run_plan.hpp"

#include <algorithm>
#include <limits>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "planner/freeze.hpp"
#include "planner/run_loop.hpp"
#include "planner/transition.hpp"

namespace ep {

double Plan::predicted_epochs_s() const {
  const int fill = cache_fill_from >= 0 ? 1 : 0;
  return static_cast<double>(iterations_per_epoch) * ((epochs() - fill) * iteration_s + fill * fill_iteration_s);
}

double RunPlan::predicted_total_s() const {
  double total = 0;
  for (const Plan& p : plans) total += p.predicted_epochs_s();
  return total;
}

std::string to_string(CacheRole r) {
  switch (r) {
    case CacheRole::Off: return "off";
    case CacheRole::Fill: return "fill";
    case CacheRole::Advance: return "advance";
    case CacheRole::Read: return "read";
  }
  return "?";
}

CacheRole Plan::cache_role(int epoch) const {
  if (!cache.on) return CacheRole::Off;
  if (epoch == first_epoch && cache_fill_from >= 0) return cache_fill_from == 0 ? CacheRole::Fill : CacheRole::Advance;
  return CacheRole::Read;
}

const IterationProgram& Plan::program_for(int epoch) const {
  const CacheRole role = cache_role(epoch);
  return role == CacheRole::Fill || role == CacheRole::Advance ? fill_program : program;
}

ReplicaLayout replica_layout(const Config& c, int K) {
  return c.planner.autodp ? autodp_layout(c.cluster, K) : fixed_replicas_layout(c.cluster, K, c.planner.K);
}

ReplicaLayout replica_layout(const Config& c, int K, int replicas) {
  ReplicaLayout layout = replica_layout(c, K);
  if (replicas == layout.replicas) return layout;
  const int I = c.cluster.gpus_per_node, per_node = replicas / c.cluster.nodes;
  if (per_node < 1 || replicas % c.cluster.nodes != 0 || I % per_node != 0 || K > I / per_node)
    throw Error(std::to_string(replicas) + " replicas of K = " + std::to_string(K) + " do not tile " +
                std::to_string(c.cluster.nodes) + " node(s) of " + std::to_string(I) + " devices");
  return fixed_replicas_layout(c.cluster, K, I / per_node);
}

namespace {

// The replicas of planner.K's layout: the layout batch_size and lr were
// tuned for, whatever K the planner starts with (the time objective may
// start at K = 1). Both batch policies that follow the replicas scale from it.
int tuned_replicas(const Config& c) { return replica_layout(c, c.planner.K).replicas; }

}  // namespace

int pipeline_batch(const Config& c, int K) {
  const int batch = c.training.batch_size;
  if (c.training.batch_policy != BatchPolicy::Global) return batch;
  const std::int64_t global = static_cast<std::int64_t>(batch) * tuned_replicas(c);
  const int replicas = replica_layout(c, K).replicas;
  return static_cast<int>((global + replicas - 1) / replicas);
}

std::vector<int> reachable_K(const Config& c) {
  const auto& p = c.planner;
  std::vector<int> out{p.K};
  if (!p.autopipe) return out;
  // Without compression only too few active sublayers for K * v stages
  // halves K; the deepest freeze leaves 2 * min_active_layers of them.
  const bool compresses = p.compression != CompressionKind::None;
  for (int K = p.K; K > 1 && (compresses || K * p.virtual_stages > 2 * p.min_active_layers); K /= 2)
    out.push_back(K / 2);
  return out;
}

IterationSetup iteration_setup(const Config& c, const Plan& p, bool fill) {
  IterationSetup s{p.partition, p.K, p.v, p.M, p.layout.replicas, c.cluster.nodes > 1,
                   p.cache.on, p.cache.tier, -1, p.batch};
  if (fill && p.cache_fill_from >= 0) s.cache_valid_layers = p.cache_fill_from;
  s.cache_writes_behind = p.cache.on && cache_writes_behind(c);
  s.cache_reads_ahead = p.cache.on && cache_reads_ahead(c);
  s.grad_norms = reads_grad_norms(c);
  return s;
}

RunPlanner::RunPlanner(const Config& c, const CostModel& cost, const IterationPredictor& predictor, int host_cores)
    : ctx_(c, cost, host_cores),
      freeze_(c),
      predict_(predictor ? predictor : analytic_predictor(ctx_)),
      search_(ctx_, predict_),
      sampler_{c.data.num_train_samples, c.cluster.nodes, c.training.seed},
      steps_((c.training.epochs + c.planner.freeze_interval_epochs - 1) / c.planner.freeze_interval_epochs - 1),
      K_(c.planner.K) {
  run_.config_source = c.source;
  run_.cost_model = cost.name();
  run_.L = c.model.num_hidden_layers;
  run_.K0 = c.planner.K;
  run_.compression = c.planner.compression;
  run_.objective = c.planner.objective;
  run_.batch_policy = c.training.batch_policy;
  run_.reachable_K = reachable_K(c);
  run_.compression_limit = compression_limit(ctx_);
  run_.peak_flops_per_s = c.cluster.device.peak_flops_per_s * c.cluster.total_gpus();
}

FrozenSet RunPlanner::frozen_after(std::span<const double> grad_norms, std::string* reason) {
  const int T = static_cast<int>(run_.plans.size());
  if (T == 0) return {};
  // The policy continues from what it allowed, whether or not it was acted on.
  const std::vector<int> before = run_.plans.back().allowed_set().layers();
  const FreezeAllowance a = freeze_.next_set(T, before, grad_norms);
  run_.freeze_from_alpha_bound = freeze_.used_alpha_bound();
  if (!a.open) return frozen_set_of(a.layers);
  std::string why;
  FrozenSet chosen = choose_frozen_set(T, before, a.count, why);
  if (reason) *reason = std::move(why);
  return chosen;
}

Plan RunPlanner::step_base(int T, int frozen_allowed) const {
  const auto& pc = ctx_.config.planner;
  Plan base;
  base.id = T;
  base.freeze_step = T;
  base.first_epoch = T * pc.freeze_interval_epochs;
  base.end_epoch = std::min(ctx_.config.training.epochs, (T + 1) * pc.freeze_interval_epochs);
  base.frozen_layers = base.frozen_allowed = frozen_allowed;
  base.v = pc.virtual_stages;
  return base;
}

const Plan& RunPlanner::next(int frozen_allowed, const std::vector<int>& frozen_inside, std::string frozen_set_reason) {
  const Config& c = ctx_.config;
  const auto& pc = c.planner;
  const int T = static_cast<int>(run_.plans.size());
  if (T > steps_)
    throw Error("run planner: freeze step " + std::to_string(T) + " is past the last one (" +
                std::to_string(steps_) + ")");
  const FrozenSet allowed{frozen_allowed, frozen_inside};
  const FrozenSet before = T == 0 ? FrozenSet{} : run_.plans.back().allowed_set();
  const int floor = before.count();
  const int ceiling = c.model.num_hidden_layers - pc.min_active_layers;
  if (allowed.count() < floor || allowed.count() > std::max(floor, ceiling))
    throw Error("run planner: freeze step " + std::to_string(T) + ": " + std::to_string(allowed.count()) +
                " frozen layers, expected " + std::to_string(floor) + ".." + std::to_string(ceiling));
  const std::vector<int> layers = allowed.layers(), earlier = before.layers();
  if (frozen_set_of(layers) != allowed || (!layers.empty() && layers.back() >= c.model.num_hidden_layers) ||
      !std::includes(layers.begin(), layers.end(), earlier.begin(), earlier.end()))
    throw Error("run planner: freeze step " + std::to_string(T) + ": frozen set " + describe(allowed) +
                ", expected sorted layers past the prefix, below L = " + std::to_string(c.model.num_hidden_layers) +
                ", including the step before's " + describe(before));
  Plan base = step_base(T, frozen_allowed);
  base.frozen_inside_allowed = frozen_inside;
  base.frozen_set_reason = std::move(frozen_set_reason);
  base.cache_probed = probes(frozen_allowed);
  base.cache_probe_set_up =
      base.cache_probed && std::none_of(run_.plans.begin(), run_.plans.end(), [](const Plan& p) { return p.cache_probed; });
  Plan plan = pc.objective == Objective::Paper ? choose_paper(std::move(base)) : choose_time(std::move(base));
  // Lowered and checked once here; the back ends run these as they are.
  check_schedule(plan.program.schedule);
  if (!plan.fill_program.empty()) check_schedule(plan.fill_program.schedule);
  K_ = plan.K;
  if (plan.cache.on) cached_layers_ = plan.frozen_layers;
  run_.plans.push_back(std::move(plan));
  return run_.plans.back();
}

Plan RunPlanner::shape(const Plan& base, const After& after, int K, Partition partition, CacheDecision cache) const {
  const Config& c = ctx_.config;
  Plan plan = base;
  plan.K = K;
  plan.partition = std::move(partition);
  plan.cache = std::move(cache);
  plan.layout = replica_layout(c, K);
  if (after.previous) {
    const Plan& prev = *after.previous;
    plan.woken_ranks = plan.layout.newly_active(prev.layout);
    plan.onboarding = onboarding_sources(prev.layout, plan.layout, plan.woken_ranks);
  }
  if (c.training.batch_policy == BatchPolicy::LrScaled)
    plan.lr_scale = static_cast<double>(plan.layout.replicas) / tuned_replicas(c);
  plan.stage_loads = stage_loads_paper(ctx_.spec, plan.partition, c.planner.lambda_frozen);
  plan.cache_fill_from = -1;
  plan.cache_file_ahead.reset();
  if (!plan.cache.on) plan.cache_file_ahead = cache_file_ahead(c, ctx_.spec, ctx_.cost, plan.freeze_step < steps_);
  if (plan.cache.on) {
    const bool valid = after.previous && after.previous->cache.on && after.previous->frozen_layers == plan.frozen_layers;
    if (!valid) plan.cache_fill_from = after.cached_layers;
  }
  plan.batch = pipeline_batch(c, K);
  plan.iterations_per_epoch = iterations_in_epoch(sampler_, 0, plan.layout.pipelines_per_node, plan.batch);
  plan.padding_slots_per_epoch = padding_slots(sampler_, plan.layout.pipelines_per_node, plan.batch);
  plan.predicted_transition_s = predict_transition(ctx_, after.previous, plan).total_s();
  return plan;
}

void RunPlanner::choose_M(Plan& plan, const std::vector<int>& only_M) {
  IterationSetup setup = iteration_setup(ctx_.config, plan, false);
  setup.M = 0;
  const bool first_with_K =
      std::none_of(run_.plans.begin(), run_.plans.end(), [&](const Plan& p) { return p.K == plan.K; });
  const ChunkChoice& choice = search_.choose(setup, only_M);
  plan.chunk_table = first_with_K ? choice.table : std::vector<ChunkCandidate>{};
  plan.M = choice.M;
}

void RunPlanner::time_with_backend(const std::vector<Plan*>& plans) {
  const Config& c = ctx_.config;
  std::vector<IterationProgram> programs;
  for (Plan* plan : plans) {
    plan->program = lower_iteration(ctx_, iteration_setup(c, *plan, false));
    plan->fill_program = plan->cache_fill_from >= 0 ? lower_iteration(ctx_, iteration_setup(c, *plan, true))
                                                    : IterationProgram{};
    programs.push_back(plan->program);
    if (!plan->fill_program.empty()) programs.push_back(plan->fill_program);
  }
  const std::vector<IterationPrediction> t = predict_(programs, PredictionUse::Plan);
  std::size_t i = 0;
  for (Plan* plan : plans) {
    plan->iteration_s = t[i].iteration_s;
    plan->bubble_fraction = t[i++].bubble_fraction;
    plan->fill_iteration_s = plan->cache_fill_from >= 0 ? t[i++].iteration_s : 0.0;
    plan->max_device_memory_bytes =
        max_device_memory(ctx_.spec, c.training, plan->partition, plan->K, plan->M, plan->batch);
    plan->fits_memory = plan->max_device_memory_bytes <= c.cluster.device.memory_bytes;
    plan->samples_per_s = plan->layout.replicas * static_cast<double>(plan->batch) / plan->iteration_s;
    plan->recomputed_microbatches = recomputed_microbatches(c.training.checkpointing, plan->M);
    plan->predicted_transition_s =
        predict_transition(ctx_, run_.plans.empty() ? nullptr : &run_.plans.back(), *plan).total_s();
  }
}

// The paper's decisions: the cache by its threshold, K by Eq. 2 when the
// boundary moves, the configured partitioner.
Plan RunPlanner::choose_paper(Plan base) {
  const Config& c = ctx_.config;
  const auto& pc = c.planner;
  const int T = base.freeze_step;
  // The cache is judged per sample of a whole per-pipeline batch: the
  // read/recompute comparison does not depend on how it is split.
  const auto measured = measured_cache_.find(base.frozen_layers);
  CacheDecision cache = decide_cache(c, ctx_.spec, ctx_.cost, base.frozen_layers, c.training.batch_size,
                                     measured == measured_cache_.end() ? nullptr : &measured->second);
  int K = K_;
  const bool moved = T > 0 && base.frozen_layers > run_.plans.back().frozen_layers;
  if (pc.autopipe && moved) {
    base.compression = compress(ctx_, base.frozen_layers, K_, cache.on);
    K = base.compression.K;
  }
  Partition partition = plan_partition(ctx_, base.frozen_layers, K * base.v, cache.on);
  partition.frozen_inside = base.frozen_inside_allowed;
  Plan plan = shape(base, after(), K, std::move(partition), std::move(cache));
  choose_M(plan);
  time_with_backend({&plan});
  return plan;
}

std::vector<int> RunPlanner::K_candidates(const Plan& base, const After& after) const {
  const auto& pc = ctx_.config.planner;
  const int cap = after.previous ? after.previous->K : pc.K;
  std::vector<int> out;
  if (!pc.autopipe) return {cap};
  if (pc.compression == CompressionKind::None) {
    // K only halves when too few active sublayers remain for K * v stages.
    const int units = 2 * (ctx_.config.model.num_hidden_layers - base.frozen_layers);
    int K = cap;
    while (K > 1 && K * base.v > units) K /= 2;
    return {K};
  }
  for (int K = cap; K >= 1; K /= 2)
    if (K * base.v <= 2 * ctx_.config.model.num_hidden_layers) out.push_back(K);
  return out;
}

std::vector<CacheDecision> RunPlanner::cache_candidates(int frozen_layers) const {
  const Config& c = ctx_.config;
  const auto measured = measured_cache_.find(frozen_layers);
  const MeasuredCache* m = measured == measured_cache_.end() ? nullptr : &measured->second;
  CacheDecision d = decide_cache(c, ctx_.spec, ctx_.cost, frozen_layers, c.training.batch_size, m);
  if (!probes_cache(c, frozen_layers)) return {d};  // AutoCache weighs nothing here
  // Auto: both are weighed by the time to the end of training, unless a
  // back end measured that reading is slower than recomputing.
  CacheDecision off = d, on = d;
  off.on = false;
  on.on = true;
  if (m && !(m->read_s < m->frozen_forward_s)) return {off};
  return {off, on};
}

double RunPlanner::remaining_s(const Plan& p) const {
  const int epochs = ctx_.config.training.epochs - p.first_epoch;
  const double fill = p.cache_fill_from >= 0 ? p.fill_iteration_s - p.iteration_s : 0.0;
  return p.predicted_transition_s + static_cast<double>(p.iterations_per_epoch) * (epochs * p.iteration_s + fill);
}

namespace {

// How many M per K the back end's chunk search times under objective "time".
constexpr std::size_t kShortlistM = 3;

Alternative alternative(const Plan& p, double remaining, bool confirmed, bool kept = false, double to_end = 0) {
  const bool in_stages = p.partition.frozen_end > 0 && p.partition.bounds.front() == 0;
  return {p.frozen_layers, kept,  p.K,         p.M, p.layout.replicas, p.cache.on, in_stages, stage_sizes(p.partition),
          p.iteration_s,   p.fill_iteration_s, p.predicted_transition_s, remaining, to_end, p.fits_memory, confirmed, false};
}

// Fits first, then the least time to the end (the least memory when none fits).
bool better(const Plan& a, double ra, const Plan& b, double rb) {
  if (a.fits_memory != b.fits_memory) return a.fits_memory;
  if (!a.fits_memory) return a.max_device_memory_bytes < b.max_device_memory_bytes;
  return ra < rb;
}

}  // namespace

// Objective "time": every K the layout allows (from the current one down),
// the cache on and off, every M of the chunk range, each with the partition
// that balances predicted stage time, timed by the planner's own timeline
// (microseconds each), with the frozen prefix on stage 0's device or inside
// the stages. The best of each (K, cache, placement) is an alternative; the
// best and one within 3% of it are confirmed by the back end's chunk search
// and predictor, and the least predicted time to the end of training wins.
// Keeping the current K, replicas and cache is among the alternatives, so a
// switch is only made when the model predicts it pays for its transition.

namespace {

// The back end times the planner's best few M, not the whole range: the
// best M of each of the best micro-batch sizes (neighbouring M of one size
// differ mostly by how evenly the batch splits, where the planner's
// timeline and the back end can disagree).
std::vector<int> shortlist_M(const std::vector<std::pair<double, int>>& by_M, int batch) {
  std::vector<int> shortlist, sizes;
  for (const auto& [r, M] : by_M) {
    if (shortlist.size() == kShortlistM) break;
    const int size = (batch + M - 1) / M;
    if (std::find(sizes.begin(), sizes.end(), size) != sizes.end()) continue;
    sizes.push_back(size);
    shortlist.push_back(M);
  }
  return shortlist;
}

}  // namespace

std::optional<RunPlanner::Candidate> RunPlanner::best_M(const Plan& base, const After& after, int K,
                                                        const CacheDecision& cache, FrozenPlacement placement) const {
  const Config& c = ctx_.config;
  const auto& pc = c.planner;
  const int batch = pipeline_batch(c, K);
  int lo = pc.M, hi = std::min(pc.M, batch);  // a fixed M splits no batch smaller than itself
  if (pc.chunk_search) {
    lo = pc.M_min_factor * K;
    hi = std::min(batch, pc.M_max_factor * K);
  }
  std::optional<Candidate> best;
  std::vector<std::pair<double, int>> by_M;
  struct Shaped {
    Plan plan;
    double transition_s = 0;  // as shaped, before the plan is timed
    double warmup_s = 0;      // of which the warm-up
  };
  std::map<std::vector<int>, Shaped> shaped;  // by partition bounds
  for (int M = lo; M <= hi; ++M) {
    // Balanced by predicted time; in the stages also the initial cut (what
    // freezing without AutoPipe runs): GPipe pays the slowest forward and
    // the slowest backward, which a balance of their sums can miss when
    // frozen sublayers only run forward.
    std::vector<Partition> parts;
    if (!pc.autopipe) {
      parts.push_back(plan_partition(ctx_, base.frozen_layers, K * base.v, false));
    } else {
      parts.push_back(partition_by_time(ctx_, base.frozen_layers, K * base.v, cache.on, cache.tier,
                                        (batch + M - 1) / M, placement));
      if (placement == FrozenPlacement::InStages) {
        Partition initial = plan_partition(ctx_, 0, K * base.v, false);
        initial.frozen_layers = base.frozen_layers;
        initial.frozen_end = ModelSpec::frozen_prefix(base.frozen_layers).last;
        parts.push_back(std::move(initial));
      }
    }
    for (Partition& part : parts) {
      part.frozen_inside = base.frozen_inside_allowed;  // they stay in their stages
      auto it = shaped.find(part.bounds);
      if (it == shaped.end()) {
        std::vector<int> key = part.bounds;
        Shaped fresh{shape(base, after, K, std::move(part), cache), 0.0, 0.0};
        fresh.transition_s = fresh.plan.predicted_transition_s;
        fresh.warmup_s = after.previous ? predict_warmup_s(ctx_, *after.previous, fresh.plan) : 0.0;
        it = shaped.emplace(std::move(key), std::move(fresh)).first;
      }
      // Timed in place (a plan of thousands of replicas is costly to copy),
      // copied only where it is the best so far.
      Plan& p = it->second.plan;
      p.M = M;
      p.max_device_memory_bytes = max_device_memory(ctx_.spec, c.training, p.partition, K, M, batch);
      p.fits_memory = p.max_device_memory_bytes <= c.cluster.device.memory_bytes;
      const Timeline t = predict_iteration(ctx_, iteration_setup(c, p, false));
      p.iteration_s = t.makespan;
      p.bubble_fraction = t.bubble_fraction();
      if (p.cache_fill_from >= 0) p.fill_iteration_s = predict_iteration(ctx_, iteration_setup(c, p, true)).makespan;
      // The warm-up is priced in the plan's iterations: shape() could not.
      p.predicted_transition_s = it->second.transition_s;
      if (after.previous) p.predicted_transition_s += predict_warmup_s(ctx_, *after.previous, p) - it->second.warmup_s;
      p.samples_per_s = p.layout.replicas * static_cast<double>(batch) / p.iteration_s;
      p.recomputed_microbatches = recomputed_microbatches(c.training.checkpointing, M);
      const double r = remaining_s(p);
      if (p.fits_memory) by_M.emplace_back(r, M);
      if (!best || better(p, r, best->plan, best->remaining)) best = Candidate{p, r, 0, false, {}};
    }
  }
  if (best) {
    std::sort(by_M.begin(), by_M.end());
    best->by_M = std::move(by_M);
  }
  return best;
}

std::vector<RunPlanner::Candidate> RunPlanner::weigh(const Plan& base, const After& after) const {
  const auto& pc = ctx_.config.planner;
  const int units = 2 * (ctx_.config.model.num_hidden_layers - base.frozen_layers);
  std::vector<Candidate> cands;
  for (const int K : K_candidates(base, after))
    for (const CacheDecision& cache : cache_candidates(base.frozen_layers))
      for (const FrozenPlacement placement : {FrozenPlacement::Device0, FrozenPlacement::InStages}) {
        // The prefix runs inside the stages only when there is one, AutoPipe
        // may repartition, and no cache needs F_frozen's output separately;
        // on device 0 it leaves the active sublayers to K * v stages.
        if (placement == FrozenPlacement::InStages && (base.frozen_layers == 0 || !pc.autopipe || cache.on)) continue;
        if (placement == FrozenPlacement::Device0 && pc.autopipe && K * base.v > units) continue;
        if (auto best = best_M(base, after, K, cache, placement)) cands.push_back(std::move(*best));
      }
  const std::string cap = std::to_string(after.previous ? after.previous->K : pc.K);
  if (cands.empty() && !pc.chunk_search)
    throw ctx_.config.error("planner.M",
                            "a fixed M no larger than the per-pipeline batch (training.batch_policy) of some K <= " + cap,
                            std::to_string(pc.M));
  if (cands.empty())
    throw ctx_.config.error("planner.M_min_factor",
                            "a chunk range [M_min_factor K, min(batch, M_max_factor K)] that is not empty for some K <= " + cap,
                            std::to_string(pc.M_min_factor));
  std::stable_sort(cands.begin(), cands.end(), [&](const Candidate& a, const Candidate& b) {
    return better(a.plan, a.remaining, b.plan, b.remaining);
  });
  return cands;
}

std::optional<RunPlanner::Candidate> RunPlanner::kept(const Plan& base) const {
  if (run_.plans.empty() || base.allowed_set() == run_.plans.back().frozen_set()) return std::nullopt;
  const Plan& prev = run_.plans.back();
  Plan step = base;
  step.frozen_layers = prev.frozen_layers;
  Plan p = shape(step, after(), prev.K, prev.partition, prev.cache);
  // The same iteration as before: the back end's timing of it stands.
  p.M = prev.M;
  p.iteration_s = prev.iteration_s;
  p.bubble_fraction = prev.bubble_fraction;
  p.samples_per_s = prev.samples_per_s;
  p.max_device_memory_bytes = prev.max_device_memory_bytes;
  p.fits_memory = prev.fits_memory;
  p.recomputed_microbatches = prev.recomputed_microbatches;
  p.program = prev.program;
  p.fill_program = {};  // the entries stay valid: same depth
  p.fill_iteration_s = 0;
  const double r = remaining_s(p);
  return Candidate{std::move(p), r, 0, false, {}};
}

std::vector<std::size_t> RunPlanner::finalists(const std::vector<Candidate>& cands) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < cands.size() && out.size() < 2; ++i)
    if (i == 0 || (cands[i].plan.fits_memory && cands[i].remaining <= 1.03 * cands[0].remaining)) out.push_back(i);
  // The planner's timeline prices the cache's fill and reads more roughly
  // than the back end: the best plan of the other cache decision is timed
  // too, so that the back end, not the timeline, settles the cache.
  const auto other = std::find_if(cands.begin(), cands.end(), [&](const Candidate& c) {
    return c.plan.fits_memory && c.plan.cache.on != cands.front().plan.cache.on;
  });
  const auto at = static_cast<std::size_t>(other - cands.begin());
  if (other != cands.end() && std::find(out.begin(), out.end(), at) == out.end()) out.push_back(at);
  return out;
}

std::vector<RunPlanner::Candidate> RunPlanner::confirmed(const std::vector<Candidate>& cands,
                                                         const std::vector<std::size_t>& which) {
  std::vector<Plan> timed;
  for (const std::size_t i : which) {
    timed.push_back(cands[i].plan);
    choose_M(timed.back(), shortlist_M(cands[i].by_M, timed.back().batch));
  }
  std::vector<Plan*> to_time;
  for (Plan& p : timed) to_time.push_back(&p);
  time_with_backend(to_time);  // at once: the back end may answer them together
  std::vector<Candidate> out;
  for (Plan& p : timed) {
    const double r = remaining_s(p);
    out.push_back({std::move(p), r, 0.0, true, {}});
  }
  return out;
}

bool RunPlanner::probes(int frozen_allowed) {
  const int T = static_cast<int>(run_.plans.size());
  if (const auto it = probes_.find(T); it != probes_.end()) return it->second;
  const Config& c = ctx_.config;
  const bool probed_before = std::any_of(run_.plans.begin(), run_.plans.end(), [&](const Plan& p) {
    return p.cache_probed && p.frozen_allowed == frozen_allowed;
  });
  bool probe = T > 0 && probes_cache(c, frozen_allowed) && !probed_before;
  if (probe && c.planner.objective == Objective::Time) {
    // Worth its cost only where a plan with the cache is predicted (by the
    // cost model: nothing is measured at this depth yet) to beat every plan
    // without it, the previous one kept included, by more than the probe.
    const Plan base = step_base(T, frozen_allowed);
    const std::vector<Candidate> cands = weigh(base, after());
    double with = std::numeric_limits<double>::infinity(), without = with;
    for (const Candidate& cand : confirmed(cands, finalists(cands)))
      if (cand.plan.fits_memory) {
        double& side = cand.plan.cache.on ? with : without;
        side = std::min(side, value_s(cand.plan));
      }
    if (const std::optional<Candidate> k = kept(base)) without = std::min(without, value_s(k->plan));
    const bool first = std::none_of(run_.plans.begin(), run_.plans.end(), [](const Plan& p) { return p.cache_probed; });
    probe = with + predict_cache_probe_s(c, ctx_.spec, ctx_.cost, frozen_allowed, c.training.batch_size, first) < without;
  }
  probes_[T] = probe;
  return probe;
}

Plan RunPlanner::choose_time(Plan base) {
  const std::vector<Candidate> cands = weigh(base, after());
  std::vector<Alternative> alts;
  for (const Candidate& cand : cands) alts.push_back(alternative(cand.plan, cand.remaining, false));
  // The finalists, timed by the back end, are valued with the later steps
  // in view (value_s): their step, then acting or not on each later one.
  const std::vector<std::size_t> confirm = finalists(cands);
  std::vector<Candidate> timed = confirmed(cands, confirm);
  std::optional<Candidate> chosen;
  std::size_t chosen_at = 0;
  for (std::size_t k = 0; k < confirm.size(); ++k) {
    timed[k].to_end = value_s(timed[k].plan);
    alts[confirm[k]] = alternative(timed[k].plan, timed[k].remaining, true, false, timed[k].to_end);
    if (!chosen || better(timed[k].plan, timed[k].to_end, chosen->plan, chosen->to_end)) {
      chosen = std::move(timed[k]);
      chosen_at = confirm[k];
    }
  }
  // Acting on the freeze step is itself weighed: against the previous plan
  // kept unchanged through it (its layers trained a step longer; a later
  // step may act on a later count, merging the two).
  if (std::optional<Candidate> keep = kept(base)) {
    keep->to_end = value_s(keep->plan);
    const bool keeps = better(keep->plan, keep->to_end, chosen->plan, chosen->to_end);
    alts.push_back(alternative(keep->plan, keep->remaining, true, true, keep->to_end));
    const std::string freezing = describe(base.allowed_set());
    const std::string keeping = "keeping " + describe(keep->plan.frozen_set());
    if (keeps) {
      keep->plan.freeze_reason = "not acted on: " + keeping + ", " + seconds_text(keep->to_end) +
                                 " to the end, against " + seconds_text(chosen->to_end) + " with " + freezing +
                                 " (its transition " + seconds_text(chosen->plan.predicted_transition_s) + ")";
      chosen = std::move(keep);
      chosen_at = alts.size() - 1;
    } else {
      chosen->plan.freeze_reason = "acted on: " + freezing + ", " + seconds_text(chosen->to_end) +
                                   " to the end, against " + seconds_text(keep->to_end) + " " + keeping;
    }
  }
  alts[chosen_at].chosen = true;
  std::stable_sort(alts.begin(), alts.end(), [](const Alternative& a, const Alternative& b) {
    return a.fits_memory != b.fits_memory ? a.fits_memory : a.remaining_s < b.remaining_s;
  });
  Plan plan = std::move(chosen->plan);
  plan.alternatives = std::move(alts);
  if (probes_cache(ctx_.config, plan.frozen_layers)) {  // AutoCache weighed both
    const auto other = std::find_if(plan.alternatives.begin(), plan.alternatives.end(),
                                    [&](const Alternative& a) { return a.cache != plan.cache.on; });
    std::ostringstream why;
    why.precision(4);
    if (other == plan.alternatives.end())
      why << "measured: read " << plan.cache.read_s * 1e3 << " ms >= frozen forward " << plan.cache.frozen_forward_s * 1e3
          << " ms per batch";
    else
      why << "time objective: " << (plan.cache.on ? "on" : "off") << " " << chosen->remaining << " s to the end vs "
          << (plan.cache.on ? "off" : "on") << " " << other->remaining_s << " s (best K " << other->K << ")";
    plan.cache.reason = why.str();
  }
  return plan;
}

std::string seconds_text(double s) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace ep

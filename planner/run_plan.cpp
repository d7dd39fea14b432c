#include "planner/run_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "planner/freeze.hpp"
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
}

int RunPlanner::frozen_after(std::span<const double> grad_norms) {
  const int T = static_cast<int>(run_.plans.size());
  if (T == 0) return 0;
  const int f = freeze_.next(T, run_.plans.back().frozen_layers, grad_norms);
  run_.freeze_from_alpha_bound = freeze_.used_alpha_bound();
  return f;
}

const Plan& RunPlanner::next(int frozen_layers) {
  const Config& c = ctx_.config;
  const auto& pc = c.planner;
  const int T = static_cast<int>(run_.plans.size());
  if (T > steps_)
    throw Error("run planner: freeze step " + std::to_string(T) + " is past the last one (" +
                std::to_string(steps_) + ")");
  const int floor = T == 0 ? 0 : run_.plans.back().frozen_layers;
  const int ceiling = c.model.num_hidden_layers - pc.min_active_layers;
  if (frozen_layers < floor || frozen_layers > std::max(floor, ceiling))
    throw Error("run planner: freeze step " + std::to_string(T) + ": " + std::to_string(frozen_layers) +
                " frozen layers, expected " + std::to_string(floor) + ".." + std::to_string(ceiling));
  Plan base;
  base.id = T;
  base.freeze_step = T;
  base.first_epoch = T * pc.freeze_interval_epochs;
  base.end_epoch = std::min(c.training.epochs, (T + 1) * pc.freeze_interval_epochs);
  base.frozen_layers = frozen_layers;
  base.v = pc.virtual_stages;
  Plan plan = pc.objective == Objective::Paper ? choose_paper(std::move(base)) : choose_time(std::move(base));
  // Lowered and checked once here; the back ends run these as they are.
  check_schedule(plan.program.schedule);
  if (!plan.fill_program.empty()) check_schedule(plan.fill_program.schedule);
  K_ = plan.K;
  if (plan.cache.on) cached_layers_ = plan.frozen_layers;
  run_.plans.push_back(std::move(plan));
  return run_.plans.back();
}

Plan RunPlanner::shape(const Plan& base, int K, Partition partition, CacheDecision cache) const {
  const Config& c = ctx_.config;
  Plan plan = base;
  plan.K = K;
  plan.partition = std::move(partition);
  plan.cache = std::move(cache);
  plan.layout = replica_layout(c, K);
  if (!run_.plans.empty()) {
    const Plan& prev = run_.plans.back();
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
    const bool valid = !run_.plans.empty() && run_.plans.back().cache.on &&
                       run_.plans.back().frozen_layers == plan.frozen_layers;
    if (!valid) plan.cache_fill_from = cached_layers_;
  }
  plan.batch = pipeline_batch(c, K);
  plan.iterations_per_epoch = iterations_in_epoch(sampler_, 0, plan.layout.pipelines_per_node, plan.batch);
  plan.padding_slots_per_epoch = padding_slots(sampler_, plan.layout.pipelines_per_node, plan.batch);
  plan.predicted_transition_s = predict_transition(ctx_, run_.plans.empty() ? nullptr : &run_.plans.back(), plan).total_s();
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
  Plan plan = shape(base, K, std::move(partition), std::move(cache));
  choose_M(plan);
  time_with_backend({&plan});
  return plan;
}

std::vector<int> RunPlanner::K_candidates(const Plan& base) const {
  const auto& pc = ctx_.config.planner;
  const int cap = run_.plans.empty() ? pc.K : run_.plans.back().K;
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
  if (c.planner.cache != CachePolicyKind::Auto || ModelSpec::frozen_prefix(frozen_layers).empty() ||
      !c.planner.autopipe)
    return {d};
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

std::string stage_sizes(const Partition& p) {
  std::string out;
  for (int s = 0; s < p.K(); ++s) out += (s ? "," : "") + std::to_string(p.bounds[s + 1] - p.bounds[s]);
  return out;
}

Alternative alternative(const Plan& p, double remaining, bool confirmed) {
  const bool in_stages = p.partition.frozen_end > 0 && p.partition.bounds.front() == 0;
  return {p.K, p.M, p.layout.replicas, p.cache.on, in_stages, stage_sizes(p.partition), p.iteration_s, p.fill_iteration_s,
          p.predicted_transition_s, remaining, p.fits_memory, confirmed, false};
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
// One alternative being weighed.
struct RunPlanner::Candidate {
  Plan plan;
  double remaining = 0;
  std::vector<std::pair<double, int>> by_M;  // (remaining, M) that fit: the shortlist the back end times
};

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

std::optional<RunPlanner::Candidate> RunPlanner::best_M(const Plan& base, int K, const CacheDecision& cache,
                                                        FrozenPlacement placement) const {
  const Config& c = ctx_.config;
  const auto& pc = c.planner;
  const int batch = pipeline_batch(c, K);
  int lo = pc.M, hi = pc.M;
  if (pc.chunk_search) {
    lo = pc.M_min_factor * K;
    hi = std::min(batch, pc.M_max_factor * K);
  }
  std::optional<Candidate> best;
  std::vector<std::pair<double, int>> by_M;
  std::map<std::vector<int>, Plan> shaped;  // by partition bounds
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
      auto it = shaped.find(part.bounds);
      if (it == shaped.end()) {
        std::vector<int> key = part.bounds;
        it = shaped.emplace(std::move(key), shape(base, K, std::move(part), cache)).first;
      }
      Plan p = it->second;
      p.M = M;
      p.max_device_memory_bytes = max_device_memory(ctx_.spec, c.training, p.partition, K, M, batch);
      p.fits_memory = p.max_device_memory_bytes <= c.cluster.device.memory_bytes;
      const Timeline t = predict_iteration(ctx_, iteration_setup(c, p, false));
      p.iteration_s = t.makespan;
      p.bubble_fraction = t.bubble_fraction();
      if (p.cache_fill_from >= 0) p.fill_iteration_s = predict_iteration(ctx_, iteration_setup(c, p, true)).makespan;
      p.samples_per_s = p.layout.replicas * static_cast<double>(batch) / p.iteration_s;
      p.recomputed_microbatches = recomputed_microbatches(c.training.checkpointing, M);
      const double r = remaining_s(p);
      if (p.fits_memory) by_M.emplace_back(r, M);
      if (!best || better(p, r, best->plan, best->remaining)) best = Candidate{std::move(p), r, {}};
    }
  }
  if (best) {
    std::sort(by_M.begin(), by_M.end());
    best->by_M = std::move(by_M);
  }
  return best;
}

std::vector<RunPlanner::Candidate> RunPlanner::weigh(const Plan& base) const {
  const auto& pc = ctx_.config.planner;
  const int units = 2 * (ctx_.config.model.num_hidden_layers - base.frozen_layers);
  std::vector<Candidate> cands;
  for (const int K : K_candidates(base))
    for (const CacheDecision& cache : cache_candidates(base.frozen_layers))
      for (const FrozenPlacement placement : {FrozenPlacement::Device0, FrozenPlacement::InStages}) {
        // The prefix runs inside the stages only when there is one, AutoPipe
        // may repartition, and no cache needs F_frozen's output separately;
        // on device 0 it leaves the active sublayers to K * v stages.
        if (placement == FrozenPlacement::InStages && (base.frozen_layers == 0 || !pc.autopipe || cache.on)) continue;
        if (placement == FrozenPlacement::Device0 && pc.autopipe && K * base.v > units) continue;
        if (auto best = best_M(base, K, cache, placement)) cands.push_back(std::move(*best));
      }
  if (cands.empty())
    throw ctx_.config.error("planner.M_min_factor",
                            "a chunk range [M_min_factor K, min(batch, M_max_factor K)] that is not empty for some K <= " +
                                std::to_string(run_.plans.empty() ? pc.K : run_.plans.back().K),
                            std::to_string(pc.M_min_factor));
  std::stable_sort(cands.begin(), cands.end(), [&](const Candidate& a, const Candidate& b) {
    return better(a.plan, a.remaining, b.plan, b.remaining);
  });
  return cands;
}

Plan RunPlanner::choose_time(Plan base) {
  const auto& pc = ctx_.config.planner;
  const std::vector<Candidate> cands = weigh(base);
  std::vector<Alternative> alts;
  for (const Candidate& cand : cands) alts.push_back(alternative(cand.plan, cand.remaining, false));
  // The back end confirms the best and a near tie, both timed at once.
  std::vector<std::size_t> confirm;
  for (std::size_t i = 0; i < cands.size() && confirm.size() < 2; ++i)
    if (i == 0 || (cands[i].plan.fits_memory && cands[i].remaining <= 1.03 * cands[0].remaining)) confirm.push_back(i);
  std::vector<Plan> timed;
  for (const std::size_t i : confirm) {
    timed.push_back(cands[i].plan);
    choose_M(timed.back(), shortlist_M(cands[i].by_M, timed.back().batch));
  }
  std::vector<Plan*> to_time;
  for (Plan& p : timed) to_time.push_back(&p);
  time_with_backend(to_time);
  std::optional<Candidate> chosen;
  std::size_t chosen_at = 0;
  for (std::size_t k = 0; k < confirm.size(); ++k) {
    Plan& p = timed[k];
    const double r = remaining_s(p);
    alts[confirm[k]] = alternative(p, r, true);
    if (!chosen || better(p, r, chosen->plan, chosen->remaining)) {
      chosen = Candidate{std::move(p), r, {}};
      chosen_at = confirm[k];
    }
  }
  alts[chosen_at].chosen = true;
  Plan plan = std::move(chosen->plan);
  plan.alternatives = std::move(alts);
  if (pc.cache == CachePolicyKind::Auto && !ModelSpec::frozen_prefix(plan.frozen_layers).empty() && pc.autopipe) {
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


namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string measure(const RunPlan& r, double v) {
  return r.compression == CompressionKind::Memory ? fmt("%.2f GiB", v / (1024.0 * 1024 * 1024))
                                                  : fmt("%.4g M params", v);
}

// Paper mode accepts strictly below M_GPU^(0); memory mode up to the device.
const char* comparison(CompressionKind kind, bool accepted) {
  if (kind == CompressionKind::Memory) return accepted ? " <= " : " > ";
  return accepted ? " < " : " >= ";
}

std::string epochs_text(const Plan& p) {
  return p.epochs() == 1 ? std::to_string(p.first_epoch)
                         : std::to_string(p.first_epoch) + "-" + std::to_string(p.end_epoch - 1);
}


}  // namespace

std::string format_run_plan(const RunPlan& r, const ModelSpec& spec) {
  std::ostringstream os;
  const Plan& first = r.plans.front();
  os << "plan for " << r.config_source << "\n";
  os << "  model: " << to_string(spec.config.family) << ", L = " << r.L << " layers, "
     << fmt("%.1fM", spec.total_params() / 1e6) << " parameters\n";
  os << "  K0 = " << r.K0 << ", " << first.layout.nodes << " node(s) x " << first.layout.gpus_per_node
     << " GPUs; cost model: " << r.cost_model << "\n";
  if (r.freeze_from_alpha_bound)
    os << "  note: the gradient_norm policy has no gradient norms here; frozen counts are the\n"
          "        alpha bound (an upper bound). Replay a recorded trace with\n"
          "        --set planner.freeze_policy=replay --set planner.replay_grad_norms_file=FILE\n";
  os << "  objective: " << to_string(r.objective)
     << (r.objective == Objective::Time
             ? " (K, partition, M, replicas and cache chosen together for the least predicted time to the end)"
             : " (the paper's proxies: Eq. 2 compression, the configured partitioner, the cache threshold)")
     << "\n";
  os << "  compression: " << to_string(r.compression);
  if (r.compression == CompressionKind::Paper)
    os << ", M_GPU^(0) = " << measure(r, r.compression_limit) << " (largest stage of the initial pipeline)";
  else if (r.compression == CompressionKind::Memory)
    os << ", device memory " << measure(r, r.compression_limit);
  os << "\n\n";

  char line[256];
  std::snprintf(line, sizeof line, "%3s %-7s %7s %3s %-26s %4s %8s %-6s %11s %9s %10s %7s\n", "T",
                "epochs", "frozen", "K", "sublayers per stage", "M", "replicas", "cache", "iters/epoch",
                "iter (s)", "samples/s", "bubble");
  os << line;
  for (const Plan& p : r.plans) {
    const std::string frozen = std::to_string(p.frozen_layers) + "/" + std::to_string(r.L);
    std::snprintf(line, sizeof line, "%3d %-7s %7s %3d %-26s %4d %8d %-6s %11lld %9.3f %10.1f %7.3f\n",
                  p.freeze_step, epochs_text(p).c_str(), frozen.c_str(), p.K, stage_sizes(p.partition).c_str(),
                  p.M, p.layout.replicas, p.cache.on ? to_string(p.cache.tier).c_str() : "off",
                  static_cast<long long>(p.iterations_per_epoch), p.iteration_s, p.samples_per_s,
                  p.bubble_fraction);
    os << line;
    for (const auto& a : p.compression.attempts) {
      os << "      K " << a.from_K << "->" << a.to_K << ": ";
      if (!a.reason.empty())
        os << a.reason;
      else
        os << "M_GPU = " << measure(r, a.m_gpu) << comparison(r.compression, a.accepted) << measure(r, a.limit);
      os << (a.accepted ? "  accepted\n" : "  rejected, K stays " + std::to_string(a.from_K) + "\n");
    }
    if (!p.fits_memory)
      os << "      does not fit: needs " << fmt("%.2f GiB", p.max_device_memory_bytes / (1024.0 * 1024 * 1024))
         << " on the fullest device\n";
  }
  os << "\npartitions ([frozen prefix] stage | stage ...):\n";
  for (const Plan& p : r.plans) os << "  T=" << p.freeze_step << "  " << describe(p.partition, spec) << "\n";
  os << "\nsampler: " << first.layout.nodes << " node shard(s); masked padding slots per epoch:";
  for (const Plan& p : r.plans) os << " T=" << p.freeze_step << ":" << p.padding_slots_per_epoch;
  os << "\n";
  if (r.batch_policy != BatchPolicy::PerPipeline) {  // per_pipeline: batch_size and lr as configured throughout
    os << "batch policy " << to_string(r.batch_policy) << ": samples per pipeline, lr scale:";
    for (const Plan& p : r.plans) os << " T=" << p.freeze_step << ":" << p.batch << "," << fmt("%g", p.lr_scale);
    os << "\n";
  }
  os << "\ncache decisions:\n";
  for (const Plan& p : r.plans)
  {
    os << "  T=" << p.freeze_step << "  " << (p.cache.on ? "on" : "off") << ": " << p.cache.reason;
    if (p.cache_fill_from == 0) os << "; epoch " << p.first_epoch << " fills it";
    if (p.cache_fill_from > 0)
      os << "; epoch " << p.first_epoch << " advances entries from " << p.cache_fill_from << " frozen layers";
    if (p.cache_file_ahead) os << "; the node's file (" << to_string(*p.cache_file_ahead) << ") is made meanwhile";
    os << "\n";
  }
  if (r.objective == Objective::Time) {
    os << "\nalternatives weighed (predicted seconds to the end of training if kept from that step;\n"
          "  c = confirmed by the back end's chunk search and predictor, * = chosen):\n";
    for (const Plan& p : r.plans) {
      bool first = true;
      for (const Alternative& a : p.alternatives) {
        const std::string what = "K=" + std::to_string(a.K) + " M=" + std::to_string(a.M) + " x" +
                                 std::to_string(a.replicas) + (a.cache ? " cache" : "") +
                                 (a.frozen_in_stages ? " frozen in stages" : "");
        std::string flags = std::string(a.fits_memory ? "" : " oom") + (a.confirmed ? " c" : "") + (a.chosen ? " *" : "");
        char row[256];
        std::snprintf(row, sizeof row, "  %-5s %-34s %-22s %12.1f", first ? ("T=" + std::to_string(p.freeze_step)).c_str() : "",
                      what.c_str(), ("[" + a.stages + "]").c_str(), a.remaining_s);
        os << row << flags << "\n";
        first = false;
      }
    }
  }
  os << "\nchunk search (predicted iteration time per M, first plan of each K):\n";
  for (const Plan& p : r.plans) {
    if (p.chunk_table.size() < 2) continue;
    os << "  K=" << p.K << ":";
    for (const auto& cand : p.chunk_table)
      os << " " << cand.M << ":" << fmt("%.3f", cand.iteration_s) << (cand.feasible ? "" : "(oom)");
    os << "  -> M=" << p.M << "\n";
  }
  os << "\npredicted training time: " << fmt("%.1f", r.predicted_total_s()) << " s ("
     << fmt("%.2f", r.predicted_total_s() / 3600) << " h; compute and communication only)\n";
  return os.str();
}

nlohmann::json to_json(const RunPlan& r, const ModelSpec& spec) {
  using nlohmann::json;
  json plans = json::array();
  for (const Plan& p : r.plans) {
    json stages = json::array();
    for (int s = 0; s < p.partition.K(); ++s) {
      const int a = p.partition.bounds[s], b = p.partition.bounds[s + 1];
      stages.push_back({{"stage", s},
                        {"device", s % p.K},
                        {"first_sublayer", spec.sublayers[a].name},
                        {"last_sublayer", spec.sublayers[b - 1].name},
                        {"sublayers", json::array({a, b})},
                        {"load_m_params", p.stage_loads[s]}});
    }
    json attempts = json::array();
    for (const auto& a : p.compression.attempts)
      attempts.push_back({{"from_K", a.from_K}, {"to_K", a.to_K}, {"m_gpu", a.m_gpu}, {"limit", a.limit},
                          {"accepted", a.accepted}, {"reason", a.reason}});
    json chunks = json::array();
    for (const auto& cnd : p.chunk_table)
      chunks.push_back({{"M", cnd.M}, {"iteration_s", cnd.iteration_s}, {"bubble_fraction", cnd.bubble_fraction},
                        {"memory_bytes", cnd.memory_bytes}, {"feasible", cnd.feasible}});
    json replicas = json::array();
    for (const auto& rep : p.layout.replica)
      replicas.push_back({{"rank", rep.rank}, {"node", rep.node}, {"local_rank", rep.local_rank}, {"gpus", rep.gpus}});
    json onboarding = json::array();
    for (const auto& o : p.onboarding) onboarding.push_back({{"rank", o.rank}, {"source", o.source}});
    json roles = json::array();
    for (int e = p.first_epoch; e < p.end_epoch; ++e) roles.push_back(to_string(p.cache_role(e)));
    json alternatives = json::array();
    for (const auto& a : p.alternatives)
      alternatives.push_back({{"K", a.K}, {"M", a.M}, {"replicas", a.replicas}, {"cache", a.cache},
                              {"frozen_in_stages", a.frozen_in_stages},
                              {"stages", a.stages}, {"iteration_s", a.iteration_s},
                              {"fill_iteration_s", a.fill_iteration_s}, {"transition_s", a.transition_s},
                              {"remaining_s", a.remaining_s}, {"fits_memory", a.fits_memory},
                              {"confirmed", a.confirmed}, {"chosen", a.chosen}});
    plans.push_back({{"id", p.id},
                     {"freeze_step", p.freeze_step},
                     {"epochs", json::array({p.first_epoch, p.end_epoch})},
                     {"frozen_layers", p.frozen_layers},
                     {"frozen_sublayers", json::array({0, p.partition.frozen_end})},
                     {"K", p.K},
                     {"v", p.v},
                     {"stages", stages},
                     {"compression", attempts},
                     {"M", p.M},
                     {"chunk_search", chunks},
                     {"replicas", p.layout.replicas},
                     {"active_ranks", p.layout.active_ranks},
                     {"woken_ranks", p.woken_ranks},
                     {"onboarding", onboarding},
                     {"recomputed_microbatches", p.recomputed_microbatches},
                     {"predicted_transition_s", p.predicted_transition_s},
                     {"cache_roles", roles},
                     {"alternatives", alternatives},
                     {"lr_scale", p.lr_scale},
                     {"batch", p.batch},
                     {"layout", replicas},
                     {"cache", {{"on", p.cache.on}, {"tier", to_string(p.cache.tier)},
                                {"fill_from_layers", p.cache_fill_from}, {"fill_iteration_s", p.fill_iteration_s},
                                {"file_ahead", p.cache_file_ahead ? json(to_string(*p.cache_file_ahead)) : json()},
                                {"bytes_per_node", p.cache.bytes_per_node}, {"read_s", p.cache.read_s},
                                {"frozen_forward_s", p.cache.frozen_forward_s}, {"reason", p.cache.reason}}},
                     {"iterations_per_epoch", p.iterations_per_epoch},
                     {"padding_slots_per_epoch", p.padding_slots_per_epoch},
                     {"iteration_s", p.iteration_s},
                     {"bubble_fraction", p.bubble_fraction},
                     {"samples_per_s", p.samples_per_s},
                     {"max_device_memory_bytes", p.max_device_memory_bytes},
                     {"fits_memory", p.fits_memory}});
  }
  return {{"schema", "elasticpipe.plan/1"},
          {"config", r.config_source},
          {"cost_model", r.cost_model},
          {"L", r.L},
          {"K0", r.K0},
          {"objective", to_string(r.objective)},
          {"batch_policy", to_string(r.batch_policy)},
          {"reachable_K", r.reachable_K},
          {"compression", to_string(r.compression)},
          {"compression_limit", r.compression_limit},
          {"freeze_from_alpha_bound", r.freeze_from_alpha_bound},
          {"predicted_total_s", r.predicted_total_s()},
          {"plans", plans}};
}

}  // namespace ep

#include "planner/run_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "planner/freeze.hpp"

namespace ep {

double RunPlan::predicted_total_s() const {
  double total = 0;
  for (const Plan& p : plans) {
    const int fill = p.cache_fill_from >= 0 ? 1 : 0;
    total += p.iterations_per_epoch * ((p.epochs() - fill) * p.iteration_s + fill * p.fill_iteration_s);
  }
  return total;
}

ReplicaLayout replica_layout(const Config& c, int K) {
  return c.planner.autodp ? autodp_layout(c.cluster, K) : fixed_replicas_layout(c.cluster, K, c.planner.K);
}

IterationSetup iteration_setup(const Config& c, const Plan& p, bool fill) {
  IterationSetup s{p.partition, p.K, p.v, p.M, p.layout.replicas, c.cluster.nodes > 1,
                   p.cache.on, p.cache.tier, -1};
  if (fill && p.cache_fill_from >= 0) s.cache_valid_layers = p.cache_fill_from;
  return s;
}

RunPlanner::RunPlanner(const Config& c, const CostModel& cost, const IterationPredictor& predictor)
    : ctx_(c, cost),
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
  run_.compression_limit = compression_limit(ctx_);
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
  Plan plan;
  plan.id = T;
  plan.freeze_step = T;
  plan.first_epoch = T * pc.freeze_interval_epochs;
  plan.end_epoch = std::min(c.training.epochs, (T + 1) * pc.freeze_interval_epochs);
  plan.frozen_layers = frozen_layers;
  plan.v = pc.virtual_stages;
  // The cache is judged per sample of a whole per-pipeline batch: the
  // read/recompute comparison does not depend on how it is split.
  const auto measured = measured_cache_.find(plan.frozen_layers);
  plan.cache = decide_cache(c, ctx_.spec, ctx_.cost, plan.frozen_layers, c.training.batch_size,
                            measured == measured_cache_.end() ? nullptr : &measured->second);
  const bool moved = T > 0 && plan.frozen_layers > run_.plans.back().frozen_layers;
  if (pc.autopipe && moved) {
    plan.compression = compress(ctx_, plan.frozen_layers, K_, plan.cache.on);
    K_ = plan.compression.K;
  }
  const int K = K_;
  plan.K = K;
  plan.partition = plan_partition(ctx_, plan.frozen_layers, K * plan.v, plan.cache.on);
  plan.layout = replica_layout(c, K);
  if (T > 0) plan.woken_ranks = plan.layout.newly_active(run_.plans.back().layout);
  if (c.training.batch_policy == BatchPolicy::LrScaled && T > 0)
    plan.lr_scale = static_cast<double>(plan.layout.replicas) / run_.plans.front().layout.replicas;
  plan.stage_loads = stage_loads_paper(ctx_.spec, plan.partition, pc.lambda_frozen);

  if (plan.cache.on) {
    const bool valid = !run_.plans.empty() && run_.plans.back().cache.on &&
                       run_.plans.back().frozen_layers == plan.frozen_layers;
    if (!valid) plan.cache_fill_from = cached_layers_;
    cached_layers_ = plan.frozen_layers;
  }
  IterationSetup setup{plan.partition, K, plan.v, 0, plan.layout.replicas, c.cluster.nodes > 1,
                       plan.cache.on, plan.cache.tier, -1};
  const bool first_with_K =
      std::none_of(run_.plans.begin(), run_.plans.end(), [&](const Plan& p) { return p.K == K; });
  const ChunkChoice& choice = search_.choose(setup);
  if (first_with_K) plan.chunk_table = choice.table;
  plan.M = choice.M;
  std::vector<IterationSetup> setups{iteration_setup(c, plan, false)};
  if (plan.cache_fill_from >= 0) setups.push_back(iteration_setup(c, plan, true));
  const std::vector<IterationPrediction> t = predict_(setups, PredictionUse::Plan);
  plan.iteration_s = t[0].iteration_s;
  plan.bubble_fraction = t[0].bubble_fraction;
  if (plan.cache_fill_from >= 0) plan.fill_iteration_s = t[1].iteration_s;
  plan.max_device_memory_bytes = max_device_memory(ctx_.spec, c.training, plan.partition, K, plan.M);
  plan.fits_memory = plan.max_device_memory_bytes <= c.cluster.device.memory_bytes;
  plan.iterations_per_epoch =
      iterations_in_epoch(sampler_, 0, plan.layout.pipelines_per_node, c.training.batch_size);
  plan.padding_slots_per_epoch =
      padding_slots(sampler_, plan.layout.pipelines_per_node, c.training.batch_size);
  plan.samples_per_s = plan.layout.replicas * static_cast<double>(c.training.batch_size) / plan.iteration_s;
  run_.plans.push_back(std::move(plan));
  return run_.plans.back();
}

RunPlan plan_run(const Config& c, const CostModel& cost, const IterationPredictor& predictor) {
  RunPlanner planner(c, cost, predictor);
  const FreezeTimeline freeze = freeze_timeline(c, planner.freeze_steps());
  for (int T = 0; T <= planner.freeze_steps(); ++T) planner.next(freeze.frozen[T]);
  RunPlan run = planner.run();
  run.freeze_from_alpha_bound = freeze.used_alpha_bound;
  return run;
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

std::string stage_sizes(const Partition& p) {
  std::string out;
  for (int s = 0; s < p.K(); ++s)
    out += (s ? "," : "") + std::to_string(p.bounds[s + 1] - p.bounds[s]);
  return out;
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
  os << "\ncache decisions:\n";
  for (const Plan& p : r.plans)
  {
    os << "  T=" << p.freeze_step << "  " << (p.cache.on ? "on" : "off") << ": " << p.cache.reason;
    if (p.cache_fill_from == 0) os << "; epoch " << p.first_epoch << " fills it";
    if (p.cache_fill_from > 0)
      os << "; epoch " << p.first_epoch << " advances entries from " << p.cache_fill_from << " frozen layers";
    os << "\n";
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
                     {"lr_scale", p.lr_scale},
                     {"layout", replicas},
                     {"cache", {{"on", p.cache.on}, {"tier", to_string(p.cache.tier)},
                                {"fill_from_layers", p.cache_fill_from}, {"fill_iteration_s", p.fill_iteration_s},
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
          {"compression", to_string(r.compression)},
          {"compression_limit", r.compression_limit},
          {"freeze_from_alpha_bound", r.freeze_from_alpha_bound},
          {"predicted_total_s", r.predicted_total_s()},
          {"plans", plans}};
}

}  // namespace ep

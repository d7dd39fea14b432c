// The run plan as text (`elasticpipe plan`) and as JSON (plan.json,
// elasticpipe.plan/1): what the planner decided, for people and scripts.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "planner/run_figures.hpp"
#include "planner/run_plan.hpp"

namespace ep {

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


// Objective "time": what each step weighed, the kept plan among them.
void format_alternatives(std::ostream& os, const RunPlan& r) {
  os << "\nalternatives weighed (predicted seconds to the end of training: kept from that step on, and for\n"
        "  those the back end confirmed (c) with every later step acted on or not, which decides;\n"
        "  kept = the previous plan unchanged, the freeze step not acted on; * = chosen):\n";
  for (const Plan& p : r.plans) {
    bool first = true;
    for (const Alternative& a : p.alternatives) {
      const std::string what = (a.kept ? "kept, " + std::to_string(a.frozen_layers) + " frozen: " : std::string()) +
                               "K=" + std::to_string(a.K) + " M=" + std::to_string(a.M) + " x" +
                               std::to_string(a.replicas) + (a.cache ? " cache" : "") +
                               (a.frozen_in_stages ? " frozen in stages" : "");
      const std::string flags = std::string(a.fits_memory ? "" : " oom") + (a.confirmed ? " c" : "") + (a.chosen ? " *" : "");
      const std::string to_end = a.to_end_s > 0 ? fmt("%12.1f", a.to_end_s) : std::string(12, ' ');
      char row[320];
      std::snprintf(row, sizeof row, "  %-5s %-44s %-22s %12.1f %s", first ? ("T=" + std::to_string(p.freeze_step)).c_str() : "",
                    what.c_str(), ("[" + a.stages + "]").c_str(), a.remaining_s, to_end.c_str());
      std::string line = row + flags;
      line.erase(line.find_last_not_of(' ') + 1);
      os << line << "\n";
      first = false;
    }
  }
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

  char line[320];
  std::snprintf(line, sizeof line, "%3s %-7s %7s %3s %-26s %4s %8s %-6s %7s %11s %9s %10s %7s %7s %6s\n", "T",
                "epochs", "frozen", "K", "sublayers per stage", "M", "replicas", "cache", "batch", "iters/epoch",
                "iter (s)", "samples/s", "bubble", "mem GiB", "util");
  os << line;
  for (const Plan& p : r.plans) {
    const std::string inside = p.partition.frozen_inside.empty() ? "" : "+" + std::to_string(p.partition.frozen_inside.size());
    const std::string frozen = std::to_string(p.frozen_layers) + inside + "/" + std::to_string(r.L);
    std::snprintf(line, sizeof line, "%3d %-7s %7s %3d %-26s %4d %8d %-6s %7lld %11lld %9.3f %10.1f %7.3f %7.2f %5.1f%%\n",
                  p.freeze_step, epochs_text(p).c_str(), frozen.c_str(), p.K, stage_sizes(p.partition).c_str(),
                  p.M, p.layout.replicas, p.cache.on ? to_string(p.cache.tier).c_str() : "off",
                  static_cast<long long>(global_batch(p)), static_cast<long long>(p.iterations_per_epoch),
                  p.iteration_s, p.samples_per_s, p.bubble_fraction, p.max_device_memory_bytes / (1024.0 * 1024 * 1024),
                  100 * plan_utilisation(spec, p, r.peak_flops_per_s));
    os << line;
    if (!p.freeze_reason.empty())
      os << "      freeze step (policy: " << describe(p.allowed_set()) << "): " << p.freeze_reason << "\n";
    if (!p.frozen_set_reason.empty()) os << "      frozen set chosen by time: " << p.frozen_set_reason << "\n";
    if (!p.partition.frozen_inside.empty())
      os << "      layers frozen inside, per stage: " << frozen_inside_by_stage(p.partition) << "\n";
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
  os << "batch policy " << to_string(r.batch_policy)
     << (r.batch_policy == BatchPolicy::Global ? " (the same global batch and updates in every plan)"
                                               : " (the global batch grows with the replicas)")
     << ": samples per pipeline, lr scale:";
  for (const Plan& p : r.plans) os << " T=" << p.freeze_step << ":" << p.batch << "," << fmt("%g", p.lr_scale);
  os << "\n";
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
  if (r.objective == Objective::Time) format_alternatives(os, r);
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
      alternatives.push_back({{"frozen_layers", a.frozen_layers}, {"kept", a.kept}, {"K", a.K}, {"M", a.M}, {"replicas", a.replicas}, {"cache", a.cache},
                              {"frozen_in_stages", a.frozen_in_stages},
                              {"stages", a.stages}, {"iteration_s", a.iteration_s},
                              {"fill_iteration_s", a.fill_iteration_s}, {"transition_s", a.transition_s},
                              {"remaining_s", a.remaining_s}, {"to_end_s", a.to_end_s}, {"fits_memory", a.fits_memory},
                              {"confirmed", a.confirmed}, {"chosen", a.chosen}});
    plans.push_back({{"id", p.id},
                     {"freeze_step", p.freeze_step},
                     {"epochs", json::array({p.first_epoch, p.end_epoch})},
                     {"frozen_layers", p.frozen_layers},
                     {"frozen_allowed", p.frozen_allowed},
                     {"freeze_reason", p.freeze_reason},
                     {"cache_probed", p.cache_probed},
                     {"frozen_sublayers", json::array({0, p.partition.frozen_end})},
                     {"frozen_inside", p.partition.frozen_inside},
                     {"frozen_inside_allowed", p.frozen_inside_allowed},
                     {"frozen_set_reason", p.frozen_set_reason},
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
                     {"global_batch", global_batch(p)},
                     {"utilisation", plan_utilisation(spec, p, r.peak_flops_per_s)},
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
  return {{"schema", "elasticpipe.plan/2"},
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
          {"peak_flops_per_s", r.peak_flops_per_s},
          {"predicted_total_s", r.predicted_total_s()},
          {"plans", plans}};
}

}  // namespace ep

#include "planner/fitted_cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

#include <Eigen/Dense>

#include "planner/error.hpp"
#include "planner/stats.hpp"

namespace ep {

namespace {

// One sample of a term: its two features and the measured time.
struct Row {
  double fa;
  double fc;
  double t;
};

double relative_cost(const std::vector<Row>& rows, double a, double c) {
  double cost = 0;
  for (const Row& r : rows) {
    const double e = (a * r.fa + c * r.fc - r.t) / r.t;
    cost += e * e;
  }
  return cost;
}

// Least squares with one coefficient only, clamped at 0: minimises
// sum((x·f/t − 1)²) over x >= 0.
double one_coefficient(const std::vector<Row>& rows, bool use_a) {
  double num = 0, den = 0;
  for (const Row& r : rows) {
    const double f = (use_a ? r.fa : r.fc) / r.t;
    num += f;
    den += f * f;
  }
  return den > 0 ? std::max(0.0, num / den) : 0.0;
}

// `need` says, for the error, what samples would separate a from c.
LinearFit fit(std::string name, std::string form, const std::vector<Row>& rows,
              const std::string& need) {
  const auto n = static_cast<Eigen::Index>(rows.size());
  // Each row divided by its measured time: relative residuals (see header).
  Eigen::MatrixXd X(n, 2);
  Eigen::VectorXd y = Eigen::VectorXd::Ones(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    X(i, 0) = rows[i].fa / rows[i].t;
    X(i, 1) = rows[i].fc / rows[i].t;
  }
  // Columns scaled to unit norm: bytes run to 1e9 against an intercept of 1,
  // and the rank test below must not see that as degeneracy.
  const Eigen::Vector2d scale(X.col(0).norm(), X.col(1).norm());
  Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr;
  bool full_rank = n >= 2 && scale(0) > 0 && scale(1) > 0;
  if (full_rank) {
    const Eigen::MatrixXd Xs = X * scale.cwiseInverse().asDiagonal();
    qr.setThreshold(1e-9);
    qr.compute(Xs);
    full_rank = qr.rank() == 2;
  }
  if (!full_rank)
    throw Error("fitting the cost model: " + name + " (" + form +
                "): the samples cannot separate a from c; need " + need + ", found " +
                std::to_string(n) + " sample(s) that do not");
  const Eigen::Vector2d x = qr.solve(y).cwiseQuotient(scale);

  double a = x(0), c = x(1);
  bool clamped = false;
  if (a < 0 || c < 0) {
    // The optimum under a, c >= 0 lies on the face where one is 0.
    const double only_a = one_coefficient(rows, true);
    const double only_c = one_coefficient(rows, false);
    const bool keep_a = relative_cost(rows, only_a, 0) <= relative_cost(rows, 0, only_c);
    a = keep_a ? only_a : 0;
    c = keep_a ? 0 : only_c;
    clamped = true;
  }

  LinearFit f;
  f.name = std::move(name);
  f.form = std::move(form);
  f.a = a;
  f.c = c;
  f.samples = static_cast<int>(n);
  f.clamped = clamped;
  double mean = 0;
  for (const Row& r : rows) mean += r.t;
  mean /= static_cast<double>(n);
  double ss_res = 0, ss_tot = 0, sq_rel = 0;
  for (const Row& r : rows) {
    const double predicted = a * r.fa + c * r.fc;
    ss_res += (predicted - r.t) * (predicted - r.t);
    ss_tot += (r.t - mean) * (r.t - mean);
    const double rel = (predicted - r.t) / r.t;
    sq_rel += rel * rel;
    f.max_rel_residual = std::max(f.max_rel_residual, std::abs(rel));
  }
  // All times equal: nothing to explain; R² says how well the constant fits.
  f.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : (ss_res == 0 ? 1.0 : 0.0);
  f.rms_rel_residual = std::sqrt(sq_rel / static_cast<double>(n));
  return f;
}

constexpr std::array<SublayerKind, 4> kKinds = {SublayerKind::Stem, SublayerKind::Attention,
                                                SublayerKind::Mlp, SublayerKind::Head};
constexpr std::array<ComputeOp, 5> kOps = {ComputeOp::Forward, ComputeOp::Backward, ComputeOp::FrozenForward,
                                           ComputeOp::ForwardAgain, ComputeOp::BackwardInput};

// The kinds a layer frozen inside holds: what backward_input is timed for.
bool freezes_inside(SublayerKind k) { return k == SublayerKind::Attention || k == SublayerKind::Mlp; }

std::string op_name(ComputeOp op) {
  switch (op) {
    case ComputeOp::Forward: return "forward";
    case ComputeOp::Backward: return "backward";
    case ComputeOp::FrozenForward: return "frozen_forward";
    case ComputeOp::ForwardAgain: return "forward_again";
    case ComputeOp::BackwardInput: return "backward_input";
  }
  return "?";
}

std::string tier_name(CacheTier t) { return t == CacheTier::HostMemory ? "host" : "disk"; }
std::string op_name(CacheOp op) { return op == CacheOp::Read ? "read" : "write"; }

// The time from a fit, or the fallback's.
template <typename Fallback>
double affine_or(const std::optional<LinearFit>& f, double x, Fallback fallback) {
  return f ? f->a + f->c * x : fallback();
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s + "  ";
}

}  // namespace

FittedCostModel::FittedCostModel(const Profile& profile, const CostModel& fallback)
    : fallback_(fallback),
      environment_(profile.environment),
      model_(profile.model),
      transitions_(profile.transitions),
      cache_probes_(profile.cache_probes) {
  // A profile built in code gets the same checks as one read from a file.
  check_profile(profile, "profile");

  std::string missing;
  const auto measured = [&](ComputeOp op) {
    return std::any_of(profile.compute.begin(), profile.compute.end(),
                       [&](const ComputeSample& s) { return s.op == op_name(op); });
  };
  fits_.forward_again = measured(ComputeOp::ForwardAgain);
  fits_.backward_input = measured(ComputeOp::BackwardInput);
  for (const ComputeSample& s : profile.compute)
    if (s.op == op_name(ComputeOp::BackwardInput) && s.sublayer_kind != "attention" && s.sublayer_kind != "mlp")
      throw Error("fitting the cost model: the profile has backward_input samples for " + s.sublayer_kind +
                  ", expected attention and mlp only (the sublayers of a layer frozen inside)");
  for (SublayerKind kind : kKinds) {
    for (ComputeOp op : kOps) {
      if (op == ComputeOp::ForwardAgain && !fits_.forward_again) continue;
      if (op == ComputeOp::BackwardInput && !(fits_.backward_input && freezes_inside(kind))) continue;
      std::vector<Row> rows;
      for (const ComputeSample& s : profile.compute)
        if (s.sublayer_kind == to_string(kind) && s.op == op_name(op))
          rows.push_back({1, static_cast<double>(s.samples), s.seconds});
      const std::string name = "compute " + to_string(kind) + "/" + op_name(op);
      if (rows.empty()) {
        missing += (missing.empty() ? "" : ", ") + to_string(kind) + "/" + op_name(op);
        continue;
      }
      fits_.compute[static_cast<int>(kind)][static_cast<int>(op)] =
          fit(name, "a + c*samples", rows, "at least two distinct micro-batch sizes");
      std::map<int, std::vector<double>> by_size;
      for (const Row& r : rows) by_size[static_cast<int>(r.fc)].push_back(r.t);
      auto& points = compute_points_[static_cast<int>(kind)][static_cast<int>(op)];
      for (auto& [b, t] : by_size) points.emplace_back(b, median(std::move(t)));
    }
  }
  if (!missing.empty())
    throw Error("fitting the cost model: the profile has no compute samples for " + missing +
                " (every sublayer kind needs forward, backward and frozen_forward, forward_again "
                "when any kind has it, and attention and mlp need backward_input when either has it)");

  if (!profile.p2p.empty()) {
    std::vector<Row> rows;
    for (const TransferSample& s : profile.p2p) rows.push_back({1, s.bytes, s.seconds});
    fits_.p2p = fit("p2p", "a + c*bytes", rows, "at least two distinct byte counts");
  }

  if (!profile.allreduce.empty()) {
    std::vector<Row> rows;
    for (const AllReduceSample& s : profile.allreduce) {
      if (s.ranks < 2) continue;  // the form fixes n = 1 at 0 s
      const double n = s.ranks;
      rows.push_back({2 * (n - 1), 2 * (n - 1) / n * s.bytes, s.seconds});
    }
    if (rows.empty())
      throw Error(
          "fitting the cost model: allreduce: every sample has ranks = 1, which the ring form "
          "fixes at 0 s; need samples with ranks >= 2");
    fits_.allreduce = fit("allreduce", "a*2(n-1) + c*2(n-1)/n*bytes", rows,
                          "at least two distinct values of bytes/ranks");
  }

  for (CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk}) {
    for (CacheOp op : {CacheOp::Read, CacheOp::Write}) {
      std::vector<Row> rows;
      for (const CacheSample& s : profile.cache)
        if (s.tier == tier_name(tier) && s.op == op_name(op)) rows.push_back({1, s.bytes, s.seconds});
      if (rows.empty()) continue;
      fits_.cache[static_cast<int>(tier)][static_cast<int>(op)] =
          fit("cache " + tier_name(tier) + "/" + op_name(op), "a + c*bytes", rows,
              "at least two distinct byte counts");
    }
  }

  const auto per_params = [&](const std::vector<OptimizerSample>& samples, const std::string& name) {
    std::optional<LinearFit> f;
    std::vector<Row> rows;
    for (const OptimizerSample& s : samples) rows.push_back({1, s.params, s.seconds});
    if (!rows.empty()) f = fit(name, "a + c*params", rows, "at least two distinct parameter counts");
    return f;
  };
  fits_.optimizer = per_params(profile.optimizer, "optimizer");
  fits_.grad_norms = per_params(profile.grad_norms, "gradient norms");
}

double FittedCostModel::compute_s(const Sublayer& s, ComputeOp op, int samples) const {
  const double c = fits_.compute_fit(s.kind, op).c;
  const auto& points = compute_points_[static_cast<int>(s.kind)][static_cast<int>(op)];
  const auto above = std::lower_bound(points.begin(), points.end(), samples,
                                      [](const std::pair<int, double>& p, int b) { return p.first < b; });
  // Outside the measured sizes: the nearest one, moved along the fit's slope.
  if (above == points.begin()) return std::max(0.0, above->second + c * (samples - above->first));
  if (above == points.end()) return points.back().second + c * (samples - points.back().first);
  const auto below = std::prev(above);
  const double w = static_cast<double>(samples - below->first) / (above->first - below->first);
  return below->second + w * (above->second - below->second);
}

double FittedCostModel::forward_s(const Sublayer& s, int samples) const {
  return compute_s(s, ComputeOp::Forward, samples);
}

double FittedCostModel::forward_again_s(const Sublayer& s, int samples) const {
  return compute_s(s, fits_.forward_again ? ComputeOp::ForwardAgain : ComputeOp::Forward, samples);
}

double FittedCostModel::backward_s(const Sublayer& s, int samples) const {
  return compute_s(s, ComputeOp::Backward, samples);
}

double FittedCostModel::backward_input_s(const Sublayer& s, int samples) const {
  if (fits_.backward_input && freezes_inside(s.kind)) return compute_s(s, ComputeOp::BackwardInput, samples);
  return CostModel::backward_input_s(s, samples);
}

double FittedCostModel::frozen_forward_s(const Sublayer& s, int samples) const {
  return compute_s(s, ComputeOp::FrozenForward, samples);
}

double FittedCostModel::p2p_s(double bytes, LinkKind kind) const {
  return affine_or(fits_.p2p, bytes, [&] { return fallback_.p2p_s(bytes, kind); });
}

double FittedCostModel::allreduce_s(double bytes, int ranks, LinkKind slowest_link) const {
  if (!fits_.allreduce) return fallback_.allreduce_s(bytes, ranks, slowest_link);
  if (ranks <= 1) return 0;
  const double n = ranks;
  return fits_.allreduce->a * 2 * (n - 1) + fits_.allreduce->c * 2 * (n - 1) / n * bytes;
}

double FittedCostModel::cache_read_s(double bytes, CacheTier tier) const {
  return affine_or(fits_.cache_fit(tier, CacheOp::Read), bytes,
                   [&] { return fallback_.cache_read_s(bytes, tier); });
}

double FittedCostModel::cache_write_s(double bytes, CacheTier tier) const {
  return affine_or(fits_.cache_fit(tier, CacheOp::Write), bytes,
                   [&] { return fallback_.cache_write_s(bytes, tier); });
}

double FittedCostModel::optimizer_step_s(double params) const {
  return affine_or(fits_.optimizer, params, [&] { return fallback_.optimizer_step_s(params); });
}

double FittedCostModel::grad_norms_s(double params) const {
  return affine_or(fits_.grad_norms, params, [] { return 0.0; });
}

namespace {

// Every term in the report's order: its fit, or nullptr where no sample
// fits it ("compute */forward_again" times as forward, "compute
// */backward_input" as the backward by its FLOP share; "gradient norms"
// are inside the optimizer step; the others the fallback times).
void each_term(const FittedCoefficients& fits, const std::function<void(const std::string&, const LinearFit*)>& f) {
  for (const auto& per_kind : fits.compute)
    for (const LinearFit& fit : per_kind)
      if (!fit.name.empty()) f(fit.name, &fit);
  if (!fits.forward_again) f("compute */forward_again", nullptr);
  if (!fits.backward_input) f("compute */backward_input", nullptr);
  f("p2p", fits.p2p ? &*fits.p2p : nullptr);
  f("allreduce", fits.allreduce ? &*fits.allreduce : nullptr);
  for (CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk})
    for (CacheOp op : {CacheOp::Read, CacheOp::Write}) {
      const auto& fit = fits.cache_fit(tier, op);
      f("cache " + tier_name(tier) + "/" + op_name(op), fit ? &*fit : nullptr);
    }
  f("optimizer", fits.optimizer ? &*fits.optimizer : nullptr);
  f("gradient norms", fits.grad_norms ? &*fits.grad_norms : nullptr);
}

bool timed_by_fallback(const std::string& term) {
  return term != "compute */forward_again" && term != "compute */backward_input" && term != "gradient norms";
}

}  // namespace

std::vector<std::string> FittedCostModel::cautions() const {
  std::vector<std::string> out;
  each_term(fits_, [&](const std::string& name, const LinearFit* f) {
    if (!f && timed_by_fallback(name))
      out.push_back(name + ": no samples in the profile: timed by the " + fallback_.name() + " model");
    if (f && f->rms_rel_residual > kTrustedRmsRelResidual)
      out.push_back(name + ": its fit (" + f->form + ") misses its samples by " + sci(100 * f->rms_rel_residual) +
                    "% rms (R^2 " + sci(f->r2) + "), more than the " + sci(100 * kTrustedRmsRelResidual) +
                    "% a fit is trusted within: the samples disagree (a noisy machine?); profile again on a quiet one");
  });
  return out;
}

std::string FittedCostModel::describe() const {
  std::string out = "fitted cost model\n";
  out += "  environment: " + (environment_.empty() ? std::string("(not given)") : environment_) + "\n";
  out += "  model:       " + (model_.empty() ? std::string("(not given)") : model_) + "\n";
  out += "  least squares on relative residuals; a, c >= 0 (* = one fixed at 0);\n"
         "  a, c in seconds per unit of their factor (1, samples, bytes, params)\n\n";
  constexpr std::size_t w_term = 34, w_form = 28, w_num = 11, w_n = 4, w_stat = 9;
  out += "  " + pad("term", w_term) + pad("form", w_form) + pad("a", w_num) + pad("c", w_num) +
         pad("n", w_n) + pad("R^2", w_stat) + pad("rms rel", w_stat) + "max rel\n";
  each_term(fits_, [&](const std::string& name, const LinearFit* f) {
    if (f) {
      out += "  " + pad(f->name, w_term) + pad(f->form, w_form) + pad(sci(f->a), w_num) +
             pad(sci(f->c) + (f->clamped ? "*" : ""), w_num) + pad(std::to_string(f->samples), w_n) +
             pad(sci(f->r2), w_stat) + pad(sci(f->rms_rel_residual), w_stat) + sci(f->max_rel_residual) + "\n";
      return;
    }
    const std::string instead = name == "gradient norms"             ? "inside the optimizer step"
                                : name == "compute */forward_again"  ? "forward"
                                : name == "compute */backward_input" ? "backward by its FLOP share"
                                                                     : fallback_.name() + " model";
    out += "  " + pad(name, w_term) + "no samples: " + instead + "\n";
  });

  // Derived quantities a reader checks first against the hardware's sheet.
  const auto bandwidth = [](const LinearFit& f) {
    return f.c > 0 ? sci(1 / f.c / 1e9) + " GB/s" : std::string("unbounded");
  };
  out += "\n";
  if (fits_.p2p)
    out += "  p2p: latency " + sci(fits_.p2p->a) + " s, bandwidth " + bandwidth(*fits_.p2p) + "\n";
  if (fits_.allreduce)
    out += "  allreduce: per-step latency " + sci(fits_.allreduce->a) + " s, bus bandwidth " +
           bandwidth(*fits_.allreduce) + "\n";

  if (!transitions_.empty()) {
    // Not cost-model terms: reported for the simulator's transition constants.
    std::map<std::string, std::pair<int, double>> by_what;
    for (const TransitionSample& t : transitions_) {
      auto& [count, sum] = by_what[t.what];
      ++count;
      sum += t.seconds;
    }
    out += "  transitions (measured, not fitted):";
    for (const auto& [what, stat] : by_what)
      out += " " + what + " mean " + sci(stat.second / stat.first) + " s (n=" +
             std::to_string(stat.first) + ");";
    out.back() = '\n';
  }
  if (!cache_probes_.empty()) {
    out += "  cache probes (timed whole, set up):";
    for (const CacheProbeSample& p : cache_probes_)
      out += " " + std::to_string(p.frozen_layers) + " frozen, batch " + std::to_string(p.samples) + ": " +
             sci(p.seconds) + " s;";
    out.back() = '\n';
  }
  return out;
}

std::optional<CostModel::RebuildSample> FittedCostModel::group_rebuild(int ranks) const {
  const TransitionSample* best = nullptr;
  for (const TransitionSample& t : transitions_)
    if (t.what == "group_rebuild" && (!best || std::abs(t.ranks - ranks) < std::abs(best->ranks - ranks))) best = &t;
  if (!best) return std::nullopt;
  return RebuildSample{best->ranks, best->seconds};
}

// The sample of `what` nearest in bytes, scaled to `bytes`.
std::optional<double> FittedCostModel::per_byte(const std::string& what, double bytes) const {
  const TransitionSample* best = nullptr;
  for (const TransitionSample& t : transitions_)
    if (t.what == what && t.bytes > 0 && (!best || std::abs(t.bytes - bytes) < std::abs(best->bytes - bytes)))
      best = &t;
  if (!best) return std::nullopt;
  return best->seconds * bytes / best->bytes;
}

std::optional<double> FittedCostModel::state_pack_s(double bytes) const { return per_byte("state_pack_unpack", bytes); }

std::optional<double> FittedCostModel::cache_create_s(double bytes, CacheTier tier) const {
  if (const std::optional<double> measured = per_byte(cache_create_what(tier_name(tier)), bytes)) return measured;
  return fallback_.cache_create_s(bytes, tier);
}

std::optional<double> FittedCostModel::cache_probe_setup_s(double bytes) const {
  return per_byte(kCacheProbeSetupWhat, bytes);
}

// The mean of the samples of `what`, which no size scales.
std::optional<double> FittedCostModel::mean_of(std::string_view what) const {
  double sum = 0;
  int n = 0;
  for (const TransitionSample& t : transitions_)
    if (t.what == what) {
      sum += t.seconds;
      ++n;
    }
  if (n == 0) return std::nullopt;
  return sum / n;
}

std::optional<double> FittedCostModel::first_iteration_s() const { return mean_of(kFirstIterationWhat); }

std::optional<double> FittedCostModel::device_context_s() const { return mean_of(kDeviceContextWhat); }

std::optional<double> FittedCostModel::freeze_warmup_s() const { return mean_of(kFreezeWarmupWhat); }

}  // namespace ep

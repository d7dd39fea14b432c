#include "planner/freeze.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "planner/input_file.hpp"
#include "planner/partition.hpp"  // layer_list
#include "planner/registry.hpp"

namespace ep {

double alpha_bound_real(int L, double frozen_before, double alpha) {
  return frozen_before + alpha * (L - frozen_before);
}

double alpha_bound_closed_form(int L, int T, double alpha) {
  return L * (1.0 - std::pow(1.0 - alpha, T));
}

int alpha_bound(int L, int frozen_before, double alpha, FreezeRounding rounding, int min_active) {
  const double x = alpha_bound_real(L, frozen_before, alpha);
  // A tiny tolerance so that e.g. 4.0000000001 or 3.9999999999 from
  // floating point round as the exact value they stand for.
  constexpr double eps = 1e-9;
  int n = 0;
  switch (rounding) {
    case FreezeRounding::FloorProgress:
      n = std::max(static_cast<int>(std::floor(x + eps)), x > frozen_before + eps ? frozen_before + 1 : frozen_before);
      break;
    case FreezeRounding::Floor: n = static_cast<int>(std::floor(x + eps)); break;
    case FreezeRounding::Round: n = static_cast<int>(std::lround(x)); break;
    case FreezeRounding::Ceil: n = static_cast<int>(std::ceil(x - eps)); break;
  }
  return std::clamp(n, frozen_before, std::max(frozen_before, L - min_active));
}

namespace {

class NoFreeze final : public FreezePolicy {
 public:
  std::string name() const override { return "none"; }
  int next(int, int frozen_before, std::span<const double>) const override { return frozen_before; }
};

class AlphaPolicy final : public FreezePolicy {
 public:
  AlphaPolicy(int L, const PlannerConfig& p) : L_(L), p_(p) {}
  std::string name() const override { return "alpha"; }
  int next(int, int frozen_before, std::span<const double>) const override {
    return alpha_bound(L_, frozen_before, p_.alpha, p_.freeze_rounding, p_.min_active_layers);
  }

 private:
  int L_;
  PlannerConfig p_;
};

class GradientNormPolicy final : public FreezePolicy {
 public:
  GradientNormPolicy(int L, const PlannerConfig& p) : L_(L), p_(p) {}
  std::string name() const override { return "gradient_norm"; }
  bool needs_grad_norms() const override { return true; }
  int next(int, int frozen_before, std::span<const double> g) const override {
    if (static_cast<int>(g.size()) != L_)
      throw Error("gradient_norm freeze policy: expected " + std::to_string(L_) +
                  " per-layer gradient norms, got " + std::to_string(g.size()));
    const int bound = alpha_bound(L_, frozen_before, p_.alpha, p_.freeze_rounding, p_.min_active_layers);
    // Lowest index wins a tie: freezing less is the safe side.
    const auto it = std::min_element(g.begin() + frozen_before, g.end());
    const int converged = static_cast<int>(it - g.begin()) + 1;
    return std::max(frozen_before, std::min(bound, converged));
  }

 private:
  int L_;
  PlannerConfig p_;
};

// The gradient-norm criterion per layer: Eq. 1's alpha bound caps the
// count, and the trainable layers of least norm (the most converged; the
// lower index on a tie) are the ones that freeze, wherever they sit.
class PerLayerPolicy final : public FreezePolicy {
 public:
  PerLayerPolicy(int L, const PlannerConfig& p) : L_(L), p_(p) {}
  std::string name() const override { return "gradient_norm_per_layer"; }
  bool needs_grad_norms() const override { return true; }
  bool per_layer() const override { return true; }
  int next(int, int frozen_before, std::span<const double>) const override {
    return alpha_bound(L_, frozen_before, p_.alpha, p_.freeze_rounding, p_.min_active_layers);
  }
  std::vector<int> which(int, const std::vector<int>& before, int count, std::span<const double> g) const override {
    if (static_cast<int>(g.size()) != L_)
      throw Error("gradient_norm_per_layer freeze policy: expected " + std::to_string(L_) +
                  " per-layer gradient norms, got " + std::to_string(g.size()));
    std::vector<int> trainable;
    for (int l = 0; l < L_; ++l)
      if (!std::binary_search(before.begin(), before.end(), l)) trainable.push_back(l);
    std::stable_sort(trainable.begin(), trainable.end(), [&](int a, int b) { return g[a] < g[b]; });
    std::vector<int> out = before;
    const auto more = std::min<std::size_t>(trainable.size(), std::max<std::size_t>(0, count - before.size()));
    out.insert(out.end(), trainable.begin(), trainable.begin() + static_cast<std::ptrdiff_t>(more));
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  int L_;
  PlannerConfig p_;
};

class ReplayCounts final : public FreezePolicy {
 public:
  explicit ReplayCounts(std::vector<int> counts) : counts_(std::move(counts)) {}
  std::string name() const override { return "replay"; }
  // Past the end of the recording the last count holds.
  int next(int T, int frozen_before, std::span<const double>) const override {
    if (counts_.empty()) return frozen_before;
    const std::size_t i = std::min<std::size_t>(T - 1, counts_.size() - 1);
    return std::max(frozen_before, counts_[i]);
  }

 private:
  std::vector<int> counts_;
};

}  // namespace

std::unique_ptr<FreezePolicy> make_alpha_policy(int L, const PlannerConfig& p) {
  return std::make_unique<AlphaPolicy>(L, p);
}

std::unique_ptr<FreezePolicy> make_gradient_norm_policy(int L, const PlannerConfig& p) {
  return std::make_unique<GradientNormPolicy>(L, p);
}

std::unique_ptr<FreezePolicy> make_per_layer_policy(int L, const PlannerConfig& p) {
  return std::make_unique<PerLayerPolicy>(L, p);
}

std::vector<int> FrozenSet::layers() const {
  std::vector<int> out;
  for (int l = 0; l < prefix; ++l) out.push_back(l);
  out.insert(out.end(), inside.begin(), inside.end());
  return out;
}

FrozenSet frozen_set_of(const std::vector<int>& layers) {
  FrozenSet f;
  while (f.prefix < static_cast<int>(layers.size()) && layers[f.prefix] == f.prefix) ++f.prefix;
  f.inside.assign(layers.begin() + f.prefix, layers.end());
  return f;
}

std::string describe(const FrozenSet& f) {
  std::string out = std::to_string(f.prefix) + " frozen";
  if (f.inside.empty()) return out;
  return out + " + layer" + (f.inside.size() > 1 ? "s " : " ") + layer_list(f.inside) + " inside";
}

bool reads_grad_norms(const Config& c) {
  return c.planner.replay_grad_norms_file.empty() && make_freeze_policy(c)->needs_grad_norms();
}

namespace {

Registry<FreezePolicyFactory>& policies() {
  static Registry<FreezePolicyFactory> r(
      "freeze policy",
      {{"none", [](const Config&) { return std::make_unique<NoFreeze>(); }},
       {"alpha", [](const Config& c) { return make_alpha_policy(c.model.num_hidden_layers, c.planner); }},
       {"gradient_norm", [](const Config& c) { return make_gradient_norm_policy(c.model.num_hidden_layers, c.planner); }},
       {"gradient_norm_per_layer",
        [](const Config& c) { return make_per_layer_policy(c.model.num_hidden_layers, c.planner); }},
       {"replay", [](const Config& c) -> std::unique_ptr<FreezePolicy> {
          if (!c.planner.replay_grad_norms_file.empty())
            return make_gradient_norm_policy(c.model.num_hidden_layers, c.planner);
          return std::make_unique<ReplayCounts>(c.planner.replay_frozen);
        }}});
  return r;
}

}  // namespace

void register_freeze_policy(const std::string& name, FreezePolicyFactory make) {
  if (!make) throw Error("freeze policy \"" + name + "\": no factory");
  policies().add(name, std::move(make));
}

std::vector<std::string> freeze_policy_names() { return policies().names(); }

std::unique_ptr<FreezePolicy> make_freeze_policy(const Config& c) {
  const auto make = policies().find(c.planner.freeze_policy);
  if (!make) throw c.error("planner.freeze_policy", "a registered freeze policy", c.planner.freeze_policy);
  auto policy = (*make)(c);
  if (!policy) throw Error("freeze policy \"" + c.planner.freeze_policy + "\": its factory made nothing");
  return policy;
}

void write_grad_norm_trace(const GradNormTrace& trace, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot open for writing");
  out << "step,layer,grad_norm\n";
  out.precision(17);
  for (std::size_t T = 0; T < trace.steps.size(); ++T)
    for (std::size_t l = 0; l < trace.steps[T].size(); ++l) out << T + 1 << ',' << l << ',' << trace.steps[T][l] << '\n';
  out.close();
  if (!out) throw Error(path + ": write failed");
}

// Freeze steps a recording may hold: far more than any training has.
constexpr long kMaxSteps = 1'000'000;

GradNormTrace load_grad_norm_trace(const std::string& path, int L) {
  // A line per step and layer, of a few dozen bytes each (the shortest,
  // "1,0,0", takes 6).
  const InputFormat format{"gradient-norm trace", 64 + kMaxSteps * L * 64, "a line per step and layer, up to 1e6 steps"};
  InputFile file(path, format);
  std::istream& in = file.stream();
  auto bad = [&](std::int64_t line, const std::string& what) {
    return Error(path + ":" + std::to_string(line) + ": " + what);
  };
  std::string row;
  std::int64_t line = 0;
  if (!std::getline(in, row)) throw bad(1, "expected header 'step,layer,grad_norm', found an empty file");
  ++line;
  if (!row.empty() && row.back() == '\r') row.pop_back();
  if (row != "step,layer,grad_norm") throw bad(1, "expected header 'step,layer,grad_norm', found '" + printable(row) + "'");
  GradNormTrace trace;
  std::vector<std::vector<bool>> seen;
  while (std::getline(in, row)) {
    ++line;
    if (!row.empty() && row.back() == '\r') row.pop_back();
    if (row.empty()) continue;
    std::stringstream ss(row);
    std::string a, b, c, extra;
    if (!std::getline(ss, a, ',') || !std::getline(ss, b, ',') || !std::getline(ss, c, ',') ||
        std::getline(ss, extra, ','))
      throw bad(line, "expected 3 fields step,layer,grad_norm, found '" + printable(row) + "'");
    long step = 0, layer = 0;
    double norm = 0;
    try {
      std::size_t pa = 0, pb = 0, pc = 0;
      step = std::stol(a, &pa);
      layer = std::stol(b, &pb);
      norm = std::stod(c, &pc);
      if (pa != a.size() || pb != b.size() || pc != c.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw bad(line, "expected integer step, integer layer, number grad_norm, found '" + printable(row) + "'");
    }
    if (step < 1 || step > kMaxSteps) throw bad(line, "expected step in [1, 1000000], found " + printable(a));
    if (layer < 0 || layer >= L)
      throw bad(line, "expected layer in [0, " + std::to_string(L) + "), found " + printable(b));
    if (!(norm >= 0) || !std::isfinite(norm)) throw bad(line, "expected a finite grad_norm >= 0, found " + printable(c));
    if (static_cast<long>(trace.steps.size()) < step) {
      // Every step up to this one needs all L lines: a step the file is too
      // short to complete is refused before its rows are allocated.
      if (step * L * 6 > file.size())
        throw bad(line, "step " + std::to_string(step) + " needs " + std::to_string(step * L) +
                            " lines before the end, more than the file's " + std::to_string(file.size()) + " bytes hold");
      trace.steps.resize(step, std::vector<double>(L, 0.0));
      seen.resize(step, std::vector<bool>(L, false));
    }
    if (seen[step - 1][layer]) throw bad(line, "duplicate entry for step " + std::to_string(step) + ", layer " + std::to_string(layer));
    seen[step - 1][layer] = true;
    trace.steps[step - 1][layer] = norm;
  }
  if (trace.steps.empty())
    throw bad(line, "no step recorded (a run records gradient norms only where its freeze policy reads them: "
                    "train with planner.freeze_policy = \"gradient_norm\")");
  for (std::size_t t = 0; t < seen.size(); ++t)
    for (int l = 0; l < L; ++l)
      if (!seen[t][l])
        throw Error(path + ": step " + std::to_string(t + 1) + " has no gradient norm for layer " +
                    std::to_string(l));
  return trace;
}

FreezeDecider::FreezeDecider(const Config& c)
    : L_(c.model.num_hidden_layers), p_(c.planner), policy_(make_freeze_policy(c)) {
  if (!p_.replay_grad_norms_file.empty()) trace_ = load_grad_norm_trace(p_.replay_grad_norms_file, L_);
}

// A registered policy is code from anywhere: its answer is checked, not trusted.
int FreezeDecider::checked(int T, int before, int frozen) const {
  const int most = std::max(before, L_ - p_.min_active_layers);
  if (frozen < before || frozen > most)
    throw Error("freeze policy \"" + policy_->name() + "\" at step " + std::to_string(T) + ": " +
                std::to_string(frozen) + " frozen layers, expected " + std::to_string(before) + " to " +
                std::to_string(most) + " (" + std::to_string(before) + " frozen before, L = " + std::to_string(L_) +
                ", min_active_layers = " + std::to_string(p_.min_active_layers) + ")");
  return frozen;
}

int FreezeDecider::projected(int T, int before) const {
  if (!policy_->needs_grad_norms()) return checked(T, before, policy_->next(T, before, {}));
  if (!p_.replay_grad_norms_file.empty())
    return T <= static_cast<int>(trace_.steps.size()) ? checked(T, before, policy_->next(T, before, trace_.steps[T - 1]))
                                                      : before;
  return alpha_bound(L_, before, p_.alpha, p_.freeze_rounding, p_.min_active_layers);
}

int FreezeDecider::next(int T, int before, std::span<const double> measured) {
  if (!policy_->needs_grad_norms()) return checked(T, before, policy_->next(T, before, {}));
  if (!p_.replay_grad_norms_file.empty())
    return T <= static_cast<int>(trace_.steps.size()) ? checked(T, before, policy_->next(T, before, trace_.steps[T - 1]))
                                                      : before;  // the recording ended: nothing more is known to converge
  if (!measured.empty()) return checked(T, before, policy_->next(T, before, measured));
  used_alpha_bound_ = true;
  return alpha_bound(L_, before, p_.alpha, p_.freeze_rounding, p_.min_active_layers);
}

FreezeAllowance FreezeDecider::next_set(int T, const std::vector<int>& before, std::span<const double> measured) {
  const int count = next(T, static_cast<int>(before.size()), measured);
  FreezeAllowance a{count, before, false};
  if (!policy_->per_layer()) {
    a.layers.clear();
    for (int l = 0; l < count; ++l) a.layers.push_back(l);
    return a;
  }
  if (count == static_cast<int>(before.size())) return a;
  std::span<const double> norms = measured;
  if (!p_.replay_grad_norms_file.empty()) norms = trace_.steps[T - 1];  // next() allowed more: the step is recorded
  if (norms.empty()) {
    a.open = true;
    return a;
  }
  a.layers = policy_->which(T, before, count, norms);
  // A registered policy is code from anywhere: its layers are checked too.
  const bool sorted = std::adjacent_find(a.layers.begin(), a.layers.end(), std::greater_equal<>()) == a.layers.end();
  const bool in_range = a.layers.empty() || (a.layers.front() >= 0 && a.layers.back() < L_);
  if (!sorted || !in_range || static_cast<int>(a.layers.size()) != count ||
      !std::includes(a.layers.begin(), a.layers.end(), before.begin(), before.end()))
    throw Error("freeze policy \"" + policy_->name() + "\" at step " + std::to_string(T) + ": layers [" +
                layer_list(a.layers) + "], expected " +
                std::to_string(count) + " distinct sorted layers in [0, " + std::to_string(L_) +
                ") including the " + std::to_string(before.size()) + " frozen before");
  return a;
}

FreezeTimeline freeze_timeline(const Config& c, int steps) {
  FreezeDecider decide(c);
  FreezeTimeline out;
  out.frozen.assign(1, 0);
  for (int T = 1; T <= steps; ++T) out.frozen.push_back(decide.next(T, out.frozen.back(), {}));
  out.used_alpha_bound = decide.used_alpha_bound();
  return out;
}

}  // namespace ep

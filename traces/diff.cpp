#include "traces/diff.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>

#include "planner/error.hpp"
#include "traces/atomic_file.hpp"
#include "traces/csv.hpp"

namespace ep::trace {

namespace {

using Key = std::tuple<int, int, std::string>;  // plan_id, replica, action name

struct Mean {
  std::string category;
  double sum = 0;
  int n = 0;
  [[nodiscard]] double value() const { return sum / n; }
};

using Means = std::map<Key, Mean>;

// Per phase, each action's mean duration over its iterations of that phase.
std::map<IterationPhase, Means> mean_durations(const Trace& t) {
  std::map<IterationPhase, Means> out;
  for (const Event& e : t.events) {
    if (t.tracks.at(e.track).kind != TrackKind::Gpu || e.category == "transition") continue;
    const IterationPhase phase = e.iteration > 0 ? IterationPhase::Later : IterationPhase::First;
    Mean& m = out[phase][{e.plan_id, e.replica, e.name}];
    m.category = e.category;
    m.sum += e.end_s - e.start_s;
    ++m.n;
  }
  return out;
}

// `with_reference` null: no per-action MAPE (the total's is weighted by time).
void add(CategoryDiff& d, double a, double b, int* with_reference) {
  ++d.matched;
  d.first_mean_s += a;
  d.second_mean_s += b;
  d.mean_abs_error_s += std::abs(a - b);
  if (b > 0 && with_reference) {
    d.mape += std::abs(a - b) / b;
    ++*with_reference;
  }
}

void finish(CategoryDiff& d, int with_reference) {
  if (d.matched > 0) {
    d.first_mean_s /= d.matched;
    d.second_mean_s /= d.matched;
    d.mean_abs_error_s /= d.matched;
  }
  if (with_reference > 0) d.mape /= with_reference;
}

PhaseDiff diff_phase(IterationPhase phase, const Means& a, const Means& b) {
  std::map<std::string, CategoryDiff> by_cat;
  std::map<std::string, int> with_reference;
  PhaseDiff out;
  out.phase = phase;
  out.total.category = "total";
  for (const auto& [key, m] : a) {
    CategoryDiff& d = by_cat[m.category];
    d.category = m.category;
    const auto it = b.find(key);
    if (it == b.end()) {
      ++d.only_first;
      ++out.total.only_first;
      continue;
    }
    add(d, m.value(), it->second.value(), &with_reference[m.category]);
    add(out.total, m.value(), it->second.value(), nullptr);
  }
  for (const auto& [key, m] : b)
    if (!a.count(key)) {
      CategoryDiff& d = by_cat[m.category];
      d.category = m.category;
      ++d.only_second;
      ++out.total.only_second;
    }
  for (const auto c : kEventCategories) {
    const auto it = by_cat.find(std::string(c));
    if (it == by_cat.end()) continue;
    finish(it->second, with_reference[it->first]);
    out.categories.push_back(it->second);
  }
  finish(out.total, 0);
  // Over all kinds, weighted by time: a near-zero span (a read that landed
  // ahead) off by 0.1 ms must not outweigh a backward off by 1%.
  out.total.mape = out.total.second_mean_s > 0 ? out.total.mean_abs_error_s / out.total.second_mean_s : 0;
  return out;
}

void table(std::ostringstream& os, const PhaseDiff& d) {
  char line[256];
  std::snprintf(line, sizeof line, "%-15s %8s %7s %7s %13s %13s %14s %8s\n", "action kind", "matched", "only 1",
                "only 2", "first (ms)", "second (ms)", "|error| (ms)", "MAPE");
  os << line;
  const auto row = [&](const CategoryDiff& c) {
    std::snprintf(line, sizeof line, "%-15s %8d %7d %7d %13.4f %13.4f %14.4f %7.2f%%\n", c.category.c_str(), c.matched,
                  c.only_first, c.only_second, c.first_mean_s * 1e3, c.second_mean_s * 1e3, c.mean_abs_error_s * 1e3,
                  c.mape * 100);
    os << line;
  };
  for (const auto& c : d.categories) row(c);
  row(d.total);
}

// (a - b) / b, the error of `a` against the reference `b`; none where `b`
// is no reference (0: e.g. an epoch's first transition, which is nothing).
std::optional<double> relative_error(double a, double b) {
  if (b > 0) return (a - b) / b;
  return std::nullopt;
}

}  // namespace

TraceDiff diff_traces(const Trace& first, const Trace& second, bool any_workload) {
  // Nothing to compare is refused rather than reported as no error.
  const auto meta = [](const Trace& t, const char* key) {
    const auto it = t.metadata.find(key);
    return it == t.metadata.end() ? std::string() : it->second;
  };
  for (const char* key : {"model", "workload", "batch_size"}) {
    const std::string a = meta(first, key), b = meta(second, key);
    if (a.empty() || b.empty() || a == b || (any_workload && std::string_view(key) != "model")) continue;
    throw Error(std::string("the traces are of different workloads: ") + key + " '" + a + "' in the first, '" + b +
                "' in the second" + (std::string_view(key) == "model" ? "" : " (--any-workload compares them all the same)"));
  }
  const auto a = mean_durations(first), b = mean_durations(second);
  for (const auto& [which, m] : {std::pair{"first", &a}, std::pair{"second", &b}})
    if (m->empty()) throw Error(std::string("the ") + which + " trace has no GPU spans to compare (an empty trace)");
  TraceDiff out;
  int matched = 0;
  for (const IterationPhase phase : {IterationPhase::Later, IterationPhase::First}) {
    const auto in_a = a.find(phase), in_b = b.find(phase);
    if (in_a == a.end() && in_b == b.end()) continue;
    if (in_a == a.end() || in_b == b.end()) {
      out.held_by_one.emplace_back(phase, in_a == a.end() ? 2 : 1);
      continue;
    }
    out.phases.push_back(diff_phase(phase, in_a->second, in_b->second));
    matched += out.phases.back().total.matched;
  }
  if (matched == 0)
    throw Error("no action of the first trace matches one of the second by (plan, replica, action name) in "
                "iterations of the same place in their epochs: they are not runs of the same config");
  return out;
}

std::string format_diff(const TraceDiff& d, const Trace& first, const Trace& second) {
  std::ostringstream os;
  os << "first:  " << first.source << " " << first.mode << " " << first.config << "\n"
     << "second: " << second.source << " " << second.mode << " " << second.config << "\n"
     << "aligned by (plan, replica, action); durations are means over a run's iterations of each kind;\n"
     << "MAPE per kind: the mean of each action's |error| / second; total: summed |error| / summed second\n";
  for (const PhaseDiff& p : d.phases) {
    os << "\n"
       << (p.phase == IterationPhase::Later
               ? "iterations after an epoch's first (the steady state):\n"
               : "each epoch's first iteration (from idle devices: cache reads not yet ahead, warm-up):\n");
    table(os, p);
  }
  for (const auto& [phase, holder] : d.held_by_one)
    os << "\n"
       << (phase == IterationPhase::Later ? "iterations after an epoch's first" : "epochs' first iterations")
       << ": only the " << (holder == 1 ? "first" : "second") << " trace holds them"
       << (phase == IterationPhase::Later ? " (a real run traces them with exec.trace_iterations >= 2)" : "")
       << "\n";
  return os.str();
}

std::vector<EpochDiff> diff_epochs(const std::vector<EpochMetrics>& first, const std::string& first_mode,
                                   const std::vector<EpochMetrics>& second, const std::string& second_mode) {
  const auto of_mode = [](const std::vector<EpochMetrics>& rows, const std::string& mode, const char* which) {
    std::vector<const EpochMetrics*> out;
    for (const EpochMetrics& e : rows)
      if (e.mode == mode) out.push_back(&e);
    if (out.empty()) throw Error(std::string("the ") + which + " run's epochs.csv has no epoch of mode '" + mode + "'");
    return out;
  };
  const auto a = of_mode(first, first_mode, "first"), b = of_mode(second, second_mode, "second");
  std::vector<EpochDiff> out;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    out.push_back({a[i]->epoch, a[i]->frozen_layers, b[i]->frozen_layers, a[i]->frozen_inside, b[i]->frozen_inside,
                   a[i]->K, b[i]->K, a[i]->replicas, b[i]->replicas, a[i]->M, b[i]->M, a[i]->epoch_s, b[i]->epoch_s,
                   a[i]->iteration_s, b[i]->iteration_s, a[i]->transition_s, b[i]->transition_s});
  return out;
}

std::string format_epoch_diff(const std::vector<EpochDiff>& d) {
  const auto error = [](double a, double b) { return relative_error(a, b).value_or(0.0); };
  // "a" where both runs agree, "a|b" where they do not.
  const auto both = [](const std::string& a, const std::string& b) { return a == b ? a : a + "|" + b; };
  std::ostringstream os;
  os << "per epoch (the epochs.csv beside each trace; an epoch with the transition charged to its start):\n";
  char line[256];
  std::snprintf(line, sizeof line, "%5s %7s %11s %11s %11s %8s %17s %15s %16s %8s\n", "epoch", "frozen", "K x rep, M",
                "first (s)", "second (s)", "error", "transition (s)", "iter first (ms)", "iter second (ms)", "error");
  os << line;
  double sum_a = 0, sum_b = 0, worst = 0, worst_iteration = 0;
  bool same_frozen = true, same_layout = true, same_M = true;
  for (const EpochDiff& e : d) {
    // The whole frozen set: two runs with 4+2 and 4+1 froze different layers.
    const std::string frozen = both(frozen_text(e.frozen_first, e.frozen_inside_first),
                                    frozen_text(e.frozen_second, e.frozen_inside_second));
    const auto shape = [](int K, int replicas, int M) {
      return std::to_string(K) + "x" + std::to_string(replicas) + "," + std::to_string(M);
    };
    const std::string layout = both(shape(e.K_first, e.replicas_first, e.M_first),
                                    shape(e.K_second, e.replicas_second, e.M_second));
    same_frozen = same_frozen && e.frozen_first == e.frozen_second && e.frozen_inside_first == e.frozen_inside_second;
    same_layout = same_layout && e.K_first == e.K_second && e.replicas_first == e.replicas_second;
    same_M = same_M && e.M_first == e.M_second;
    const double err = error(e.first_s, e.second_s), iteration_err = error(e.first_iteration_s, e.second_iteration_s);
    char transition[40];
    std::snprintf(transition, sizeof transition, "%.3f / %.3f", e.first_transition_s, e.second_transition_s);
    std::snprintf(line, sizeof line, "%5d %7s %11s %11.3f %11.3f %+7.1f%% %17s %15.3f %16.3f %+7.1f%%\n", e.epoch + 1,
                  frozen.c_str(), layout.c_str(), e.first_s, e.second_s, err * 100, transition,
                  e.first_iteration_s * 1e3, e.second_iteration_s * 1e3, iteration_err * 100);
    os << line;
    sum_a += e.first_s;
    sum_b += e.second_s;
    worst = std::max(worst, std::abs(err));
    worst_iteration = std::max(worst_iteration, std::abs(iteration_err));
  }
  std::snprintf(line, sizeof line, "%5s %7s %11s %11.3f %11.3f %+7.1f%%\n", "all", "", "", sum_a, sum_b,
                error(sum_a, sum_b) * 100);
  os << line;
  std::snprintf(line, sizeof line, "largest |error|: %.1f%% per epoch, %.1f%% per iteration\n", worst * 100,
                worst_iteration * 100);
  os << line;
  // The executor measures the warm-up inside the epoch, the simulator
  // charges it to the transition: only the epoch column is like for like.
  os << "transition: the part of the epoch before its first iteration, first / second (a freeze step's probe, "
        "planning, moves, rebuild)\n"
        "iter: the epoch without its transition, per iteration (the first iterations' warm-up after a freeze "
        "step is in a real run's, in a simulated run's transition)\n";
  if (!same_frozen)
    os << "the runs froze different layers (first|second): replay the real run's gradient norms "
          "(planner.freeze_policy = \"replay\") to compare like with like\n";
  if (!same_layout)
    os << "the runs' layouts differ (K x replicas, first|second): their iterations are not the same work\n";
  // Each back end's chunk search picks M by its own timings (the
  // simulator's from the profile, the executor's measured on its devices).
  if (same_layout && !same_M)
    os << "the runs chose different micro-batch counts M (first|second): to compare one plan, fix M in both "
          "(planner.M_min_factor = planner.M_max_factor = M / K)\n";
  return os.str();
}

std::string format_start_notes(const Trace& first, const Trace& second) {
  std::ostringstream os;
  const std::optional<double> a = start_of(first), b = start_of(second);
  char line[200];
  if (a && b) {
    std::snprintf(line, sizeof line, "start (before epoch 1, in no epoch): first %.3f s, second %.3f s, error %+.1f%%\n",
                  *a, *b, relative_error(*a, *b).value_or(0.0) * 100);
    os << line;
  }
  for (const auto& [which, t] : {std::pair<const char*, const Trace*>{"first", &first}, {"second", &second}}) {
    const auto it = t->metadata.find(kChunkSearchBeforeFirstEpochKey);
    if (it == t->metadata.end()) continue;
    os << which << ": its chunk search ran in its start (" << it->second
       << " s) and did the process's one-off work there, which the start's iterations do in a run that finds "
          "its chunk memo (a simulation charges the profile's first_iteration)\n";
  }
  return os.str();
}

void write_epoch_diff_csv(const std::vector<EpochDiff>& d, std::optional<double> start_first,
                          std::optional<double> start_second, const std::string& path) {
  const auto num = [](double v) { return csv::shortest(v); };
  const auto error = [&](double a, double b) {
    const std::optional<double> e = relative_error(a, b);
    return e ? num(*e) : std::string();  // empty where the second is no reference
  };
  std::ostringstream os;
  os << "row,frozen_first,frozen_second,K_first,K_second,replicas_first,replicas_second,M_first,M_second,"
        "first_s,second_s,error,first_transition_s,second_transition_s,first_iteration_s,second_iteration_s,"
        "iteration_error,frozen_inside_first,frozen_inside_second\n";
  double sum_a = 0, sum_b = 0;
  for (const EpochDiff& e : d) {
    os << e.epoch + 1 << ',' << e.frozen_first << ',' << e.frozen_second << ',' << e.K_first << ',' << e.K_second
       << ',' << e.replicas_first << ',' << e.replicas_second << ',' << e.M_first << ',' << e.M_second << ','
       << num(e.first_s) << ',' << num(e.second_s) << ',' << error(e.first_s, e.second_s) << ','
       << num(e.first_transition_s) << ',' << num(e.second_transition_s) << ',' << num(e.first_iteration_s) << ','
       << num(e.second_iteration_s) << ',' << error(e.first_iteration_s, e.second_iteration_s) << ','
       << e.frozen_inside_first << ',' << e.frozen_inside_second << '\n';
    sum_a += e.first_s;
    sum_b += e.second_s;
  }
  const auto whole = [&](const char* row, double a, double b) {
    os << row << ",,,,,,,,," << num(a) << ',' << num(b) << ',' << error(a, b) << ",,,,,,,\n";
  };
  if (start_first && start_second) whole("start", *start_first, *start_second);
  whole("all", sum_a, sum_b);
  write_file_atomically(path, os.str());
}

}  // namespace ep::trace

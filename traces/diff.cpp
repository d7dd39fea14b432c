#include "traces/diff.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "planner/error.hpp"

namespace ep::trace {

namespace {

using Key = std::tuple<int, int, std::string>;  // plan_id, replica, action name

struct Mean {
  std::string category;
  double sum = 0;
  int n = 0;
  [[nodiscard]] double value() const { return sum / n; }
};

std::map<Key, Mean> mean_durations(const Trace& t) {
  std::map<Key, Mean> out;
  for (const Event& e : t.events) {
    if (t.tracks.at(e.track).kind != TrackKind::Gpu || e.category == "transition") continue;
    Mean& m = out[{e.plan_id, e.replica, e.name}];
    m.category = e.category;
    m.sum += e.end_s - e.start_s;
    ++m.n;
  }
  return out;
}

void add(CategoryDiff& d, double a, double b, int* with_reference) {
  ++d.matched;
  d.first_mean_s += a;
  d.second_mean_s += b;
  d.mean_abs_error_s += std::abs(a - b);
  if (b > 0) {
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

}  // namespace

TraceDiff diff_traces(const Trace& first, const Trace& second) {
  // Nothing to compare is refused rather than reported as no error.
  const auto model = [](const Trace& t) {
    const auto it = t.metadata.find("model");
    return it == t.metadata.end() ? std::string() : it->second;
  };
  if (!model(first).empty() && !model(second).empty() && model(first) != model(second))
    throw Error("the traces are of different models: the first of '" + model(first) + "', the second of '" +
                model(second) + "'");
  const auto a = mean_durations(first), b = mean_durations(second);
  for (const auto& [which, m] : {std::pair{"first", &a}, std::pair{"second", &b}})
    if (m->empty()) throw Error(std::string("the ") + which + " trace has no GPU spans to compare (an empty trace)");
  std::map<std::string, CategoryDiff> by_cat;
  std::map<std::string, int> with_reference;
  int total_with_reference = 0;
  TraceDiff out;
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
    add(out.total, m.value(), it->second.value(), &total_with_reference);
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
  finish(out.total, total_with_reference);
  if (out.total.matched == 0)
    throw Error("no action of the first trace matches one of the second by (plan, replica, action name): "
                "they are not runs of the same config");
  return out;
}

std::string format_diff(const TraceDiff& d, const Trace& first, const Trace& second) {
  std::ostringstream os;
  os << "first:  " << first.source << " " << first.mode << " " << first.config << "\n"
     << "second: " << second.source << " " << second.mode << " " << second.config << "\n"
     << "aligned by (plan, replica, action); durations are means over a run's iterations\n\n";
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
  return os.str();
}

}  // namespace ep::trace

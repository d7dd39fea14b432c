#include "sim/sweep.hpp"

#include <algorithm>
#include <map>

#include <unistd.h>

#include "planner/error.hpp"
#include "sim/driver.hpp"
#include "sim/isolate.hpp"

namespace ep::sim {

std::vector<std::string> sweep_values(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos) throw Error("--set '" + assignment + "': expected KEY=V1,V2,...");
  const std::string key = assignment.substr(0, eq + 1);
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  char quote = 0;  // inside a TOML string ("..." or '...'), a comma is text
  for (char ch : assignment.substr(eq + 1)) {
    if (quote) {
      if (ch == quote) quote = 0;
    } else if (ch == '"' || ch == '\'') {
      quote = ch;
    }
    if (!quote && ch == '[') ++depth;
    if (!quote && ch == ']') --depth;
    if (ch == ',' && depth == 0 && !quote) {
      out.push_back(key + cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(key + cur);
  return out;
}

std::vector<Overrides> sweep_points(const std::vector<std::string>& lists) {
  std::vector<std::vector<std::string>> values;
  std::size_t size = 1;
  for (const auto& set : lists) {
    values.push_back(sweep_values(set));
    size *= values.back().size();
    if (size > kMaxSweepPoints)
      throw Error("--set: the sweep has more than " + std::to_string(kMaxSweepPoints) +
                  " points (each is a whole simulated training, about a second per mode on a core); "
                  "split it into several sweeps");
  }
  std::vector<Overrides> points{{}};
  for (const auto& list : values) {
    std::vector<Overrides> next;
    for (const auto& p : points)
      for (const auto& v : list) {
        next.push_back(p);
        next.back().push_back(v);
      }
    points = std::move(next);
  }
  return points;
}

namespace {

// The platform is built from [cluster] alone, and every point is the same
// file with its overrides: points with the same cluster.* overrides share it.
std::string cluster_key(const Overrides& point) {
  std::string key;
  for (const std::string& o : point)
    if (o.rfind("cluster.", 0) == 0) key += o + '\n';
  return key;
}

}  // namespace

std::vector<std::vector<SweepModeResult>> run_sweep(const std::vector<Config>& configs,
                                                    const std::vector<Overrides>& points,
                                                    const SweepOptions& opt) {
  if (configs.size() != points.size())
    throw Error("sweep: " + std::to_string(configs.size()) + " configs for " + std::to_string(points.size()) +
                " points");
  // Groups in order of their first point.
  std::vector<std::vector<std::size_t>> groups;
  std::map<std::string, std::size_t> group_of;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto [it, fresh] = group_of.try_emplace(cluster_key(points[i]), groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  const int jobs = opt.jobs > 0 ? opt.jobs : static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const int at_once = std::min<int>(jobs, static_cast<int>(groups.size()));
  // The cores are shared by the groups running at once.
  const int inner_jobs = std::max(1, jobs / std::max(1, at_once));

  const std::vector<Mode> modes = with_reference(opt.modes, opt.reference);
  std::vector<std::vector<SweepModeResult>> results(points.size());
  ChildPool pool;
  std::string error;
  std::size_t next = 0, done = 0;
  while (next < groups.size() || pool.running() > 0) {
    while (next < groups.size() && static_cast<int>(pool.running()) < at_once && error.empty()) {
      const std::vector<std::size_t>& members = groups[next];
      pool.start(
          [&](ByteWriter& w) {
            std::vector<Config> group;
            for (const std::size_t i : members) group.push_back(configs[i]);
            RunOptions ro;
            ro.modes = modes;
            ro.reference = opt.reference;
            ro.exact = opt.exact;
            ro.trace = false;  // a sweep keeps each point's summary only
            ro.jobs = inner_jobs;
            Simulator sim(group.front().cluster);
            for (const RunResult& r : simulate_trainings(group, ro, sim))
              for (const trace::ModeSummary& m : r.summary.modes)
                w.put_all(m.total_s, m.speedup, m.samples_per_s, m.fits_memory, m.global_batch_max, m.updates);
          },
          next);
      ++next;
    }
    if (pool.running() == 0) break;
    for (ChildPool::Ended& e : pool.wait()) {
      if (!e.error.empty()) {
        if (error.empty()) error = e.error;
        continue;
      }
      ByteReader r(e.bytes);
      for (const std::size_t i : groups[e.id]) {
        for (const Mode m : modes) {
          SweepModeResult s;
          s.mode = m;
          r.get_into(s.total_s, s.speedup, s.samples_per_s, s.fits_memory, s.global_batch, s.updates);
          results[i].push_back(s);
        }
      }
      done += groups[e.id].size();
      if (opt.progress) opt.progress(done);
    }
  }
  if (!error.empty()) throw Error(error);
  return results;
}

}  // namespace ep::sim

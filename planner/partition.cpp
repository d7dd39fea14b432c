#include "planner/partition.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <ostream>
#include <sstream>

namespace ep {

MPartition m_partition(const ModelSpec& spec, int frozen_layers) {
  const int L = spec.num_layers();
  if (frozen_layers < 0 || frozen_layers >= L)
    throw Error("m_partition: frozen layers must be in [0, " + std::to_string(L - 1) + "], got " +
                std::to_string(frozen_layers));
  MPartition mp;
  mp.frozen_layers = frozen_layers;
  // The stem freezes with layer 0: F_frozen = stem + layers 0..f-1.
  mp.frozen_end = ModelSpec::frozen_prefix(frozen_layers).last;
  const int n = static_cast<int>(spec.sublayers.size());
  for (int s = std::max(mp.frozen_end, 1); s < n - 1; ++s) mp.units.push_back({s, s + 1});
  // Glue the stem (when active) to the first unit and the head to the last.
  mp.units.front().first = mp.frozen_end;
  mp.units.back().last = n;
  return mp;
}

int Partition::stage_of(int sublayer) const {
  const auto it = std::upper_bound(bounds.begin(), bounds.end(), sublayer);
  return static_cast<int>(it - bounds.begin()) - 1;
}

std::ostream& operator<<(std::ostream& os, const Partition& p) {
  os << "Partition{frozen=" << p.frozen_layers << ", bounds=[";
  for (std::size_t i = 0; i < p.bounds.size(); ++i) os << (i ? "," : "") << p.bounds[i];
  os << "]";
  if (!p.frozen_inside.empty()) os << ", inside=" << layer_list(p.frozen_inside);
  return os << "}";
}

std::string describe(const Partition& p, const ModelSpec& spec) {
  std::ostringstream os;
  const std::string frozen =
      p.frozen_end > 0 ? spec.sublayers.front().name + ".." + spec.sublayers[p.frozen_end - 1].name : "";
  const bool in_place = p.frozen_end > 0 && p.bounds.front() == 0;
  if (p.frozen_end > 0 && !in_place) os << "[" << frozen << "] ";
  for (int k = 0; k < p.K(); ++k) {
    if (k) os << " | ";
    const int a = p.bounds[k], b = p.bounds[k + 1] - 1;
    os << spec.sublayers[a].name;
    if (b > a) os << ".." << spec.sublayers[b].name;
  }
  if (in_place) os << "  (frozen " << frozen << " forward-only in place)";
  if (!p.frozen_inside.empty()) os << "  (frozen inside: layers " << layer_list(p.frozen_inside) << ")";
  return os.str();
}

double trained_params(const ModelSpec& spec, const Partition& p, int stage) {
  double v = 0;
  const SublayerRange a = p.active(stage);
  for (int i = a.first; i < a.last; ++i)
    if (p.trains(i)) v += spec.sublayers[i].params;
  return v;
}

std::string frozen_inside_by_stage(const Partition& p) {
  std::string out;
  for (int s = 0; s < p.K(); ++s) {
    std::vector<int> here;
    for (const int l : p.frozen_inside)
      if (p.stage_of(ModelSpec::first_sublayer_of_layer(l)) == s) here.push_back(l);
    out += (s ? " | " : "") + layer_list(here);
  }
  return out;
}

namespace {

double population_variance(std::span<const double> xs) {
  if (xs.empty()) return 0;
  const double mean = std::accumulate(xs.begin(), xs.end(), 0.0) / xs.size();
  double acc = 0;
  for (double x : xs) acc += (x - mean) * (x - mean);
  return acc / xs.size();
}

void check_partition_args(std::size_t n, int K) {
  if (K < 1) throw Error("partition: K must be >= 1, got " + std::to_string(K));
  if (static_cast<int>(n) < K)
    throw Error("partition: " + std::to_string(n) + " sublayer units cannot fill K = " +
                std::to_string(K) + " stages");
}

}  // namespace

std::vector<int> load_balance_greedy(std::span<const double> unit_load, double fixed_load0, int K) {
  const int n = static_cast<int>(unit_load.size());
  check_partition_args(unit_load.size(), K);
  std::vector<int> counts(K, 0);
  const double total = fixed_load0 + std::accumulate(unit_load.begin(), unit_load.end(), 0.0);
  double done = 0;  // load of the stages already closed
  int assigned = 0;
  for (int k = 0; k < K; ++k) {
    double load = k == 0 ? fixed_load0 : 0.0;
    const int later = K - 1 - k;  // stages still to fill after this one
    if (later == 0) {
      counts[k] = n - assigned;
      break;
    }
    const double mean = (total - done) / (K - k);
    const double var = population_variance(unit_load.subspan(assigned)) / (K - k);
    while (assigned < n - later &&
           (counts[k] == 0 || load + unit_load[assigned] < mean + var)) {
      load += unit_load[assigned++];
      ++counts[k];
    }
    done += load;
  }
  return counts;
}

std::vector<int> partition_min_max(std::span<const double> unit_load, double fixed_load0, int K) {
  const int n = static_cast<int>(unit_load.size());
  check_partition_args(unit_load.size(), K);
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + unit_load[i];
  constexpr double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: minimal max load placing units [0, i) on stages 0..k-1.
  std::vector<std::vector<double>> best(K + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(K + 1, std::vector<int>(n + 1, -1));
  for (int i = 1; i <= n; ++i) best[1][i] = fixed_load0 + prefix[i];
  for (int k = 2; k <= K; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
  std::vector<int> counts(K);
  int i = n;
  for (int k = K; k >= 2; --k) {
    counts[k - 1] = i - cut[k][i];
    i = cut[k][i];
  }
  counts[0] = i;
  return counts;
}

std::vector<double> stage_loads(std::span<const double> unit_load, double fixed_load0,
                                std::span<const int> counts) {
  std::vector<double> loads(counts.size(), 0.0);
  if (!loads.empty()) loads[0] = fixed_load0;
  std::size_t u = 0;
  for (std::size_t k = 0; k < counts.size(); ++k)
    for (int c = 0; c < counts[k]; ++c) loads[k] += unit_load[u++];
  return loads;
}

namespace {

template <class F>
std::vector<double> per_unit(const ModelSpec& spec, const MPartition& mp, F value) {
  std::vector<double> out;
  out.reserve(mp.units.size());
  for (const SublayerRange& u : mp.units) {
    double v = 0;
    for (int s = u.first; s < u.last; ++s) v += value(spec.sublayers[s]);
    out.push_back(v);
  }
  return out;
}

}  // namespace

std::vector<double> unit_params_millions(const ModelSpec& spec, const MPartition& mp) {
  return per_unit(spec, mp, [](const Sublayer& s) { return s.params / 1e6; });
}

double frozen_params_millions(const ModelSpec& spec, const MPartition& mp) {
  double v = 0;
  for (int s = 0; s < mp.frozen_end; ++s) v += spec.sublayers[s].params / 1e6;
  return v;
}

std::vector<double> unit_train_flops(const ModelSpec& spec, const MPartition& mp) {
  return per_unit(spec, mp, [](const Sublayer& s) {
    return s.fwd_flops_per_sample + s.bwd_flops_per_sample;
  });
}

PaperItems paper_items(const ModelSpec& spec, int frozen_layers) {
  PaperItems items;
  const int n = spec.num_sublayers();
  for (int s = ModelSpec::frozen_prefix(frozen_layers).last; s < n; ++s) {
    const Sublayer& sl = spec.sublayers[s];
    if (sl.kind == SublayerKind::Head && spec.config.family == ModelFamily::ViT) {
      const double norm = 2.0 * spec.config.hidden_size;  // final LayerNorm: weight and bias
      items.params_millions.insert(items.params_millions.end(), {norm / 1e6, (sl.params - norm) / 1e6});
      items.first_sublayer.insert(items.first_sublayer.end(), {s, s});
      continue;
    }
    items.params_millions.push_back(sl.params / 1e6);
    items.first_sublayer.push_back(s);
  }
  return items;
}

Partition greedy_partition_paper(const ModelSpec& spec, int frozen_layers, int K, double lambda_frozen) {
  const MPartition mp = m_partition(spec, frozen_layers);
  const double fixed0 = lambda_frozen * frozen_params_millions(spec, mp);
  const PaperItems items = paper_items(spec, frozen_layers);
  if (static_cast<int>(items.params_millions.size()) >= K) {
    Partition p;
    p.frozen_layers = frozen_layers;
    p.frozen_end = mp.frozen_end;
    p.bounds.push_back(mp.frozen_end);
    std::size_t item = 0;
    for (const int c : load_balance_greedy(items.params_millions, fixed0, K)) {
      item += c;
      p.bounds.push_back(item < items.first_sublayer.size() ? items.first_sublayer[item] : spec.num_sublayers());
    }
    if (std::adjacent_find(p.bounds.begin(), p.bounds.end(), std::greater_equal<>()) == p.bounds.end()) return p;
  }
  return partition_from_counts(mp, load_balance_greedy(unit_params_millions(spec, mp), fixed0, K));
}

Partition make_partition(const ModelSpec& spec, int frozen_layers, int K, PartitionerKind kind,
                         double lambda_frozen, double frozen_flops0) {
  if (kind == PartitionerKind::Greedy) {
    check_partition_args(m_partition(spec, frozen_layers).units.size(), K);
    return greedy_partition_paper(spec, frozen_layers, K, lambda_frozen);
  }
  const MPartition mp = m_partition(spec, frozen_layers);
  return partition_from_counts(mp, partition_min_max(unit_train_flops(spec, mp), frozen_flops0, K));
}

Partition partition_from_counts(const MPartition& mp, std::span<const int> counts) {
  Partition p;
  p.frozen_layers = mp.frozen_layers;
  p.frozen_end = mp.frozen_end;
  p.bounds.push_back(mp.frozen_end);
  std::size_t u = 0;
  for (int c : counts) {
    u += c;
    p.bounds.push_back(mp.units[u - 1].last);
  }
  return p;
}

std::string stage_sizes(const Partition& p) {
  std::string out;
  for (int s = 0; s < p.K(); ++s) out += (s ? "," : "") + std::to_string(p.bounds[s + 1] - p.bounds[s]);
  return out;
}

}  // namespace ep

#include "planner/modes.hpp"

#include <algorithm>

namespace ep {

namespace {

struct ModeName {
  Mode mode;
  const char* name;
  const char* what;
};
constexpr ModeName kModeNames[] = {
    {Mode::Baseline, "baseline", "the best plan without freezing (K, M, replicas by predicted time)"},
    {Mode::GPipe, "gpipe", "the paper's baseline: planner.K and its replicas, no freezing"},
    {Mode::Freeze, "freeze", "gpipe + freezing, nothing moves"},
    {Mode::AutoPipe, "autopipe", "+ repartition and a shorter pipeline"},
    {Mode::AutoDP, "autodp", "+ replicas on the freed devices"},
    {Mode::AutoCache, "autocache", "+ the activation cache (the full method)"},
    {Mode::Configured, "configured", "the config as train runs it"}};

const ModeName& entry(Mode m) {
  return *std::find_if(std::begin(kModeNames), std::end(kModeNames), [&](const ModeName& e) { return e.mode == m; });
}

}  // namespace

std::string to_string(Mode m) { return entry(m).name; }
std::string describe(Mode m) { return entry(m).what; }

Mode parse_mode(const std::string& s) {
  for (const auto& e : kModeNames)
    if (s == e.name) return e.mode;
  throw Error("--mode: expected all|baseline|gpipe|freeze|autopipe|autodp|autocache|configured, found '" + s + "'");
}

std::vector<Mode> parse_modes(const std::string& s) {
  std::vector<Mode> modes;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(s.find(',', begin), s.size());
    const std::string m = s.substr(begin, end - begin);
    if (m == "all")
      modes.insert(modes.end(), std::begin(kAllModes), std::end(kAllModes));
    else
      modes.push_back(parse_mode(m));  // names the entry, '' included
    if (end == s.size()) break;
    begin = end + 1;
  }
  std::sort(modes.begin(), modes.end());
  modes.erase(std::unique(modes.begin(), modes.end()), modes.end());
  return modes;
}

std::vector<Mode> with_reference(std::vector<Mode> modes, Mode reference) {
  if (std::find(modes.begin(), modes.end(), reference) == modes.end()) modes.push_back(reference);
  std::sort(modes.begin(), modes.end());
  return modes;
}

Mode parse_reference(const std::string& s) {
  if (s == "baseline") return Mode::Baseline;
  if (s == "gpipe") return Mode::GPipe;
  throw Error("--reference: expected baseline (the best plan without freezing) or gpipe (the paper's), found '" + s +
              "'");
}

Config mode_config(const Config& c, Mode m) {
  Config out = c;
  if (m == Mode::Configured) return out;
  auto& p = out.planner;
  const bool no_freezing = m == Mode::Baseline || m == Mode::GPipe;
  if (no_freezing) {
    p.freeze_policy = "none";
    p.replay_frozen.clear();
    p.replay_grad_norms_file.clear();
  }
  p.cache = m != Mode::AutoCache ? CachePolicyKind::Off
            : c.planner.cache == CachePolicyKind::Off ? CachePolicyKind::Auto
                                                      : c.planner.cache;
  if (m == Mode::Baseline) {
    // Every K from planner.K down, weighed by time: "none" would keep K.
    p.objective = Objective::Time;
    p.autopipe = p.autodp = true;
    if (p.compression == CompressionKind::None) p.compression = CompressionKind::Memory;
    return out;
  }
  p.autopipe = m == Mode::AutoPipe || m == Mode::AutoDP || m == Mode::AutoCache;
  p.autodp = m == Mode::AutoDP || m == Mode::AutoCache;
  return out;
}

}  // namespace ep

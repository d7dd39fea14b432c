#include "planner/modes.hpp"

#include <algorithm>

namespace ep {

namespace {

struct ModeName {
  Mode mode;
  const char* name;
};
constexpr ModeName kModeNames[] = {{Mode::Baseline, "baseline"},
                                   {Mode::Freeze, "freeze"},
                                   {Mode::AutoPipe, "autopipe"},
                                   {Mode::AutoDP, "autodp"},
                                   {Mode::AutoCache, "autocache"}};

}  // namespace

std::string to_string(Mode m) {
  for (const auto& e : kModeNames)
    if (e.mode == m) return e.name;
  return "?";
}

Mode parse_mode(const std::string& s) {
  for (const auto& e : kModeNames)
    if (s == e.name) return e.mode;
  throw Error("--mode: expected all|baseline|freeze|autopipe|autodp|autocache, found '" + s + "'");
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

Config mode_config(const Config& c, Mode m) {
  Config out = c;
  auto& p = out.planner;
  p.autopipe = m == Mode::AutoPipe || m == Mode::AutoDP || m == Mode::AutoCache;
  p.autodp = m == Mode::AutoDP || m == Mode::AutoCache;
  p.cache = m != Mode::AutoCache ? CachePolicyKind::Off
            : c.planner.cache == CachePolicyKind::Off ? CachePolicyKind::Auto
                                                      : c.planner.cache;
  if (m == Mode::Baseline) {
    p.freeze_policy = FreezePolicyKind::None;
    p.replay_frozen.clear();
    p.replay_grad_norms_file.clear();
  }
  return out;
}

}  // namespace ep

#include "planner/profile.hpp"

#include "planner/config.hpp"

#include <cmath>
#include <fstream>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "planner/error.hpp"
#include "planner/input_file.hpp"
#include "planner/json_input.hpp"

namespace ep {

namespace {

// A compute sample's and a model chain sample's op (profile.hpp); the
// input's gradient alone is timed per sublayer only.
const std::initializer_list<const char*> kChainOps = {"forward", "forward_again", "backward", "frozen_forward"};
const std::initializer_list<const char*> kComputeOps = {"forward", "forward_again", "backward", "frozen_forward",
                                                        "backward_input"};

using nlohmann::json;

// What the message shows as "found": the JSON text, cut short so that a
// whole misplaced list does not flood the error line.
std::string found_text(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// The physical ranges of a profile's values.
struct Limit {
  double at_most;
  const char* text;
  const char* why;
};
constexpr Limit kSeconds{3600, "3600", "one measured operation; an hour is beyond any"};
constexpr Limit kBytes{1e15, "1e15", "a petabyte"};
constexpr Limit kParams{1e13, "1e13", "ten trillion parameters"};
constexpr Limit kTransitionSeconds{1e6, "1e6", "eleven days: a petabyte's cache file is made in two"};

// One JSON value and the path that reached it, for the error messages.
class Node {
 public:
  Node(const json& value, std::string source, std::string path)
      : value_(value), source_(std::move(source)), path_(std::move(path)) {}

  [[nodiscard]] Error error(const std::string& expected, const std::string& found) const {
    return Error(source_ + ": " + (path_.empty() ? std::string("top level") : path_) +
                 ": expected " + expected + ", found " + found);
  }
  [[nodiscard]] Error error(const std::string& expected) const {
    return error(expected, found_text(value_));
  }

  // An object with exactly these keys (`optional` ones may be absent): a
  // typo must not pass as a missing optional key, nor an extra key be
  // silently dropped.
  void require_object(std::initializer_list<const char*> keys,
                      std::initializer_list<const char*> optional = {}) const {
    const std::string list = key_list(keys) + (optional.size() ? ", optionally " + key_list(optional) : "");
    if (!value_.is_object()) throw error("an object with keys " + list);
    std::set<std::string> known(keys.begin(), keys.end());
    known.insert(optional.begin(), optional.end());
    for (const auto& [key, _] : value_.items())
      if (!known.contains(key))
        throw child_path(key).error("no such key (an object with keys " + list + ")",
                                    "the key \"" + key + "\"");
    for (const char* key : keys)
      if (!value_.contains(key))
        throw child_path(key).error("a value (an object with keys " + list + ")", "nothing");
  }

  [[nodiscard]] Node operator[](const char* key) const {
    return Node(value_.at(key), source_, child(key));
  }

  [[nodiscard]] std::string text(bool allow_empty = true) const {
    if (!value_.is_string() || (!allow_empty && value_.get_ref<const std::string&>().empty()))
      throw error(allow_empty ? "a string" : "a non-empty string");
    return value_.get<std::string>();
  }

  [[nodiscard]] std::string one_of(std::initializer_list<const char*> choices) const {
    std::string list;
    for (const char* c : choices) list += (list.empty() ? "" : ", ") + std::string("\"") + c + "\"";
    if (value_.is_string())
      for (const char* c : choices)
        if (value_.get_ref<const std::string&>() == c) return c;
    throw error("one of " + list);
  }

  // > 0 (`positive`) or >= 0, and at most `limit` (a physical bound: a
  // measurement beyond is a damaged file, and would give totals of 1e33 s);
  // JSON cannot hold NaN or infinity, but a literal like 1e999 parses to
  // infinity.
  [[nodiscard]] double number(bool positive, const Limit& limit) const {
    const std::string expected = std::string(positive ? "a number > 0" : "a number >= 0") + " and <= " + limit.text + " (" + limit.why + ")";
    if (!value_.is_number()) throw error(expected);
    const double v = value_.get<double>();
    if (!std::isfinite(v) || (positive ? !(v > 0) : !(v >= 0)) || v > limit.at_most) throw error(expected);
    return v;
  }

  [[nodiscard]] int integer_at_least(int min) const {
    const std::string expected = "an integer >= " + std::to_string(min);
    if (!value_.is_number_integer()) throw error(expected);
    constexpr auto max = std::numeric_limits<int>::max();
    // Positive literals parse as unsigned 64-bit: compare before narrowing.
    if (value_.is_number_unsigned() ? value_.get<std::uint64_t>() > std::uint64_t{max}
                                    : value_.get<std::int64_t>() > max)
      throw error(expected + " and <= " + std::to_string(max));
    if (value_.get<std::int64_t>() < min) throw error(expected);
    return static_cast<int>(value_.get<std::int64_t>());
  }

  // Calls `each(item)` for every element; `non_empty` refuses [].
  template <typename F>
  void for_each(bool non_empty, F each) const {
    if (!value_.is_array()) throw error("a list");
    if (non_empty && value_.empty()) throw error("at least one sample", "an empty list");
    for (std::size_t i = 0; i < value_.size(); ++i)
      each(Node(value_[i], source_, path_ + "[" + std::to_string(i) + "]"));
  }

 private:
  static std::string key_list(std::initializer_list<const char*> keys) {
    std::string s;
    for (const char* k : keys) s += (s.empty() ? "" : ", ") + std::string(k);
    return s;
  }
  [[nodiscard]] std::string child(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  // For a key that is absent or unexpected: the message gives its own "found".
  [[nodiscard]] Node child_path(const std::string& key) const {
    static const json none;
    return Node(none, source_, child(key));
  }

  const json& value_;
  std::string source_;
  std::string path_;
};

}  // namespace

nlohmann::json to_json(const Profile& p) {
  json j;
  j["schema"] = kProfileSchema;
  j["environment"] = p.environment;
  j["model"] = p.model;
  json& compute = j["compute"] = json::array();
  for (const ComputeSample& s : p.compute)
    compute.push_back({{"sublayer_kind", s.sublayer_kind}, {"op", s.op}, {"samples", s.samples},
                       {"seconds", s.seconds}});
  json& chain = j["model_chain"] = json::array();
  for (const ChainSample& s : p.model_chain)
    chain.push_back({{"op", s.op}, {"samples", s.samples}, {"seconds", s.seconds}});
  json& p2p = j["p2p"] = json::array();
  for (const TransferSample& s : p.p2p) p2p.push_back({{"bytes", s.bytes}, {"seconds", s.seconds}});
  json& allreduce = j["allreduce"] = json::array();
  for (const AllReduceSample& s : p.allreduce)
    allreduce.push_back({{"bytes", s.bytes}, {"ranks", s.ranks}, {"seconds", s.seconds}});
  json& cache = j["cache"] = json::array();
  for (const CacheSample& s : p.cache)
    cache.push_back({{"tier", s.tier}, {"op", s.op}, {"bytes", s.bytes}, {"seconds", s.seconds}});
  for (const auto& [key, samples] : {std::pair{"optimizer", &p.optimizer}, std::pair{"grad_norms", &p.grad_norms}}) {
    json& list = j[key] = json::array();
    for (const OptimizerSample& s : *samples) list.push_back({{"params", s.params}, {"seconds", s.seconds}});
  }
  json& transitions = j["transitions"] = json::array();
  for (const TransitionSample& s : p.transitions)
    transitions.push_back(
        {{"what", s.what}, {"ranks", s.ranks}, {"bytes", s.bytes}, {"seconds", s.seconds}});
  json& probes = j["cache_probes"] = json::array();
  for (const CacheProbeSample& s : p.cache_probes)
    probes.push_back({{"frozen_layers", s.frozen_layers}, {"samples", s.samples}, {"seconds", s.seconds}});
  return j;
}

Profile parse_profile(const nlohmann::json& j, const std::string& source) {
  const Node root(j, source, "");
  root.require_object({"schema", "environment", "model", "compute", "p2p", "allreduce", "cache",
                       "optimizer", "transitions"},
                      {"model_chain", "grad_norms", "cache_probes"});
  const Node schema = root["schema"];
  if (!j.at("schema").is_string() || j.at("schema").get_ref<const std::string&>() != kProfileSchema)
    throw schema.error("\"" + std::string(kProfileSchema) + "\"");

  Profile p;
  p.environment = root["environment"].text();
  p.model = root["model"].text();
  root["compute"].for_each(true, [&](const Node& n) {
    n.require_object({"sublayer_kind", "op", "samples", "seconds"});
    p.compute.push_back({n["sublayer_kind"].one_of({"stem", "attention", "mlp", "head"}),
                         n["op"].one_of(kComputeOps),
                         n["samples"].integer_at_least(1), n["seconds"].number(true, kSeconds)});
  });
  if (j.contains("model_chain"))
    root["model_chain"].for_each(false, [&](const Node& n) {
      n.require_object({"op", "samples", "seconds"});
      p.model_chain.push_back({n["op"].one_of(kChainOps),
                               n["samples"].integer_at_least(1), n["seconds"].number(true, kSeconds)});
    });
  root["p2p"].for_each(false, [&](const Node& n) {
    n.require_object({"bytes", "seconds"});
    p.p2p.push_back({n["bytes"].number(false, kBytes), n["seconds"].number(true, kSeconds)});
  });
  root["allreduce"].for_each(false, [&](const Node& n) {
    n.require_object({"bytes", "ranks", "seconds"});
    p.allreduce.push_back(
        {n["bytes"].number(false, kBytes), n["ranks"].integer_at_least(1), n["seconds"].number(true, kSeconds)});
  });
  root["cache"].for_each(false, [&](const Node& n) {
    n.require_object({"tier", "op", "bytes", "seconds"});
    p.cache.push_back({n["tier"].one_of({"host", "disk"}), n["op"].one_of({"read", "write"}),
                       n["bytes"].number(false, kBytes), n["seconds"].number(true, kSeconds)});
  });
  const auto per_params = [&](const char* key, std::vector<OptimizerSample>& out) {
    root[key].for_each(false, [&](const Node& n) {
      n.require_object({"params", "seconds"});
      out.push_back({n["params"].number(false, kParams), n["seconds"].number(true, kSeconds)});
    });
  };
  per_params("optimizer", p.optimizer);
  if (j.contains("grad_norms")) per_params("grad_norms", p.grad_norms);
  root["transitions"].for_each(false, [&](const Node& n) {
    n.require_object({"what", "ranks", "bytes", "seconds"});
    // 0 s is a measurement: one-off work that cost nothing measurable.
    p.transitions.push_back({n["what"].text(false), n["ranks"].integer_at_least(1),
                             n["bytes"].number(false, kBytes), n["seconds"].number(false, kTransitionSeconds)});
  });
  if (j.contains("cache_probes"))
    root["cache_probes"].for_each(false, [&](const Node& n) {
      n.require_object({"frozen_layers", "samples", "seconds"});
      p.cache_probes.push_back(
          {n["frozen_layers"].integer_at_least(1), n["samples"].integer_at_least(1), n["seconds"].number(true, kSeconds)});
    });
  return p;
}

std::string profile_model(const Config& c) {
  const ModelConfig& m = c.model;
  return to_string(m.family) + " L=" + std::to_string(m.num_hidden_layers) + " H=" + std::to_string(m.hidden_size) +
         " heads=" + std::to_string(m.num_attention_heads) + " I=" + std::to_string(m.intermediate_size) +
         (m.family == ModelFamily::ViT ? " image=" + std::to_string(m.image_size) + "/" + std::to_string(m.patch_size)
                                       : " seq=" + std::to_string(m.seq_length)) +
         ", " + to_string(c.training.precision) + " on " + to_string(c.device);
}

void check_profile_model(const Profile& p, const std::string& profile_source, const Config& config) {
  const std::string want = profile_model(config);
  if (p.model != want)
    throw Error(profile_source + ": the profile was recorded on '" + p.model + "', but " + config.source +
                " trains '" + want + "': its timings do not hold for another model, precision or device (profile "
                "this one: elasticpipe profile " + config.source + ")");
}

void check_profile(const Profile& p, const std::string& source) {
  (void)parse_profile(to_json(p), source);
}

void write_profile(const Profile& p, const std::string& path) {
  const json j = to_json(p);
  // Never write a file that read_profile would refuse.
  (void)parse_profile(j, "writing " + path);
  std::ofstream out(path);
  if (!out) throw Error("writing " + path + ": cannot open the file");
  out << j.dump(2) << '\n';
  out.close();
  if (!out) throw Error("writing " + path + ": write failed");
}

Profile read_profile(const std::string& path) {
  // A profile holds timings of a few dozen shapes: tens of kB.
  constexpr InputFormat kProfileFile{"profile", 16 << 20, "a profile is tens of kB of JSON"};
  return parse_profile(parse_json(read_input_file(path, kProfileFile), path), path);
}

}  // namespace ep

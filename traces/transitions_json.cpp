// transitions.json (traces/SCHEMA.md, "Transition costs"), and the one
// JSON encoding of a TransitionCost, which the run state reuses.
#include "traces/io.hpp"
#include "traces/run_outputs.hpp"
#include "traces/run_state_detail.hpp"

namespace ep::trace {
namespace detail {

namespace {

// The fields by name (total_s, derived, apart). A field added after files
// were written goes with required = false: a file without it reads 0.
template <class T, class F>
void visit_transition(T& t, F&& f) {
  f("epoch", t.epoch);
  f("frozen_before", t.frozen_before);
  f("frozen_after", t.frozen_after);
  f("K_before", t.K_before);
  f("K_after", t.K_after);
  f("replicas_before", t.replicas_before);
  f("replicas_after", t.replicas_after);
  f("cache_probe_s", t.cache_probe_s, false);  // before it, the probe was inside planning_s
  f("planning_s", t.planning_s);
  f("state_transfer_s", t.state_transfer_s);
  f("rebuild_s", t.rebuild_s);
  f("repartition_s", t.repartition_s);
  f("warmup_s", t.warmup_s);
  f("first_batch_prefetched", t.first_batch_prefetched, false);
  f("first_batch_wait_s", t.first_batch_wait_s, false);
}

}  // namespace

nlohmann::json transition_to_json(const TransitionCost& t) {
  nlohmann::json j = nlohmann::json::object();
  visit_transition(t, [&](const char* name, const auto& v, bool = true) { j[name] = v; });
  j["total_s"] = t.total_s();
  return j;
}

TransitionCost transition_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected an object, found " + j.dump());
  TransitionCost t;
  std::vector<std::string_view> keys = {"total_s"};
  visit_transition(t, [&](const char* name, auto& v, bool required = true) {
    keys.emplace_back(name);
    using V = std::decay_t<decltype(v)>;
    if (!required && !j.contains(name))
      v = V{};
    else if constexpr (std::is_same_v<V, bool>) {
      if (!j.at(name).is_boolean()) bad_field(where, name, "true or false", j.at(name));
      v = j.at(name).get<bool>();
    } else if constexpr (std::is_same_v<V, int>)
      v = static_cast<int>(get_int(j, name, where, 0, 1 << 30));
    else
      v = get_number(j, name, where);
  });
  check_keys(j, keys, where);
  const double total = get_number(j, "total_s", where);
  if (total != t.total_s())
    bad_field(where, "total_s", std::to_string(t.total_s()) + " (the sum of the parts)", j.at("total_s"));
  return t;
}

}  // namespace detail

void write_transitions_json(const std::vector<TransitionCost>& transitions, std::ostream& out,
                            const std::string& path) {
  // Keys in nlohmann::json's order (sorted), two-space indent.
  nlohmann::json all = nlohmann::json::array();
  for (const TransitionCost& t : transitions) all.push_back(detail::transition_to_json(t));
  if (!(out << all.dump(2) << '\n')) throw Error("writing " + path + ": write failed");
}

std::vector<TransitionCost> read_transitions_json(const std::string& path) {
  InputFile file(path, {"transitions.json", detail::kPerRunBytes, detail::kPerRunWhy});
  const auto doc = parse_json<detail::json>(file.stream(), path);
  if (!doc.is_array()) throw Error(path + ": expected a JSON array of transitions at the top level");
  std::vector<TransitionCost> out;
  for (std::size_t i = 0; i < doc.size(); ++i)
    out.push_back(detail::transition_from_json(doc[i], path + ": transition " + std::to_string(i)));
  return out;
}

}  // namespace ep::trace

// The run state a checkpoint carries (traces/SCHEMA.md, "Run state"). Its
// epochs are encoded as the epoch CSV's columns, its transitions as
// transitions.json's objects.
#include "traces/epoch_columns.hpp"
#include "traces/io.hpp"
#include "traces/run_outputs.hpp"
#include "traces/run_state_detail.hpp"

namespace ep::trace {
namespace {

using namespace detail;
using sorted_json = nlohmann::json;  // written with sorted keys; read into detail::json

sorted_json epoch_to_json(const EpochMetrics& m) {
  sorted_json j = sorted_json::object();
  visit_columns(m, [&](const char* name, const auto& v) { j[name] = v; });
  return j;
}

EpochMetrics epoch_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": expected an object, found " + j.dump());
  EpochMetrics m;
  std::vector<std::string_view> keys;
  visit_columns(m, [&](const char* name, auto& v) {
    keys.emplace_back(name);
    if (is_later_column(name) && !j.contains(name)) return;  // a checkpoint written before the column
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, std::string>) {
      v = get_string(j, name, where);
    } else if constexpr (std::is_same_v<T, bool>) {
      const json& b = field(j, name, where);
      if (!b.is_boolean()) bad_field(where, name, "true or false", b);
      v = b.get<bool>();
    } else if constexpr (std::is_same_v<T, int>) {
      v = static_cast<int>(get_int(j, name, where, -1, 1 << 30));
    } else {
      v = get_number(j, name, where);
    }
  });
  check_keys(j, keys, where);
  check_source(m.source, where);
  if (!valid_layer_list(m.frozen_inside))
    bad_field(where, "frozen_inside", "'-' or ascending layers like '4 7'", j["frozen_inside"]);
  return m;
}

// An array of numbers, `key` naming it in errors.
std::vector<double> numbers(const json& a, const std::string& key, const std::string& where) {
  if (!a.is_array()) bad_field(where, key, "an array of numbers", a);
  std::vector<double> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number()) bad_field(where, key + "[" + std::to_string(i) + "]", "a number", a[i]);
    out.push_back(a[i].get<double>());
  }
  return out;
}

// A key of an object keyed by integers ("4": ...).
int int_key(const std::string& key, const std::string& field_name, const std::string& where) {
  std::size_t used = 0;
  int v = -1;
  try {
    v = std::stoi(key, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != key.size() || v < 0) throw Error(where + ": field '" + field_name + "': key '" + key +
                                               "': expected a non-negative integer");
  return v;
}

constexpr std::int64_t kMax = std::int64_t{1} << 62;

sorted_json cache_to_json(const MeasuredCache& m) { return {{"read_s", m.read_s}, {"frozen_forward_s", m.frozen_forward_s}}; }

MeasuredCache cache_from_json(const json& m, const std::string& at) {
  if (!m.is_object()) throw Error(at + ": expected an object, found " + m.dump());
  check_keys(m, {"read_s", "frozen_forward_s"}, at);
  return {get_number(m, "read_s", at), get_number(m, "frozen_forward_s", at)};
}

int frozen_count(const json& f, const std::string& where, const std::string& field_name) {
  if (!f.is_number_integer() || f.get<std::int64_t>() < 0 || f.get<std::int64_t>() > (1 << 30))
    bad_field(where, field_name, "a non-negative integer", f);
  return f.get<int>();
}

// "steps": per freeze step {"frozen": n}, with "inside" (layers frozen past
// the prefix) and "set_reason" where a per-layer policy set them, and
// "cache" where it probed.
std::vector<StepInputs> steps_from_json(const json& j, const std::string& where) {
  std::vector<StepInputs> out;
  const json& steps = get_array(j, "steps", where);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string at = where + ": steps[" + std::to_string(i) + "]";
    if (!steps[i].is_object()) throw Error(at + ": expected an object, found " + steps[i].dump());
    check_keys(steps[i], {"frozen", "inside", "set_reason", "cache"}, at);
    StepInputs& in = out.emplace_back();
    in.frozen_layers = frozen_count(field(steps[i], "frozen", at), at, "frozen");
    if (steps[i].contains("inside"))  // a per-layer policy's layers past the prefix
      in.frozen_inside = get_layers_past(steps[i], "inside", in.frozen_layers, at);
    if (steps[i].contains("set_reason")) in.frozen_set_reason = get_string(steps[i], "set_reason", at);
    if (steps[i].contains("cache")) in.cache = cache_from_json(steps[i]["cache"], at + ": cache");
  }
  return out;
}

// A checkpoint written before "steps": the frozen count per step, and the
// cache measured per frozen depth, which each step at that depth probed.
std::vector<StepInputs> steps_from_history(const json& j, const std::string& where) {
  std::map<int, MeasuredCache> caches;
  for (const auto& [f, m] : get_object(j, "cache_measurements", where).items())
    caches[int_key(f, "cache_measurements", where)] = cache_from_json(m, where + ": cache_measurements." + f);
  std::vector<StepInputs> out;
  const json& history = get_array(j, "frozen_history", where);
  for (std::size_t i = 0; i < history.size(); ++i) {
    StepInputs& in = out.emplace_back();
    in.frozen_layers = frozen_count(history[i], where, "frozen_history[" + std::to_string(i) + "]");
    if (const auto it = caches.find(in.frozen_layers); it != caches.end()) in.cache = it->second;
  }
  return out;
}

}  // namespace

std::string run_state_json(const RunState& s) {
  sorted_json chunks = sorted_json::object(), steps = sorted_json::array(), epochs = sorted_json::array(),
              transitions = sorted_json::array();
  for (const auto& [K, t] : s.chunk_times) chunks[std::to_string(K)] = t;
  for (const StepInputs& in : s.steps) {
    sorted_json step = {{"frozen", in.frozen_layers}};
    if (!in.frozen_inside.empty()) step["inside"] = in.frozen_inside;
    if (!in.frozen_set_reason.empty()) step["set_reason"] = in.frozen_set_reason;
    if (in.cache) step["cache"] = cache_to_json(*in.cache);
    steps.push_back(step);
  }
  for (const auto& e : s.epochs) epochs.push_back(epoch_to_json(e));
  for (const auto& t : s.transitions) transitions.push_back(transition_to_json(t));
  const sorted_json j = {{"epoch", s.epoch},
                  {"consumed", s.consumed},
                  {"iteration", s.iteration},
                  {"interval_norm_sum", s.interval_norm_sum},
                  {"interval_iterations", s.interval_iterations},
                  {"steps", steps},
                  {"chunk_times", chunks},
                  {"train_s", s.train_s},
                  {"epoch_loss_sum", s.epoch_loss_sum},
                  {"epoch_real", s.epoch_real},
                  {"epoch_correct", s.epoch_correct},
                  {"epoch_elapsed_s", s.epoch_elapsed_s},
                  {"epochs", epochs},
                  {"transitions", transitions},
                  {"iteration_losses", s.iteration_losses},
                  {"grad_norms", s.grad_norms}};
  return j.dump();
}

RunState parse_run_state(const std::string& text, const std::string& where) {
  const json j = parse_json<json>(text, where);
  if (!j.is_object()) throw Error(where + ": expected a JSON object, found " + j.dump().substr(0, 60));
  const bool before_steps = j.contains("frozen_history");  // written before "steps"
  std::vector<std::string_view> keys{"epoch",          "consumed",        "iteration",  "interval_norm_sum",
                                     "interval_iterations", "chunk_times", "train_s",    "epoch_loss_sum",
                                     "epoch_real",     "epoch_correct",   "epoch_elapsed_s", "epochs",
                                     "transitions",    "iteration_losses", "grad_norms"};
  if (before_steps) keys.insert(keys.end(), {"frozen_history", "cache_measurements"});
  else keys.push_back("steps");
  check_keys(j, keys, where);
  RunState s;
  s.epoch = static_cast<int>(get_int(j, "epoch", where, 0, 1 << 30));
  s.consumed = get_int(j, "consumed", where, 0, kMax);
  s.iteration = get_int(j, "iteration", where, 0, kMax);
  s.interval_norm_sum = numbers(field(j, "interval_norm_sum", where), "interval_norm_sum", where);
  s.interval_iterations = get_int(j, "interval_iterations", where, 0, kMax);
  s.steps = before_steps ? steps_from_history(j, where) : steps_from_json(j, where);
  for (const auto& [K, t] : get_object(j, "chunk_times", where).items())
    s.chunk_times[int_key(K, "chunk_times", where)] = numbers(t, "chunk_times." + K, where);
  s.train_s = get_number(j, "train_s", where);
  s.epoch_loss_sum = get_number(j, "epoch_loss_sum", where);
  s.epoch_real = get_int(j, "epoch_real", where, 0, kMax);
  s.epoch_correct = get_int(j, "epoch_correct", where, 0, kMax);
  s.epoch_elapsed_s = get_number(j, "epoch_elapsed_s", where);
  const json& epochs = get_array(j, "epochs", where);
  for (std::size_t i = 0; i < epochs.size(); ++i)
    s.epochs.push_back(epoch_from_json(epochs[i], where + ": epochs[" + std::to_string(i) + "]"));
  const json& transitions = get_array(j, "transitions", where);
  for (std::size_t i = 0; i < transitions.size(); ++i)
    s.transitions.push_back(transition_from_json(transitions[i], where + ": transitions[" + std::to_string(i) + "]"));
  s.iteration_losses = numbers(field(j, "iteration_losses", where), "iteration_losses", where);
  const json& norms = get_array(j, "grad_norms", where);
  for (std::size_t i = 0; i < norms.size(); ++i)
    s.grad_norms.push_back(numbers(norms[i], "grad_norms[" + std::to_string(i) + "]", where));
  return s;
}

}  // namespace ep::trace

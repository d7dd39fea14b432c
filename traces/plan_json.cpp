// A strict reader of plan.json (traces/SCHEMA.md, "Plans"). The planner's
// to_json writes it, from the Plan and the model's sublayer names; the
// fields read here are the ones a run's readers rely on.
#include "traces/io.hpp"
#include "traces/run_outputs.hpp"

namespace ep::trace {
namespace {

using namespace detail;

// /2 adds the layers frozen inside (decision 0037); a /1 file has none.
constexpr const char* kPlanSchema = "elasticpipe.plan/2";
constexpr const char* kPlanSchemaBefore = "elasticpipe.plan/1";
constexpr std::int64_t kMaxInt = 1 << 30;

int get_small(const json& obj, const std::string& key, const std::string& where, int lo = 0) {
  return static_cast<int>(get_int(obj, key, where, lo, kMaxInt));
}

PlanRecord read_plan(const json& p, const std::string& where) {
  if (!p.is_object()) throw Error(where + ": expected an object, found " + p.dump().substr(0, 60));
  PlanRecord r;
  r.id = get_small(p, "id", where);
  r.freeze_step = get_small(p, "freeze_step", where);
  const json& epochs = get_array(p, "epochs", where);
  if (epochs.size() != 2 || !epochs[0].is_number_integer() || !epochs[1].is_number_integer() ||
      epochs[0].get<std::int64_t>() < 0 || epochs[1].get<std::int64_t>() < epochs[0].get<std::int64_t>() ||
      epochs[1].get<std::int64_t>() > kMaxInt)
    bad_field(where, "epochs", "[first, end] with 0 <= first <= end", epochs);
  r.first_epoch = epochs[0].get<int>();
  r.end_epoch = epochs[1].get<int>();
  r.frozen_layers = get_small(p, "frozen_layers", where);
  if (p.contains("frozen_inside")) r.frozen_inside = get_layers_past(p, "frozen_inside", r.frozen_layers, where);
  r.K = get_small(p, "K", where, 1);
  r.M = get_small(p, "M", where, 1);
  r.replicas = get_small(p, "replicas", where, 1);
  const json& on = field(get_object(p, "cache", where), "on", where + ": cache");
  if (!on.is_boolean()) bad_field(where + ": cache", "on", "true or false", on);
  r.cache = on.get<bool>();
  r.iteration_s = get_number(p, "iteration_s", where);
  return r;
}

}  // namespace

PlanFile read_plan_json(const std::string& path) {
  const json doc = read_json_file(path, {"plan.json", kPerRunBytes, kPerRunWhy});
  const json& schema = field(doc, "schema", path);
  if (schema != kPlanSchema && schema != kPlanSchemaBefore)
    bad_field(path, "schema", std::string("\"") + kPlanSchema + "\" or \"" + kPlanSchemaBefore + "\"", schema);
  PlanFile f;
  f.config = get_string(doc, "config", path);
  f.cost_model = get_string(doc, "cost_model", path);
  f.objective = get_string(doc, "objective", path);
  f.L = get_small(doc, "L", path, 1);
  f.K0 = get_small(doc, "K0", path, 1);
  const json& plans = get_array(doc, "plans", path);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const std::string where = path + ": plans[" + std::to_string(i) + "]";
    f.plans.push_back(read_plan(plans[i], where));
  }
  return f;
}

}  // namespace ep::trace

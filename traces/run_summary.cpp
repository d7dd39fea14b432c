// Run summary JSON (traces/SCHEMA.md, "Run summary").
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <type_traits>

#include "traces/io.hpp"

namespace ep::trace {
namespace {

using namespace detail;

// The fields of a mode entry, in file order.
template <class S, class F>
void visit_mode(S& m, F&& f) {
  f("mode", m.mode);
  f("start_s", m.start_s);
  f("total_s", m.total_s);
  f("samples_per_s", m.samples_per_s);
  f("speedup", m.speedup);
  f("final_accuracy", m.final_accuracy);
  f("fits_memory", m.fits_memory);
  f("peak_memory_bytes", m.peak_memory_bytes);
  f("updates", m.updates);
  f("global_batch_min", m.global_batch_min);
  f("global_batch_max", m.global_batch_max);
  f("utilisation", m.utilisation);
  f("epoch_s", m.epoch_s);
}

void check_finite(double v, const std::string& where, const std::string& key) {
  if (!std::isfinite(v))
    throw Error(where + ": field '" + key + "': expected a finite number, found " + std::to_string(v));
}

void check_summary(const RunSummary& s, const std::string& where) {
  check_source(s.source, where);
  if (s.reference && std::none_of(s.modes.begin(), s.modes.end(), [&](const ModeSummary& m) { return m.mode == *s.reference; }))
    throw Error(where + ": field 'reference': expected one of the modes, found '" + *s.reference + "'");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < s.modes.size(); ++i) {
    const std::string mw = where + ": modes[" + std::to_string(i) + "]";
    if (!seen.insert(s.modes[i].mode).second)
      throw Error(mw + ": mode '" + s.modes[i].mode + "' appears twice");
    visit_mode(s.modes[i], [&](const char* key, const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, double>) check_finite(v, mw, key);
      if constexpr (std::is_same_v<T, std::optional<double>>)
        if (v) check_finite(*v, mw, key);
      if constexpr (std::is_same_v<T, std::vector<double>>)
        for (std::size_t e = 0; e < v.size(); ++e)
          check_finite(v[e], mw, std::string(key) + "[" + std::to_string(e) + "]");
    });
  }
}

void read_value(const json& obj, const char* key, const std::string& where, std::string& v) {
  v = get_string(obj, key, where);
}
void read_value(const json& obj, const char* key, const std::string& where, double& v) {
  v = get_number(obj, key, where);
}
void read_value(const json& obj, const char* key, const std::string& where, std::optional<double>& v) {
  if (field(obj, key, where).is_null())
    v.reset();
  else
    v = get_number(obj, key, where);
}
void read_value(const json& obj, const char* key, const std::string& where, bool& v) {
  const json& x = field(obj, key, where);
  if (!x.is_boolean()) bad_field(where, key, "true or false", x);
  v = x.get<bool>();
}
void read_value(const json& obj, const char* key, const std::string& where, std::int64_t& v) {
  v = get_int(obj, key, where, 0, std::numeric_limits<std::int64_t>::max());
}
void read_value(const json& obj, const char* key, const std::string& where, std::vector<double>& v) {
  for (const json& x : get_array(obj, key, where)) {
    if (!x.is_number()) bad_field(where, key, "an array of numbers", obj.at(key));
    v.push_back(x.get<double>());
  }
}

}  // namespace

void write_summary_json(const RunSummary& s, std::ostream& out, const std::string& path) {
  check_summary(s, "writing " + path);
  json modes = json::array();
  for (const ModeSummary& m : s.modes) {
    json o = json::object();
    visit_mode(m, [&](const char* key, const auto& v) {
      using T = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<T, std::optional<double>>)
        o[key] = v ? json(*v) : json(nullptr);
      else
        o[key] = v;
    });
    modes.push_back(std::move(o));
  }
  const json doc = {{"schema", kSchemaVersion},
                    {"source", s.source},
                    {"config", s.config},
                    {"reference", s.reference ? json(*s.reference) : json(nullptr)},
                    {"modes", std::move(modes)},
                    {"metadata", metadata_json(s.metadata)}};
  try {
    out << doc.dump(2) << "\n";
  } catch (const json::exception& e) {  // e.g. a name that is not UTF-8
    throw Error("writing " + path + ": " + e.what());
  }
}

void write_summary_json(const RunSummary& s, const std::string& path) {
  AtomicFile file(path);
  write_summary_json(s, file.stream(), path);
  file.commit();
}

RunSummary read_summary_json(const std::string& path) {
  const json doc = read_json_file(path, {"summary.json", kPerRunBytes, kPerRunWhy});
  check_schema(doc, path);
  check_keys(doc, {"schema", "source", "config", "reference", "modes", "metadata"}, path);
  RunSummary s;
  s.source = get_string(doc, "source", path);
  s.config = get_string(doc, "config", path);
  if (!field(doc, "reference", path).is_null()) s.reference = get_string(doc, "reference", path);
  s.metadata = get_metadata(doc, "metadata", path);
  const json& modes = get_array(doc, "modes", path);
  for (std::size_t i = 0; i < modes.size(); ++i) {
    const std::string mw = path + ": modes[" + std::to_string(i) + "]";
    if (!modes[i].is_object()) throw Error(mw + ": expected an object");
    ModeSummary m;
    std::vector<std::string_view> keys;
    visit_mode(m, [&](const char* key, const auto&) { keys.emplace_back(key); });
    check_keys(modes[i], keys, mw);
    visit_mode(m, [&](const char* key, auto& v) { read_value(modes[i], key, mw, v); });
    s.modes.push_back(std::move(m));
  }
  check_summary(s, path);
  return s;
}

}  // namespace ep::trace

// Internal to traces/: file access (reading through planner/input_file.hpp,
// writing through atomic_file.hpp) and typed JSON field access whose errors
// name the file, the place in it, the field, what was expected and what was
// found. Not for use outside traces/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "planner/error.hpp"
#include "planner/input_file.hpp"
#include "planner/json_input.hpp"
#include "traces/atomic_file.hpp"
#include "traces/trace.hpp"

namespace ep::trace::detail {

using json = nlohmann::ordered_json;

// What the files of a run can hold (read through planner/input_file.hpp):
// a row or an object per epoch, plan, sweep point or candidate M is far
// below a million rows of a few hundred bytes; a row or a span per
// iteration (iterations.csv, trace.json) grows with the training.
inline constexpr std::int64_t kPerRunBytes = std::int64_t{256} << 20;
inline constexpr std::int64_t kPerIterationBytes = std::int64_t{16} << 30;
inline constexpr const char* kPerRunWhy = "a row per epoch, plan, sweep point or candidate M";
inline constexpr const char* kPerIterationWhy = "a row or a span per iteration of a training";

// A JSON file whose top level is an object; callback as in json::parse.
inline json read_json_file(const std::string& path, const InputFormat& format,
                           const json::parser_callback_t& callback = nullptr) {
  InputFile in(path, format);
  json doc = parse_json<json>(in.stream(), path, callback);
  if (!doc.is_object()) throw Error(path + ": expected a JSON object at the top level");
  return doc;
}

[[noreturn]] inline void bad_field(const std::string& where, const std::string& key,
                                   const std::string& expected, const json& found) {
  std::string text = found.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  throw Error(where + ": field '" + key + "': expected " + expected + ", found " + text);
}

inline const json& field(const json& obj, const std::string& key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw Error(where + ": missing field '" + key + "'");
  return *it;
}

inline std::string get_string(const json& obj, const std::string& key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_string()) bad_field(where, key, "a string", v);
  return v.get<std::string>();
}

inline double get_number(const json& obj, const std::string& key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_number()) bad_field(where, key, "a number", v);
  return v.get<double>();
}

inline std::int64_t get_int(const json& obj, const std::string& key, const std::string& where,
                            std::int64_t lo, std::int64_t hi) {
  const json& v = field(obj, key, where);
  const bool too_big = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi);
  if (v.is_number_integer() && !too_big) {
    const auto i = v.get<std::int64_t>();
    if (i >= lo && i <= hi) return i;
  }
  bad_field(where, key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", v);
}

inline const json& get_object(const json& obj, const std::string& key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_object()) bad_field(where, key, "an object", v);
  return v;
}

inline const json& get_array(const json& obj, const std::string& key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_array()) bad_field(where, key, "an array", v);
  return v;
}

// Layers frozen past a prefix of `prefix` layers (decision 0037): an
// array of layers, ascending, each past the prefix.
inline std::vector<int> get_layers_past(const json& obj, const std::string& key, int prefix, const std::string& where) {
  const json& a = get_array(obj, key, where);
  std::vector<int> out;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const json& l = a[k];
    const bool too_big = l.is_number_unsigned() && l.get<std::uint64_t>() > (std::uint64_t{1} << 30);
    if (!l.is_number_integer() || too_big || l.get<std::int64_t>() <= (out.empty() ? prefix : out.back()))
      bad_field(where, key + "[" + std::to_string(k) + "]", "ascending layers past the prefix", l);
    out.push_back(l.get<int>());
  }
  return out;
}

// Metadata: text held as text, written with its numbers as JSON numbers
// (a script reads "alpha": 0.5, not "0.5"). A value is written as a number
// only where the number prints back as the same text, so reading it back
// (number_text) gives the text that was held.
inline json metadata_json(const std::map<std::string, std::string>& m) {
  json out = json::object();
  for (const auto& [k, v] : m) {
    json n = json::parse(v, nullptr, false);
    out[k] = n.is_number() && !n.is_discarded() && n.dump() == v ? std::move(n) : json(v);
  }
  return out;
}

inline std::map<std::string, std::string> get_metadata(const json& obj, const std::string& key,
                                                       const std::string& where) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : get_object(obj, key, where).items()) {
    if (!v.is_string() && !v.is_number()) bad_field(where + ": " + key, k, "a string or a number", v);
    m[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  return m;
}

// Strict parsing: every key of obj must be one of known.
inline void check_keys(const json& obj, const std::vector<std::string_view>& known,
                       const std::string& where) {
  for (const auto& [k, v] : obj.items())
    if (std::find(known.begin(), known.end(), k) == known.end())
      throw Error(where + ": unknown field '" + k + "'");
}

inline void check_schema(const json& obj, const std::string& where) {
  const json& v = field(obj, "schema", where);
  if (v == kSchemaVersion) return;
  // Another version of these files: said so, with what to do.
  const bool ours = v.is_string() && v.get<std::string>().rfind("elasticpipe.trace/", 0) == 0;
  bad_field(where, "schema",
            std::string("\"") + kSchemaVersion + "\"" +
                (ours ? " (a file of another elasticpipe version: simulate or train again to write this one)" : ""),
            v);
}

inline void check_source(const std::string& source, const std::string& where) {
  if (source != "sim" && source != "exec")
    throw Error(where + ": source '" + source + "': expected sim or exec");
}

}  // namespace ep::trace::detail

// The config loader's (config.cpp) and the back ends' section readers'
// (sim/sim_config.cpp, exec/exec_config.cpp): a strict reader of one TOML
// document. It reads typed, range-checked values by dotted key, remembers
// where each came from (a file line or a --set flag) and which keys were
// consumed, so that leftovers are reported as unknown; every failure is a
// config_error naming file:line, the key, what was expected and what was
// found. Each section's schema (which keys, their ranges) is its reader's.
#pragma once

#include <toml++/toml.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "planner/error.hpp"

namespace ep {

// A config as read: the TOML with the --set values applied, the file it
// came from, the keys given by --set, and the keys the planner read as
// paths. Kept by the Config so that a back end reads its own section from
// it (Config::document).
struct ConfigDocument {
  toml::table root;
  std::string origin;
  std::set<std::string> overridden;
  std::set<std::string> path_keys;
};

}  // namespace ep

namespace ep::config_reader {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

template <class E, std::size_t N>
std::string enum_name(const EnumName<E> (&table)[N], E value) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  return "?";
}

// The value named `name` in `table`; null: none is.
template <class E, std::size_t N>
const E* enum_value(const EnumName<E> (&table)[N], const std::string& name) {
  for (const auto& e : table)
    if (name == e.name) return &e.value;
  return nullptr;
}

template <class E, std::size_t N>
std::string enum_choices(const EnumName<E> (&table)[N]) {
  std::string out = "one of ";
  for (std::size_t i = 0; i < N; ++i) out += (i ? "|" : "") + std::string(table[i].name);
  return out;
}

inline std::string describe(const toml::node& node) {
  std::ostringstream os;
  switch (node.type()) {
    case toml::node_type::string: os << "string \"" << *node.value<std::string>() << "\""; break;
    case toml::node_type::integer: os << "integer " << *node.value<std::int64_t>(); break;
    case toml::node_type::floating_point: os << "float " << *node.value<double>(); break;
    case toml::node_type::boolean: os << "boolean " << (*node.value<bool>() ? "true" : "false"); break;
    case toml::node_type::table: os << "a table"; break;
    case toml::node_type::array: os << "an array"; break;
    default: os << "a date/time"; break;
  }
  return os.str();
}

inline std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Walks one document, remembering where each key came from and which keys
// were consumed, so that leftovers are reported as unknown.
class Reader {
 public:
  Reader(const toml::table& root, std::string origin, std::set<std::string> overridden)
      : root_(root), origin_(std::move(origin)), overridden_(std::move(overridden)) {}
  explicit Reader(const ConfigDocument& d) : Reader(d.root, d.origin, d.overridden) {}

  SourcePos pos_of(const std::string& key) const {
    if (const auto flag = override_of(key)) return {"--set " + *flag, 0, 0};
    const toml::node* n = root_.at_path(key).node();
    if (n && n->source().begin.line > 0) return source(*n, key);
    // A missing key: point at the innermost of its sections present, else
    // the file.
    for (std::string section = key; section.find('.') != std::string::npos;) {
      section.resize(section.rfind('.'));
      const toml::node* sec = root_.at_path(section).node();
      if (sec && sec->source().begin.line > 0) return source(*sec, section);
    }
    return {origin_, 0, 0};
  }

  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const std::string& found) const {
    throw config_error(pos_of(key), key, expected, found);
  }

  // The keys read as paths: a job's processes may name one file by other
  // paths (another mount on each node).
  [[nodiscard]] const std::set<std::string>& path_keys() const { return path_keys_; }

  std::map<std::string, SourcePos> positions() const {
    std::map<std::string, SourcePos> out;
    for (const std::string& key : used_) out.emplace(key, pos_of(key));
    return out;
  }

  const toml::node* get(const std::string& key) {
    used_.insert(key);
    return root_.at_path(key).node();
  }

  bool has(const std::string& key) const { return root_.at_path(key).node() != nullptr; }

  const toml::node& require(const std::string& key, const std::string& expected) {
    const toml::node* n = get(key);
    if (!n) fail(key, expected, "nothing (the key is required)");
    return *n;
  }

  // Numbers: an integer is accepted where a float is expected.
  void number(const std::string& key, double& out, bool required) {
    const toml::node* n = required ? &require(key, "a number") : get(key);
    if (!n) return;
    if (auto v = n->value<double>(); v && (n->is_floating_point() || n->is_integer())) {
      // No key means anything by inf or nan (an infinite learning rate or
      // bandwidth is a typo, not a setting).
      if (!std::isfinite(*v)) fail(key, "a finite number", describe(*n));
      out = *v;
      return;
    }
    fail(key, "a number", describe(*n));
  }

  // A number in [lo, hi]: physical quantities have physical ranges, and
  // values outside them make the planner's and SimGrid's arithmetic
  // meaningless (a bandwidth of 1e-300 B/s deadlocks the simulation).
  void quantity(const std::string& key, double& out, bool required, double lo, double hi, const char* what) {
    number(key, out, required);
    if (!(out >= lo && out <= hi))
      fail(key, std::string("a number in [") + fmt(lo) + ", " + fmt(hi) + "] (" + what + ")", fmt(out));
  }

  // Seconds per message, 0 or in [1e-8, 10]: SimGrid counts nanoseconds, so
  // a shorter latency would be lost.
  void latency(const std::string& key, double& out, bool required) {
    quantity(key, out, required, 0, 10, "seconds per message; a slow WAN has 0.3");
    if (out > 0 && out < 1e-8)
      fail(key, "0 or a number in [1e-08, 10] (seconds per message: a message crosses 2 m of cable in 10 ns)",
           fmt(out));
  }

  // An integer read as the 64-bit value written, then checked against
  // [lo, hi] (hi with `why`, the physical reason for it) and the range of
  // the field it goes into: nothing is cut to 32 bits silently.
  template <class Int>
  void integer(const std::string& key, Int& out, bool required, std::int64_t lo, std::int64_t hi,
               const char* why) {
    const toml::node* n = required ? &require(key, "an integer") : get(key);
    if (!n) return;
    if (!n->is_integer()) fail(key, "an integer", describe(*n));
    const std::int64_t v = *n->value<std::int64_t>();
    check_bounds(key, v, lo, hi, why);
    out = static_cast<Int>(v);
  }

  void check_bounds(const std::string& key, std::int64_t v, std::int64_t lo, std::int64_t hi, const char* why) const {
    if (v < lo) fail(key, "an integer >= " + std::to_string(lo), std::to_string(v));
    if (v > hi) fail(key, "an integer <= " + std::to_string(hi) + " (" + why + ")", std::to_string(v));
  }

  void boolean(const std::string& key, bool& out) {
    const toml::node* n = get(key);
    if (!n) return;
    if (!n->is_boolean()) fail(key, "a boolean (true|false)", describe(*n));
    out = *n->value<bool>();
  }

  void string(const std::string& key, std::string& out, bool required) {
    const toml::node* n = required ? &require(key, "a string") : get(key);
    if (!n) return;
    if (!n->is_string()) fail(key, "a string", describe(*n));
    out = *n->value<std::string>();
  }

  // A relative path in a file is relative to that file; from --set, to the
  // working directory.
  void path(const std::string& key, std::string& out) {
    path_keys_.insert(key);
    string(key, out, false);
    if (out.empty() || overridden_.count(key)) return;
    const std::filesystem::path p(out);
    if (p.is_relative()) out = (std::filesystem::path(origin_).parent_path() / p).lexically_normal().string();
  }

  template <class E, std::size_t N>
  void choice(const std::string& key, E& out, const EnumName<E> (&table)[N], bool required) {
    const toml::node* n = required ? &require(key, enum_choices(table)) : get(key);
    if (!n) return;
    if (const E* v = n->is_string() ? enum_value(table, *n->value<std::string>()) : nullptr) {
      out = *v;
      return;
    }
    fail(key, enum_choices(table), describe(*n));
  }

  // One of names known only at run time (a registry's).
  void choice(const std::string& key, std::string& out, const std::vector<std::string>& names, bool required) {
    std::string expected = "one of ";
    for (std::size_t i = 0; i < names.size(); ++i) expected += (i ? "|" : "") + names[i];
    const toml::node* n = required ? &require(key, expected) : get(key);
    if (!n) return;
    if (n->is_string() && std::find(names.begin(), names.end(), *n->value<std::string>()) != names.end()) {
      out = *n->value<std::string>();
      return;
    }
    fail(key, expected, describe(*n));
  }

  void string_list(const std::string& key, std::vector<std::string>& out) {
    const toml::array* arr = array(key, "an array of strings");
    if (!arr) return;
    out.clear();
    for (const auto& e : *arr) {
      if (!e.is_string() || e.value<std::string>()->empty())
        fail(key, "an array of non-empty strings", "an element " + describe(e));
      out.push_back(*e.value<std::string>());
    }
  }

  void int_list(const std::string& key, std::vector<int>& out) {
    const toml::array* arr = array(key, "an array of integers");
    if (!arr) return;
    out.clear();
    for (const auto& e : *arr) {
      if (!e.is_integer()) fail(key, "an array of integers", "an element " + describe(e));
      const std::int64_t v = *e.value<std::int64_t>();
      if (v < INT_MIN || v > INT_MAX) fail(key, "an array of 32-bit integers", "an element " + std::to_string(v));
      out.push_back(static_cast<int>(v));
    }
  }

  // A key another reader of the document consumed: known here too.
  void known(const std::string& key) { used_.insert(key); }

  // Every key present must have been consumed; sections must be tables.
  // `sections` are every section a config may have; `others` those of them
  // that other readers check (the back ends').
  void reject_unknown(const std::set<std::string>& sections, const std::set<std::string>& others = {}) const {
    for (const auto& [k, v] : root_) {
      const std::string sec(k.str());
      if (!sections.count(sec)) {
        std::string known;
        for (const auto& s : sections) known += (known.empty() ? "" : "|") + s;
        throw config_error(source(v, sec), sec, "a section " + known, "unknown section");
      }
      if (!v.is_table()) throw config_error(source(v, sec), sec, "a table", describe(v));
      if (!others.count(sec)) walk(*v.as_table(), sec);
    }
  }

  // Every key of [section] must have been consumed (a back end's reader).
  void reject_unknown_in(const std::string& section) const {
    if (const toml::node* n = root_.at_path(section).node(); n && n->is_table()) walk(*n->as_table(), section);
  }

 private:
  // The array at `key`; null when the key is absent.
  const toml::array* array(const std::string& key, const std::string& expected) {
    const toml::node* n = get(key);
    if (!n) return nullptr;
    const toml::array* arr = n->as_array();
    if (!arr) fail(key, expected, describe(*n));
    return arr;
  }

  // The --set that gave `key` its value: the key itself, or a table
  // containing it (--set cluster.device={...}).
  std::optional<std::string> override_of(const std::string& key) const {
    for (std::string k = key;; k = k.substr(0, k.rfind('.'))) {
      if (overridden_.count(k)) return k;
      if (k.find('.') == std::string::npos) return std::nullopt;
    }
  }

  SourcePos source(const toml::node& n, const std::string& key) const {
    if (const auto flag = override_of(key)) return {"--set " + *flag, 0, 0};
    // A node parsed from a --set value has no file: its line 1 is the flag's.
    if (!n.source().path || *n.source().path != origin_) return {"--set " + key, 0, 0};
    return {origin_, static_cast<int>(n.source().begin.line),
            static_cast<int>(n.source().begin.column)};
  }

  void walk(const toml::table& t, const std::string& prefix) const {
    for (const auto& [k, v] : t) {
      const std::string key = prefix + "." + std::string(k.str());
      if (used_.count(key)) continue;
      if (v.is_table()) {
        bool any_used = std::any_of(used_.begin(), used_.end(), [&](const std::string& u) {
          return u.rfind(key + ".", 0) == 0;
        });
        if (any_used) {
          walk(*v.as_table(), key);
          continue;
        }
      }
      const std::string near = nearest_known(key, prefix);
      throw config_error(source(v, key), key, "a known key of [" + prefix + "] (see docs/CONFIG.md)",
                         near.empty() ? "unknown key" : "unknown key (did you mean " + near + "?)");
    }
  }

  // The known key of [prefix] nearest `key` by edit distance of their last
  // names, where a slip of about a quarter of the name (at least two
  // characters) explains the difference; empty where none does.
  std::string nearest_known(const std::string& key, const std::string& prefix) const {
    const std::string name = key.substr(prefix.size() + 1);
    std::string best;
    std::size_t best_d = std::max<std::size_t>(2, name.size() / 4) + 1;
    for (const std::string& u : used_) {
      if (u.size() <= prefix.size() + 1 || u.compare(0, prefix.size() + 1, prefix + ".") != 0) continue;
      const std::string other = u.substr(prefix.size() + 1);
      if (other.find('.') != std::string::npos) continue;
      if (const std::size_t d = edit_distance(name, other); d < best_d) best_d = d, best = u;
    }
    return best;
  }

  static std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diag = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  }

  const toml::table& root_;
  std::string origin_;
  std::set<std::string> overridden_;
  std::set<std::string> used_;
  std::set<std::string> path_keys_;
};

}  // namespace ep::config_reader

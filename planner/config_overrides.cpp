#include "planner/config_overrides.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

namespace ep {
namespace {

// Applies "a.b.c=value" to the document. The value is parsed as TOML; if it
// is not valid TOML it is taken as a bare string (so `--set
// planner.partitioner=optimal` needs no quotes).
std::string apply_one(toml::table& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("--set '" + assignment + "': expected KEY=VALUE (e.g. planner.alpha=0.2)");
  const std::string key = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  // One --set is one value: text after a line break would be a second
  // assignment, parsed (or dropped) where nobody sees it.
  if (text.find_first_of("\r\n") != std::string::npos)
    throw Error("--set " + key + ": the value holds a line break; give one KEY=VALUE per --set");
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + text);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", text}};
  }
  if (parsed.size() != 1 || !parsed.get("v"))
    throw Error("--set " + key + ": expected one value, found '" + printable(text) + "'");
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  if (parts.size() < 2 || std::any_of(parts.begin(), parts.end(), [](auto& p) { return p.empty(); }))
    throw Error("--set '" + assignment + "': expected KEY of the form section.key (e.g. planner.alpha)");
  toml::table* t = &root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* next = t->get(parts[i]);
    if (!next) next = &t->insert_or_assign(parts[i], toml::table{}).first->second;
    if (!next->is_table())
      throw Error("--set " + key + ": '" + parts[i] + "' is not a table in the config");
    t = next->as_table();
  }
  t->insert_or_assign(parts.back(), std::move(*parsed.get("v")));
  return key;
}

}  // namespace

std::set<std::string> apply_overrides(toml::table& root, const Overrides& overrides) {
  std::set<std::string> keys;
  for (const auto& o : overrides) {
    const std::string key = apply_one(root, o);
    for (const std::string& k : keys)
      if (k == key || key.starts_with(k + ".") || k.starts_with(key + "."))
        throw Error("--set " + key + ": " + (k == key ? "given twice" : "overlaps --set " + k) +
                    "; set each key once");
    keys.insert(key);
  }
  return keys;
}

}  // namespace ep

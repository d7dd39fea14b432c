// Named entries that code adds at start-up, which a config then names:
// freeze policies (planner/freeze.hpp), the simulator's collective models
// (sim/collectives.hpp). The config's reader checks a name against
// names(), so a new entry needs no edit of the config code.
#pragma once

#include <algorithm>
#include <cctype>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "planner/error.hpp"

namespace ep {

template <class T>
class Registry {
 public:
  // `what` names an entry in messages ("freeze policy").
  Registry(std::string what, std::vector<std::pair<std::string, T>> built_in)
      : what_(std::move(what)), entries_(std::move(built_in)) {}

  // Throws ep::Error for a name that is taken or not lower_snake_case.
  void add(const std::string& name, T value) {
    const auto word = [](char ch) {
      const auto u = static_cast<unsigned char>(ch);
      return std::islower(u) || std::isdigit(u) || ch == '_';
    };
    if (name.empty() || !std::islower(static_cast<unsigned char>(name[0])) ||
        !std::all_of(name.begin(), name.end(), word))
      throw Error(what_ + " name \"" + printable(name) + "\": expected lower_snake_case");
    const std::lock_guard lock(mutex_);
    for (const auto& e : entries_)
      if (e.first == name) throw Error(what_ + " \"" + name + "\" is already registered");
    entries_.emplace_back(name, std::move(value));
  }

  // In the order added, built-ins first.
  [[nodiscard]] std::vector<std::string> names() const {
    const std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& e : entries_) out.push_back(e.first);
    return out;
  }

  [[nodiscard]] std::optional<T> find(const std::string& name) const {
    const std::lock_guard lock(mutex_);
    for (const auto& e : entries_)
      if (e.first == name) return e.second;
    return std::nullopt;
  }

 private:
  std::string what_;
  mutable std::mutex mutex_;  // tests may add while other threads read configs
  std::vector<std::pair<std::string, T>> entries_;
};

}  // namespace ep

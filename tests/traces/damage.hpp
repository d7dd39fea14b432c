// Shared by the trace test files (and the checkpoint tests): what a reader
// must do with a bad file (an ep::Error naming what is wrong, never another
// exception or a crash), and a full disk for writers.
#pragma once

#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <csignal>

#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "planner/error.hpp"
#include "tests/traces/support.hpp"

namespace ep::test {

// A disk that holds only `bytes` more for this process: writes beyond give
// EFBIG, as a full disk gives ENOSPC (RLIMIT_FSIZE, SIGXFSZ ignored).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

inline void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The message of the ep::Error that f throws; fails the test when f throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ep::Error& e) {
    return e.what();
  }
  FAIL("expected an ep::Error");
  return {};
}

inline void require_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const std::string msg = error_of(f);
  INFO(msg);
  for (const auto& p : parts) CHECK_THAT(msg, Catch::Contains(p));
}

// Random damage to a good file: a leaf replaced by another type or value, a
// key removed, or the text cut short. Reading must then give a result or an
// ep::Error naming the file, never another exception or a crash; JSON cut
// short is always refused, and some damage of every kind is.
template <class Read>
void survives_damage(const std::string& good, const std::string& bad, Read read, bool is_json) {
  using json = nlohmann::ordered_json;
  std::mt19937_64 rng(11);
  const std::string text = slurp(good);
  const json original = is_json ? json::parse(text) : json();
  const json flat = original.flatten();
  const std::vector<json> values = {nullptr, "x", -1, 0, 1.5, -2.5e300, true, json::object(), json::array()};
  int refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t cut = std::uniform_int_distribution<std::size_t>(0, text.size())(rng);
    std::string damaged = text.substr(0, cut);
    // Cut before the document's last non-blank character.
    bool must_refuse = is_json && trial % 3 == 0 && text.find_first_not_of(" \t\r\n", cut) != std::string::npos;
    if (is_json && trial % 3 != 0) {
      json doc = original;
      const json::json_pointer leaf(std::next(flat.begin(), std::uniform_int_distribution<long>(
                                                                0, static_cast<long>(flat.size()) - 1)(rng))
                                        .key());
      json& parent = doc[leaf.parent_pointer()];
      if (trial % 3 == 2)
        doc[leaf] = values[std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(rng)];
      else if (parent.is_object())
        parent.erase(leaf.back());
      else
        parent.erase(std::stoul(leaf.back()));
      damaged = doc.dump();
    } else if (!is_json && trial % 2 == 0) {
      damaged = text;
      damaged[std::uniform_int_distribution<std::size_t>(0, text.size() - 1)(rng)] = ",x9-.\n"[trial / 2 % 6];
    }
    spit(bad, damaged);
    if (damaged == text) must_refuse = false;
    INFO("trial " << trial << ": " << damaged.substr(0, 200));
    try {
      read(bad);
      CHECK_FALSE(must_refuse);
    } catch (const ep::Error& e) {
      ++refused;
      CHECK_THAT(std::string(e.what()), Catch::Contains(bad));
    }
  }
  CHECK(refused >= 30);
}

}  // namespace ep::test

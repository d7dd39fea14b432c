#include "traces/chunk_memo.hpp"

#include <cmath>
#include <filesystem>

#include "traces/io.hpp"

namespace ep::trace {

using detail::json;

namespace {

constexpr InputFormat kMemoFile{"chunk memo", 64 << 20, "an entry of a few numbers per timed plan"};

std::vector<int> ints(const json& a, const std::string& key, const std::string& where, int lo, int hi) {
  if (!a.is_array() || a.empty()) detail::bad_field(where, key, "a non-empty array of integers", a);
  std::vector<int> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool ok = a[i].is_number_integer() && a[i].get<double>() >= lo && a[i].get<double>() <= hi;
    if (!ok)
      detail::bad_field(where, key + "[" + std::to_string(i) + "]",
                        "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", a[i]);
    out.push_back(a[i].get<int>());
  }
  return out;
}

// `first_format`: an entry of the memo's first format, which had no programs.
ChunkMemoEntry entry_from_json(const json& e, const std::string& where, bool first_format) {
  if (!e.is_object()) throw Error(where + ": expected an object, found " + e.dump().substr(0, 60));
  detail::check_keys(e, {"key", "iteration_s"}, where);
  const json& k = detail::get_object(e, "key", where);
  const std::string kw = where + ".key";
  if (first_format)
    detail::check_keys(k, {"environment", "K", "batch", "M"}, kw);
  else
    detail::check_keys(k, {"environment", "K", "batch", "M", "programs"}, kw);
  ChunkMemoEntry out;
  out.key.environment = detail::get_string(k, "environment", kw);
  out.key.K = static_cast<int>(detail::get_int(k, "K", kw, 1, 1024));
  out.key.batch = static_cast<int>(detail::get_int(k, "batch", kw, 1, 1 << 30));
  out.key.M = ints(detail::field(k, "M", kw), "M", kw, 1, 100000);
  if (!first_format) {
    out.key.programs = detail::get_string(k, "programs", kw);
    if (out.key.programs.size() != 32 || out.key.programs.find_first_not_of("0123456789abcdef") != std::string::npos)
      detail::bad_field(kw, "programs", "32 hex digits", k.at("programs"));
  }
  const json& t = detail::get_array(e, "iteration_s", where);
  if (t.size() != out.key.M.size())
    detail::bad_field(where, "iteration_s", "one time per M (" + std::to_string(out.key.M.size()) + ")", t);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const bool ok = t[i].is_number() && std::isfinite(t[i].get<double>()) && t[i].get<double>() > 0;
    if (!ok) detail::bad_field(where, "iteration_s[" + std::to_string(i) + "]", "a positive number of seconds", t[i]);
    out.iteration_s.push_back(t[i].get<double>());
  }
  return out;
}

}  // namespace

std::vector<ChunkMemoEntry> read_chunk_memo(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  const json doc = detail::read_json_file(path, kMemoFile);
  // The first format is still read strictly (damage is said, not
  // ignored), then dropped: its keys lack the programs, so none can match.
  const bool first_format = !doc.contains("format");
  if (first_format) {
    detail::check_keys(doc, {"entries"}, path);
  } else {
    detail::check_keys(doc, {"format", "entries"}, path);
    if (detail::get_string(doc, "format", path) != kChunkMemoFormat)
      detail::bad_field(path, "format", std::string("\"") + kChunkMemoFormat + "\"", doc.at("format"));
  }
  const json& entries = detail::get_array(doc, "entries", path);
  std::vector<ChunkMemoEntry> out;
  for (std::size_t i = 0; i < entries.size(); ++i)
    out.push_back(entry_from_json(entries[i], path + ": entries[" + std::to_string(i) + "]", first_format));
  if (first_format) return {};
  return out;
}

void write_chunk_memo(const std::vector<ChunkMemoEntry>& entries, const std::string& path) {
  json doc = {{"format", kChunkMemoFormat}, {"entries", json::array()}};
  for (const ChunkMemoEntry& e : entries)
    doc["entries"].push_back({{"key", {{"environment", e.key.environment}, {"K", e.key.K}, {"batch", e.key.batch},
                                       {"M", e.key.M}, {"programs", e.key.programs}}},
                              {"iteration_s", e.iteration_s}});
  write_file_atomically(path, doc.dump(1) + "\n");
}

}  // namespace ep::trace

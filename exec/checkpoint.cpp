#include "exec/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "planner/error.hpp"
#include "planner/input_file.hpp"
#include "traces/atomic_file.hpp"

namespace ep::exec {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

std::string step_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%010lld", static_cast<long long>(step));
  return buf;
}

// "<prefix><digits>" -> the number; nullopt for anything else.
std::optional<std::int64_t> parse_number(std::string_view s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return std::nullopt;
  s.remove_prefix(prefix.size());
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Error(from.string() + ": cannot rename to " + to.string() + ": " + errno_text());
}

void remove_or_throw(const fs::path& path) {
  std::error_code ec;
  // state.bin first: a removal cut short leaves a dir no reader accepts.
  fs::remove(path / "state.bin", ec);
  if (!ec) fs::remove_all(path, ec);
  if (ec) throw Error(path.string() + ": cannot remove: " + ec.message());
}

// Keeps `just_written` and the keep-1 highest other steps; removes older
// step dirs and the .tmp-* leftovers of earlier steps (crashed writers).
void prune(const fs::path& root, std::int64_t just_written, int keep) {
  std::vector<std::pair<std::int64_t, fs::path>> steps;
  std::vector<fs::path> stale;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (const auto s = parse_number(name, "step-"); s && *s != just_written) {
      steps.emplace_back(*s, entry.path());
    } else if (name.starts_with(".tmp-")) {
      // .tmp-<step>-<pid>: one of an earlier step cannot still be in use.
      const std::string_view rest = std::string_view(name).substr(5);
      const auto dash = rest.find('-');
      const auto s = parse_number(rest.substr(0, dash), "");
      if (dash != std::string_view::npos && s && *s < just_written) stale.push_back(entry.path());
    }
  }
  if (ec) throw Error(root.string() + ": cannot list: " + ec.message());
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = static_cast<std::size_t>(keep - 1); i < steps.size(); ++i) remove_or_throw(steps[i].second);
  for (const auto& path : stale) remove_or_throw(path);
}

// `latest` holds one step dir's name and a line break.
constexpr InputFormat kLatestFile{"checkpoint pointer", 64, "it names one step-<n> directory"};

// The step dir `latest` names, read as written: its first line.
std::string latest_name(const fs::path& latest) {
  std::string name = read_input_file(latest.string(), kLatestFile);
  name.resize(std::min(name.find('\n'), name.size()));
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  return name;
}

}  // namespace

void write_checkpoint(const std::string& dir, std::int64_t step, std::span<const std::uint8_t> state, int keep) {
  if (keep < 1) throw Error("write_checkpoint: keep must be at least 1, got " + std::to_string(keep));
  if (step < 0) throw Error("write_checkpoint: negative step " + std::to_string(step));
  const fs::path root(dir);
  std::error_code ec;
  const bool new_root = !fs::exists(root, ec);
  fs::create_directories(root, ec);
  if (ec) throw Error(dir + ": cannot create checkpoint directory: " + ec.message());

  const std::string name = step_name(step);
  const std::string pid = std::to_string(::getpid());
  const fs::path final_dir = root / name;
  const fs::path tmp = root / (".tmp-" + std::to_string(step) + "-" + pid);
  fs::remove_all(tmp, ec);  // our pid's own leftover from an earlier life
  bool created = false;
  try {
    if (!fs::create_directory(tmp, ec) || ec) throw Error(tmp.string() + ": cannot create: " + ec.message());
    write_file_durably((tmp / "state.bin").string(), state);
    fsync_directory(tmp.string());
    if (fs::exists(final_dir)) {
      // A directory cannot be renamed over a non-empty one; replacing the
      // file is just as atomic, and `latest` stays valid throughout.
      rename_or_throw(tmp / "state.bin", final_dir / "state.bin");
      fsync_directory(final_dir.string());
      fs::remove_all(tmp, ec);
    } else {
      rename_or_throw(tmp, final_dir);
      created = true;
    }
    fsync_directory(root.string());
    write_file_atomically((root / "latest").string(), name + "\n");
  } catch (const Error& e) {
    // A failed write (a full disk) leaves the previous checkpoint as it was
    // and nothing of this one: neither the temporary dir nor a step dir
    // that `latest` does not name.
    fs::remove_all(tmp, ec);
    std::string named;
    try {
      named = latest_name(root / "latest");
    } catch (const Error&) {
    }
    if (created && named != name) fs::remove_all(final_dir, ec);
    if (new_root) fs::remove(root, ec);  // only if empty: the first checkpoint failed
    std::string what = e.what();  // named by the step it was to be, not the temporary dir that is gone
    if (what.starts_with(tmp.string())) what.replace(0, tmp.string().size(), final_dir.string());
    throw Error(what + " (nothing written; the previous checkpoint stays)");
  }
  // Only after `latest` moved on: it never names a removed dir.
  prune(root, step, keep);
}

LoadedCheckpoint read_checkpoint(const std::string& dir, std::int64_t max_state_bytes) {
  // "ckpt/step-5/" names its dir by the part before the slash.
  fs::path root = fs::path(dir).lexically_normal();
  if (!root.has_filename() && root.has_parent_path()) root = root.parent_path();
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw Error(dir + ": no such checkpoint directory");

  LoadedCheckpoint out;
  fs::path state_path = root / "state.bin";
  if (fs::exists(state_path, ec)) {  // DIR is a step dir itself
    out.step = parse_number(root.filename().string(), "step-").value_or(-1);
  } else {
    const fs::path latest = root / "latest";
    std::string name;
    try {
      name = latest_name(latest);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (no complete checkpoint in " + dir + ")");
    }
    const auto step = parse_number(name, "step-");
    if (!step) throw Error(latest.string() + ": names '" + printable(name) + "', not a step-<n> directory");
    out.step = *step;
    state_path = root / name / "state.bin";
  }
  out.path = state_path.string();
  InputFile file(out.path, {"checkpoint state", max_state_bytes, "this model's weights and optimizer state"});
  out.state.resize(static_cast<std::size_t>(file.size()));
  file.read_exactly(out.state.data(), out.state.size());
  return out;
}

}  // namespace ep::exec

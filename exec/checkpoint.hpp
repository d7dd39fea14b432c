// Checkpoints on disk: pack_state bytes (state.hpp) in a directory DIR:
//   DIR/step-<global step, zero-padded to 10>/state.bin
//   DIR/latest   text: the name of the newest complete step dir
// Written atomically: into DIR/.tmp-<step>-<pid>, fsync'd, renamed, then
// `latest` replaced via rename, so a kill -9 at any moment leaves the
// previous checkpoint intact (a leftover .tmp-* dir is ignored by readers).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ep::exec {

// Writes DIR/step-<step> (creating DIR) and points `latest` at it. Then
// keeps `keep` (>= 1) step dirs: the one just written plus the keep-1
// highest-numbered others (the newest `keep` when steps only grow), and
// removes the rest and .tmp-* leftovers of earlier steps. Rewriting an
// existing step replaces its state.bin atomically. Throws ep::Error naming
// the path on any I/O failure, leaving nothing of this checkpoint behind.
void write_checkpoint(const std::string& dir, std::int64_t step, std::span<const std::uint8_t> state,
                      int keep = 2);

struct LoadedCheckpoint {
  std::string path;   // the state.bin read
  std::int64_t step;  // from the step dir's name; -1 if it is not step-<n>
  std::vector<std::uint8_t> state;
};

// The bytes of DIR's newest checkpoint (per `latest`; DIR itself may also
// be a step dir, i.e. hold state.bin). Throws ep::Error naming the path
// when the directory, `latest` or state.bin is missing, unreadable, not a
// regular file, or state.bin is over `max_state_bytes` (max_state_bytes()
// of the model, state.hpp). The bytes are not validated here:
// unpack_state/peek_meta do that.
[[nodiscard]] LoadedCheckpoint read_checkpoint(const std::string& dir, std::int64_t max_state_bytes);

}  // namespace ep::exec

// The chunk memo (exec.chunk_memo; traces/SCHEMA.md, "Chunk memo"): the
// chunk search's measured iteration times kept across runs, one entry per
// (environment, the timed programs). Read strictly: a damaged memo is an
// error naming the file and the field, never a half-used entry.
#pragma once

#include <string>
#include <vector>

namespace ep::trace {

struct ChunkMemoKey {
  std::string environment;  // host, cores, device, libtorch, model, precision, ... (free text)
  int K = 0;
  int batch = 0;
  std::vector<int> M;  // the candidates, in the order timed
  std::string programs;  // digest of the timed programs (planner/program_text.hpp), 32 hex digits
  bool operator==(const ChunkMemoKey&) const = default;
};

struct ChunkMemoEntry {
  ChunkMemoKey key;
  std::vector<double> iteration_s;  // one per candidate M, seconds
};

inline constexpr const char* kChunkMemoFormat = "elasticpipe.chunk_memo/2";

// The entries of `path`, none when it does not exist or is of the first
// format (no `format` field; read as strictly, but its keys lack the
// programs, so none of them can match; the next search replaces it).
std::vector<ChunkMemoEntry> read_chunk_memo(const std::string& path);
void write_chunk_memo(const std::vector<ChunkMemoEntry>& entries, const std::string& path);

}  // namespace ep::trace

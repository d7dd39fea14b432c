// The chunk memo (exec.chunk_memo; traces/SCHEMA.md, "Chunk memo"): the
// chunk search's measured iteration times kept across runs, one entry per
// (environment, K, batch, candidate M list). Read strictly: a damaged memo
// is an error naming the file and the field, never a half-used entry.
#pragma once

#include <string>
#include <vector>

namespace ep::trace {

struct ChunkMemoKey {
  std::string environment;  // host, cores, device, libtorch, model, precision, ... (free text)
  int K = 0;
  int batch = 0;
  std::vector<int> M;  // the candidates, in the order timed
  bool operator==(const ChunkMemoKey&) const = default;
};

struct ChunkMemoEntry {
  ChunkMemoKey key;
  std::vector<double> iteration_s;  // one per candidate M, seconds
};

// The entries of `path`, none when it does not exist.
std::vector<ChunkMemoEntry> read_chunk_memo(const std::string& path);
void write_chunk_memo(const std::vector<ChunkMemoEntry>& entries, const std::string& path);

}  // namespace ep::trace

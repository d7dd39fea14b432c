// The safetensors format (Hugging Face's checkpoint files), without torch:
//   u64 little-endian N, N bytes of JSON (padded with spaces), the data.
// The JSON maps each tensor's name to {"dtype", "shape", "data_offsets":
// [begin, end]} (offsets into the data, which they must cover exactly, no
// hole, no overlap) and may hold "__metadata__" (string to string). The
// reader trusts nothing: the header's length, every offset, every shape's
// product, duplicate names and the file's size are checked before anything
// of their size is allocated, and each refusal is an ep::Error naming the
// file, the tensor, what was expected and what was found. exec/hf_weights
// turns the entries into tensors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ep {

// The most header bytes a reader accepts: safetensors' own bound.
constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;                // "F32", "BF16", "I64", ...
  std::vector<std::int64_t> shape;  // [] is a scalar
  std::uint64_t begin = 0, end = 0;  // byte offsets into the data (after the header)

  [[nodiscard]] std::uint64_t numel() const;
};

struct SafetensorsHeader {
  std::string path;
  std::uint64_t data_start = 0;  // file offset of the data: 8 + N
  std::vector<SafetensorsEntry> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;

  // The entry named `name`; null when there is none.
  [[nodiscard]] const SafetensorsEntry* find(const std::string& name) const;
};

// Bytes per element of a safetensors dtype; 0 for a name it does not have.
[[nodiscard]] std::size_t safetensors_dtype_bytes(const std::string& dtype);

// Reads and checks the header of `path` (the data is not read).
[[nodiscard]] SafetensorsHeader read_safetensors_header(const std::string& path);
// The same from a file's first bytes (tests); `file_size` is the whole file's.
[[nodiscard]] SafetensorsHeader parse_safetensors_header(const std::string& path, const std::string& head,
                                                         std::uint64_t file_size);

// The 8-byte length and the JSON header (padded with spaces to a multiple of
// 8 bytes, as safetensors writes it) for `tensors`, whose offsets must lie
// back to back from 0 in this order.
[[nodiscard]] std::string safetensors_header_bytes(const std::vector<SafetensorsEntry>& tensors,
                                                   const std::map<std::string, std::string>& metadata);

}  // namespace ep

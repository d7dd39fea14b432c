// CRC-32 (zlib's) of a buffer of any size: the checksum that closes
// checkpoints (state.hpp) and weights files (model.hpp).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ep::exec {

// `crc`: the CRC of what came before, to continue it (0: none).
inline std::uint32_t crc32_of(const std::uint8_t* p, std::size_t n, std::uint32_t crc_before = 0) {
  uLong crc = crc_before;
  while (n > 0) {  // zlib's crc32 takes a uInt length: chunk buffers over 4 GiB
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, std::size_t{1} << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

}  // namespace ep::exec

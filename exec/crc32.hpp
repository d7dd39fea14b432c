// CRC-32 (zlib's) of a buffer of any size: the checksum that closes
// checkpoints (state.hpp) and weights files (model.hpp).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ep::exec {

inline std::uint32_t crc32_of(const std::uint8_t* p, std::size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib's crc32 takes a uInt length: chunk buffers over 4 GiB
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, std::size_t{1} << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

}  // namespace ep::exec

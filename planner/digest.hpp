// A 128-bit digest (FNV-1a and a multiply-xorshift side by side) for keys
// derived from a serialised form: the simulator's memo (sim/request.hpp)
// and the chunk memo (planner/program_text.hpp). Not cryptographic: it
// tells apart the inputs one machine's memo holds, hundreds of them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace ep {

class Digest {
 public:
  void add(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) fnv_ = (fnv_ ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    mix_ = (mix_ ^ v) * 0xbf58476d1ce4e5b9ull;
    mix_ ^= mix_ >> 31;
  }
  // The length first, so "ab" + "c" and "a" + "bc" differ.
  void add(std::string_view text) {
    add(static_cast<std::uint64_t>(text.size()));
    for (const char c : text) add(static_cast<std::uint64_t>(static_cast<unsigned char>(c)));
  }
  // 32 hex digits.
  [[nodiscard]] std::string hex() const {
    char out[33];
    std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(fnv_),
                  static_cast<unsigned long long>(mix_));
    return out;
  }

 private:
  std::uint64_t fnv_ = 14695981039346656037ull, mix_ = 0x9e3779b97f4a7c15ull;
};

}  // namespace ep

// splitmix64 (Steele, Lea, Flood 2014), as in Vigna's reference code: the
// one generator behind every seeded choice (sampler shuffles, weight
// initialisation, synthetic data). Its output is fixed by its definition,
// unlike std:: distributions, so runs are identical on every platform and
// standard library.
#pragma once

#include <cstdint>

namespace ep {

// The output function alone: a good 64-bit mix for deriving seeds.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ULL); }
  // Uniform in [0, n), n >= 1, without modulo bias (rejection).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const std::uint64_t x = next();
      if (x >= threshold) return x % n;
    }
  }
  // Uniform in (0, 1) on 53 bits.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

}  // namespace ep

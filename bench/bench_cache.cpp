// The activation cache's copies on this machine: a batch of entries written
// (until stored) and read back onto a device, medians of timed repeats after
// three untimed ones. ViT-B/16's entries by default (197 x 768 floats).
//   ./build/bench_cache [batch=128] [dir=/dev/shm] [device=cpu|cuda] [repeats=12]
#include <ATen/ATen.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "exec/cache.hpp"
#include "exec/torch_compat.hpp"
#include "planner/stats.hpp"

int main(int argc, char** argv) {
  const int batch = argc > 1 ? std::stoi(argv[1]) : 128;
  const std::string dir = argc > 2 ? argv[2] : "/dev/shm";
  const at::Device device = argc > 3 && std::string(argv[3]) == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const int repeats = argc > 4 ? std::stoi(argv[4]) : 12;
  const std::vector<std::int64_t> shape{197, 768};
  ep::exec::ActivationCache cache(dir + "/elasticpipe-bench-cache-" + std::to_string(getpid()), 2 * batch, shape, true);
  // Scattered samples, as a shuffled epoch gives them.
  std::vector<std::int64_t> idx(batch);
  for (int i = 0; i < batch; ++i) idx[i] = (i * 7) % (2 * batch);
  const at::Tensor values = at::randn({batch, shape[0], shape[1]}).to(device);
  std::vector<double> write_s, read_s;
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < 3 + repeats; ++r) {
    const auto t0 = Clock::now();
    cache.write(idx, values, 1);
    cache.flush();
    const auto t1 = Clock::now();
    const at::Tensor back = cache.read(idx, 1, device);
    ep::exec::compat::synchronize(device);
    const auto t2 = Clock::now();
    if (r >= 3) {
      write_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      read_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
  }
  cache.remove();
  const double mb = static_cast<double>(batch) * static_cast<double>(cache.entry_bytes()) / 1e6;
  const double w = ep::median(write_s), rd = ep::median(read_s);
  std::printf("%d entries of 197x768 floats (%.1f MB) in %s, %s, %d threads: write %.2f ms (%.1f GB/s), read %.2f ms (%.1f GB/s)\n",
              batch, mb, dir.c_str(), device.str().c_str(), at::get_num_threads(), w * 1e3, mb / 1e3 / w, rd * 1e3,
              mb / 1e3 / rd);
}

// The executor's torch-free datasets: the IDX reader on small files written
// here (gzip and plain, good and bad), Fashion-MNIST loading on fake and on
// the real Debian files, and the synthetic generators' determinism and
// learnability.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "exec/data.hpp"
#include "exec/prepared_data.hpp"
#include "planner/error.hpp"
#include "tests/temp_dir.hpp"

using namespace ep;
using namespace ep::exec;
using Catch::Matchers::Contains;

namespace {

namespace fs = std::filesystem;

using Bytes = std::vector<std::uint8_t>;

using ep::test::TempDir;

void put_be32(Bytes& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(v >> shift));
}

Bytes idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims, const Bytes& data) {
  Bytes b;
  put_be32(b, magic);
  for (std::uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_file(const std::string& path, const Bytes& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    if (!bytes.empty())
      REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
              static_cast<int>(bytes.size()));
    REQUIRE(gzclose(f) == Z_OK);
  } else {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
}

Bytes iota_bytes(std::size_t n, int step = 1) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>((i * step) % 256);
  return b;
}

// A fake Fashion-MNIST directory: n images whose pixel (y, x) of sample s
// is (s + y * 28 + x) % 256, labels s % 10, both splits alike.
void write_fake_fashion(const TempDir& dir, std::uint32_t n, bool gzip = true) {
  Bytes pixels(n * 28 * 28), labels(n);
  for (std::uint32_t s = 0; s < n; ++s) {
    labels[s] = static_cast<std::uint8_t>(s % 10);
    for (std::uint32_t j = 0; j < 28 * 28; ++j)
      pixels[s * 784 + j] = static_cast<std::uint8_t>((s + j) % 256);
  }
  const std::string ext = gzip ? ".gz" : "";
  for (const std::string split : {"train", "t10k"}) {
    write_file(dir.file(split + "-images-idx3-ubyte" + ext), idx_bytes(0x803, {n, 28, 28}, pixels),
               gzip);
    write_file(dir.file(split + "-labels-idx1-ubyte" + ext), idx_bytes(0x801, {n}, labels), gzip);
  }
}

float normalised(float raw) { return (raw / 255.0f - 0.2860f) / 0.3530f; }

std::vector<std::int64_t> class_counts(const Dataset& d) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(d.num_classes));
  for (std::int64_t l : d.labels) {
    REQUIRE(l >= 0);
    REQUIRE(l < d.num_classes);
    ++counts[static_cast<std::size_t>(l)];
  }
  return counts;
}

// Nearest class mean, fit on `train`, accuracy on `test`.
double nearest_mean_accuracy(const Dataset& train, const Dataset& test) {
  const auto n = static_cast<std::size_t>(train.sample_numel());
  const auto k = static_cast<std::size_t>(train.num_classes);
  std::vector<double> means(k * n);
  const auto counts = class_counts(train);
  for (std::size_t i = 0; i < train.labels.size(); ++i)
    for (std::size_t j = 0; j < n; ++j)
      means[static_cast<std::size_t>(train.labels[i]) * n + j] += train.pixels[i * n + j];
  for (std::size_t c = 0; c < k; ++c)
    for (std::size_t j = 0; j < n; ++j)
      means[c * n + j] /= static_cast<double>(std::max<std::int64_t>(counts[c], 1));
  int correct = 0;
  for (std::size_t i = 0; i < test.labels.size(); ++i) {
    std::size_t best = 0;
    double best_dist = INFINITY;
    for (std::size_t c = 0; c < k; ++c) {
      double dist = 0;
      for (std::size_t j = 0; j < n; ++j)
        dist += std::pow(test.pixels[i * n + j] - means[c * n + j], 2);
      if (dist < best_dist) best_dist = dist, best = c;
    }
    correct += static_cast<std::int64_t>(best) == test.labels[i];
  }
  return static_cast<double>(correct) / static_cast<double>(test.labels.size());
}

// Count-the-keywords: a token is class c's keyword when, in the train split,
// it occurs in class c at least 3x as often as in any other class; a test
// sequence is the class with the most keyword occurrences.
double keyword_rule_accuracy(const Dataset& train, const Dataset& test) {
  const auto k = static_cast<std::size_t>(train.num_classes);
  std::map<std::int64_t, std::vector<int>> per_class;  // token -> occurrences per class
  for (std::size_t i = 0; i < train.labels.size(); ++i)
    for (int p = 1; p < train.seq_length; ++p) {
      auto& v = per_class[train.tokens[i * static_cast<std::size_t>(train.seq_length) + p]];
      v.resize(k);
      ++v[static_cast<std::size_t>(train.labels[i])];
    }
  std::map<std::int64_t, std::size_t> keyword_class;
  for (const auto& [token, v] : per_class) {
    const auto top = static_cast<std::size_t>(std::max_element(v.begin(), v.end()) - v.begin());
    int runner_up = 0;
    for (std::size_t c = 0; c < k; ++c)
      if (c != top) runner_up = std::max(runner_up, v[c]);
    if (v[top] >= 20 && v[top] >= 3 * runner_up) keyword_class[token] = top;
  }
  int correct = 0;
  for (std::size_t i = 0; i < test.labels.size(); ++i) {
    std::vector<int> votes(k);
    for (int p = 1; p < test.seq_length; ++p) {
      const auto it =
          keyword_class.find(test.tokens[i * static_cast<std::size_t>(test.seq_length) + p]);
      if (it != keyword_class.end()) ++votes[it->second];
    }
    correct += std::max_element(votes.begin(), votes.end()) - votes.begin() == test.labels[i];
  }
  return static_cast<double>(correct) / static_cast<double>(test.labels.size());
}

}  // namespace

// ---- read_idx -------------------------------------------------------------------

TEST_CASE("read_idx round-trips dims and data from gzip and plain files") {
  TempDir dir;
  for (bool gzip : {false, true}) {
    CAPTURE(gzip);
    const std::string images = dir.file(gzip ? "i.gz" : "i"),
                      labels = dir.file(gzip ? "l.gz" : "l");
    write_file(images, idx_bytes(0x803, {2, 3, 4}, iota_bytes(24, 7)), gzip);
    write_file(labels, idx_bytes(0x801, {5}, iota_bytes(5)), gzip);
    const IdxArray a = read_idx(images, 3);
    CHECK(a.dims == std::vector<int>{2, 3, 4});
    CHECK(a.data == iota_bytes(24, 7));
    const IdxArray b = read_idx(labels, 1);
    CHECK(b.dims == std::vector<int>{5});
    CHECK(b.data == iota_bytes(5));
  }
}

TEST_CASE("read_idx rejects a wrong magic, naming the path and both magics") {
  TempDir dir;
  const std::string path = dir.file("train-images-idx3-ubyte.gz");
  write_file(path, idx_bytes(0x801, {3}, iota_bytes(3)), true);
  CHECK_THROWS_AS(read_idx(path, 3), ep::Error);
  CHECK_THROWS_WITH(read_idx(path, 3), Contains(path) && Contains("magic") &&
                                           Contains("expected IDX magic 0x00000803") &&
                                           Contains("found 0x00000801"));
  write_file(path, idx_bytes(0x08030000, {1, 1, 1}, {0}), true);  // a little-endian writer
  CHECK_THROWS_WITH(read_idx(path, 3), Contains("found 0x08030000"));
}

TEST_CASE("read_idx reports truncated data and truncated headers") {
  TempDir dir;
  for (bool gzip : {false, true}) {
    CAPTURE(gzip);
    const std::string path = dir.file(gzip ? "t.gz" : "t");
    write_file(path, idx_bytes(0x803, {10, 28, 28}, iota_bytes(1000)), gzip);
    CHECK_THROWS_WITH(
        read_idx(path, 3),
        Contains(path) &&
            Contains("truncated: expected 7840 bytes of data after the header, found 1000"));
    write_file(path, Bytes{0, 0, 8, 3, 0, 0, 0, 10, 0, 0}, gzip);
    CHECK_THROWS_WITH(read_idx(path, 3),
                      Contains("truncated: expected 16 bytes of IDX header, found 10"));
    write_file(path, Bytes{0, 0}, gzip);
    CHECK_THROWS_WITH(read_idx(path, 1), Contains("truncated") && Contains("found 2"));
    write_file(path, Bytes{}, gzip);
    CHECK_THROWS_WITH(read_idx(path, 1), Contains("truncated") && Contains("found 0"));
  }
  SECTION("a gzip stream cut off in the middle") {
    const std::string path = dir.file("cut.gz");
    Bytes noise(20000);
    for (std::size_t i = 0; i < noise.size(); ++i)
      noise[i] = static_cast<std::uint8_t>((i * i * 2654435761u) >> 13);
    write_file(path, idx_bytes(0x801, {20000}, noise), true);
    fs::resize_file(path, fs::file_size(path) / 2);
    CHECK_THROWS_WITH(read_idx(path, 1), Contains(path) && Contains("truncated"));
  }
}

TEST_CASE("read_idx rejects absurd dims, extra bytes, corrupt gzip and missing files") {
  TempDir dir;
  const std::string path = dir.file("x");
  write_file(path, idx_bytes(0x803, {0, 28, 28}, {}), false);
  CHECK_THROWS_WITH(read_idx(path, 3), Contains(path) && Contains("expected dim 0 in [1, 2147483647], found 0"));
  // Counts are unsigned in the file: 0xFFFFFFFF is four billion, not -1.
  write_file(path, idx_bytes(0x803, {0xFFFFFFFF, 28, 28}, {}), false);
  CHECK_THROWS_WITH(read_idx(path, 3), Contains("expected dim 0 in [1, 2147483647], found 4294967295"));
  write_file(path, idx_bytes(0x803, {2, 0xFFFFFFFF, 28}, {}), false);
  CHECK_THROWS_WITH(read_idx(path, 3), Contains("expected dim 1 in [1, 2147483647], found 4294967295"));
  write_file(path, idx_bytes(0x803, {65536, 65536, 2}, {}), false);  // 2^33 bytes: not allocated
  CHECK_THROWS_WITH(read_idx(path, 3), Contains("at most 2^31 elements"));
  write_file(path, idx_bytes(0x801, {3}, iota_bytes(4)), false);
  CHECK_THROWS_WITH(read_idx(path, 1), Contains("expected the end of the file after 3 bytes"));
  write_file(path, Bytes{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
             false);
  CHECK_THROWS_WITH(read_idx(path, 1), Contains(path) && Contains("gzip"));
  CHECK_THROWS_WITH(read_idx(dir.file("absent.gz"), 1),
                    Contains(dir.file("absent.gz")) && Contains("cannot open"));
  // Only regular files: a device or a directory is refused, not read.
  CHECK_THROWS_WITH(read_idx("/dev/zero", 1), Contains("/dev/zero: a character device"));
  CHECK_THROWS_WITH(read_idx(dir.path(), 1), Contains(dir.path() + ": a directory"));
}

// ---- Fashion-MNIST ----------------------------------------------------------------

TEST_CASE("fashion_mnist_dir names the missing path and the Debian package") {
  TempDir dir;
  const std::string missing = dir.file("no-such-dir");
  CHECK_THROWS_WITH(fashion_mnist_dir(missing), Contains(missing) &&
                                                    Contains("dataset-fashion-mnist") &&
                                                    Contains("data.path"));
  write_fake_fashion(dir, 2);
  CHECK(fashion_mnist_dir(dir.path()) == dir.path());
  fs::remove(dir.file("t10k-labels-idx1-ubyte.gz"));
  CHECK_THROWS_WITH(
      fashion_mnist_dir(dir.path()),
      Contains(dir.file("t10k-labels-idx1-ubyte.gz")) && Contains("dataset-fashion-mnist"));
}

TEST_CASE("load_fashion_mnist normalises, pads, downsamples and limits small fake files") {
  TempDir dir;
  write_fake_fashion(dir, 12, /*gzip=*/false);  // plain files are found too
  const Dataset d28 = load_fashion_mnist(dir.path(), true, 28, 0);
  CHECK(d28.name == "fashion-mnist/train");
  CHECK(d28.size == 12);
  CHECK(d28.num_classes == 10);
  CHECK(d28.sample_numel() == 28 * 28);
  CHECK(d28.labels[11] == 1);
  CHECK(d28.pixels[5 * 784 + 3 * 28 + 4] == Approx(normalised((5 + 3 * 28 + 4) % 256)));

  const Dataset d32 = load_fashion_mnist(dir.path(), false, 32, 5);
  CHECK(d32.name == "fashion-mnist/test");
  CHECK(d32.size == 5);
  CHECK(d32.labels.size() == 5);
  CHECK(d32.height == 32);
  CHECK(d32.width == 32);
  CHECK(d32.pixels.size() == 5u * 32 * 32);
  CHECK(d32.pixels[0] == Approx(normalised(0)));  // the border is a black pixel
  CHECK(d32.pixels[4 * 1024 + 31 * 32 + 31] == Approx(normalised(0)));
  CHECK(d32.pixels[4 * 1024 + 2 * 32 + 2] == Approx(normalised(4)));  // (0, 0) of sample 4
  CHECK(d32.pixels[1 * 1024 + 29 * 32 + 29] == Approx(normalised((1 + 27 * 28 + 27) % 256)));

  const Dataset d14 = load_fashion_mnist(dir.path(), true, 14, 3);  // 2x2 averages
  for (int y = 0; y < 14; ++y)
    for (int x = 0; x < 14; ++x) {
      float sum = 0;
      for (int j : {0, 1, 28, 29}) sum += static_cast<float>((2 + 2 * y * 28 + 2 * x + j) % 256);
      CHECK(d14.pixels[2 * 196 + static_cast<std::size_t>(y * 14 + x)] ==
            Approx(normalised(sum / 4)).margin(1e-5));
    }
  const Dataset d9 = load_fashion_mnist(dir.path(), true, 9, 1);  // 28/9: uneven areas
  CHECK(d9.pixels.size() == 81u);

  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true, 28, 13),
                    Contains("train-images-idx3-ubyte") && Contains("at least 13 samples") &&
                        Contains("found 12"));
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true, 0, 0), Contains("image_size"));
}

TEST_CASE("load_fashion_mnist keeps a class subset, relabelled in its order, and limits what is kept") {
  TempDir dir;
  write_fake_fashion(dir, 30);  // labels 0..9, 0..9, 0..9
  const Dataset all = load_fashion_mnist(dir.path(), true, 28, 0);
  const Dataset d = load_fashion_mnist(dir.path(), true, 28, 0, {7, 2});
  CHECK(d.num_classes == 2);
  REQUIRE(d.size == 6);
  CHECK(d.labels == std::vector<std::int64_t>{1, 0, 1, 0, 1, 0});  // samples 2, 7, 12, 17, 22, 27
  const std::size_t n = 28 * 28;
  for (const auto& [kept, source] : {std::pair{0, 2}, {1, 7}, {5, 27}})
    CHECK(std::equal(d.pixels.begin() + kept * n, d.pixels.begin() + (kept + 1) * n, all.pixels.begin() + source * n));
  const Dataset first = load_fashion_mnist(dir.path(), false, 28, 4, {7, 2});
  CHECK(first.size == 4);
  CHECK(first.labels == std::vector<std::int64_t>{1, 0, 1, 0});
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true, 28, 7, {7, 2}),
                    Contains("at least 7 samples of classes 7,2") && Contains("found 6"));
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true, 28, 0, {3, 10}), Contains("[0, 10)"));
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true, 28, 0, {3, 3}), Contains("distinct"));
}

TEST_CASE("load_fashion_mnist checks counts, labels and image dims") {
  TempDir dir;
  write_fake_fashion(dir, 4);
  const std::string labels = dir.file("train-labels-idx1-ubyte.gz");
  const std::string images = dir.file("train-images-idx3-ubyte.gz");
  write_file(labels, idx_bytes(0x801, {3}, {0, 1, 2}), true);
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true, 28, 0),
                    Contains(labels) && Contains("expected 4 labels") && Contains("found 3"));
  write_file(labels, idx_bytes(0x801, {4}, {0, 1, 10, 2}), true);
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true, 28, 0),
                    Contains(labels) && Contains("label 2 in [0, 10), found 10"));
  write_file(labels, idx_bytes(0x801, {4}, {0, 1, 2, 3}), true);
  write_file(images, idx_bytes(0x803, {4, 32, 32}, Bytes(4 * 32 * 32)), true);
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path(), true, 28, 0),
                    Contains(images) && Contains("expected 28x28 images, found 32x32"));
}

TEST_CASE("The real Fashion-MNIST files load with the expected sizes and statistics") {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(root)) {
    WARN("skipped: no dataset: " << root << " is absent (apt-get install dataset-fashion-mnist)");
    return;
  }
  CHECK(fashion_mnist_dir("") == root);
  const Dataset train = load_fashion_mnist("", true, 32, 0);
  REQUIRE(train.size == 60000);
  CHECK(train.height == 32);
  CHECK(train.width == 32);
  CHECK(train.pixels.size() == 60000u * 32 * 32);
  double sum = 0, sum_sq = 0;
  for (std::size_t s = 0; s < 60000; ++s)
    for (int y = 2; y < 30; ++y)
      for (int x = 2; x < 30; ++x) {
        const double v = train.pixels[s * 1024 + static_cast<std::size_t>(y * 32 + x)];
        sum += v;
        sum_sq += v * v;
      }
  const double n = 60000.0 * 28 * 28, mean = sum / n;
  CHECK(std::abs(mean) < 0.05);
  CHECK(std::sqrt(sum_sq / n - mean * mean) == Approx(1.0).margin(0.05));
  CHECK(train.pixels[0] == Approx(normalised(0)));
  const auto counts = class_counts(train);
  CHECK(std::count(counts.begin(), counts.end(), 6000) == 10);

  const Dataset test = load_fashion_mnist("", false, 28, 0);
  CHECK(test.size == 10000);
  const auto test_counts = class_counts(test);
  CHECK(std::count(test_counts.begin(), test_counts.end(), 0) == 0);
  const Dataset first = load_fashion_mnist("", false, 28, 100);
  CHECK(first.size == 100);
  CHECK(std::equal(first.labels.begin(), first.labels.end(), test.labels.begin()));
  CHECK(std::equal(first.pixels.begin(), first.pixels.end(), test.pixels.begin()));
  CHECK_THROWS_WITH(load_fashion_mnist("", false, 28, 10001), Contains("at least 10001 samples"));
}

// ---- Synthetic data ----------------------------------------------------------------

TEST_CASE("synthetic_images is deterministic per seed and differs across seeds and splits") {
  const Dataset a = synthetic_images(300, 3, 8, 10, 42, true);
  const Dataset b = synthetic_images(300, 3, 8, 10, 42, true);
  CHECK(a.name == "synthetic-images/train");
  CHECK(a.sample_numel() == 3 * 8 * 8);
  CHECK(a.pixels.size() == 300u * 192);
  CHECK(a.pixels == b.pixels);
  CHECK(a.labels == b.labels);
  CHECK(synthetic_images(300, 3, 8, 10, 43, true).pixels != a.pixels);
  CHECK(synthetic_images(300, 3, 8, 10, 42, false).pixels != a.pixels);
  const Dataset prefix = synthetic_images(50, 3, 8, 10, 42, true);
  CHECK(std::equal(prefix.pixels.begin(), prefix.pixels.end(), a.pixels.begin()));
  const auto counts = class_counts(a);
  CHECK(std::count(counts.begin(), counts.end(), 0) == 0);
  double sum = 0, sum_sq = 0;
  for (float v : a.pixels) sum += v, sum_sq += v * v;
  const auto n = static_cast<double>(a.pixels.size());
  CHECK(std::abs(sum / n) < 0.2);
  CHECK(std::sqrt(sum_sq / n) == Approx(1.0).margin(0.2));
}

TEST_CASE("synthetic_images are learnable: nearest class mean generalises to the test split") {
  for (int channels : {1, 3}) {
    CAPTURE(channels);
    const Dataset train = synthetic_images(1000, channels, 8, 10, 7, true);
    const Dataset test = synthetic_images(500, channels, 8, 10, 7, false);
    const auto counts = class_counts(test);
    CHECK(std::count(counts.begin(), counts.end(), 0) == 0);
    CHECK(nearest_mean_accuracy(train, test) > 0.9);
  }
}

TEST_CASE("synthetic_tokens is deterministic, starts with [CLS] and keeps ids in the vocabulary") {
  const Dataset a = synthetic_tokens(400, 32, 1000, 4, 42, true);
  CHECK(a.name == "synthetic-tokens/train");
  CHECK(a.kind == SampleKind::Tokens);
  CHECK(a.sample_numel() == 32);
  CHECK(a.tokens == synthetic_tokens(400, 32, 1000, 4, 42, true).tokens);
  CHECK(a.labels == synthetic_tokens(400, 32, 1000, 4, 42, true).labels);
  CHECK(a.tokens != synthetic_tokens(400, 32, 1000, 4, 43, true).tokens);
  CHECK(a.tokens != synthetic_tokens(400, 32, 1000, 4, 42, false).tokens);
  for (std::size_t i = 0; i < a.tokens.size(); ++i) {
    if (i % 32 == 0) {
      REQUIRE(a.tokens[i] == 0);
    } else {
      REQUIRE(a.tokens[i] >= 1);
      REQUIRE(a.tokens[i] < 1000);
    }
  }
  const auto counts = class_counts(a);
  CHECK(std::count(counts.begin(), counts.end(), 0) == 0);
  const Dataset tiny = synthetic_tokens(200, 2, 12, 10, 1, true);  // one keyword per class
  const auto tiny_counts = class_counts(tiny);
  CHECK(std::count(tiny_counts.begin(), tiny_counts.end(), 0) == 0);
}

TEST_CASE("synthetic_tokens are learnable by counting keywords") {
  for (int num_classes : {2, 4, 10}) {
    CAPTURE(num_classes);
    const Dataset train = synthetic_tokens(2000, 32, 2000, num_classes, 5, true);
    const Dataset test = synthetic_tokens(500, 32, 2000, num_classes, 5, false);
    CHECK(keyword_rule_accuracy(train, test) > 0.9);
  }
}

TEST_CASE("The synthetic generators reject impossible shapes with an ep::Error") {
  CHECK_THROWS_WITH(synthetic_images(0, 1, 8, 10, 1, true),
                    Contains("synthetic-images/train") && Contains("size >= 1"));
  CHECK_THROWS_WITH(synthetic_images(10, 1, 8, 0, 1, true), Contains("num_classes >= 1"));
  CHECK_THROWS_WITH(synthetic_images(1 << 30, 3, 224, 10, 1, true),
                    Contains("at most 2^31 elements"));
  CHECK_THROWS_WITH(synthetic_tokens(10, 1, 100, 2, 1, false),
                    Contains("synthetic-tokens/test") && Contains("seq_length"));
  CHECK_THROWS_WITH(synthetic_tokens(10, 8, 11, 10, 1, true),
                    Contains("vocab_size") && Contains("found 11"));
  CHECK_THROWS_AS(synthetic_tokens(10, 8, 11, 10, 1, true), ep::Error);
}

namespace {

// A prepared image set (exec/prepared_data.hpp's format): `count` RGB
// images of h x w, pixel i of sample s = (s * 7 + i) % 256, labels s % 2.
std::string prepared_images(int count, int h, int w) {
  const auto align = [](std::string& f) { f.resize((f.size() + 63) / 64 * 64, '\0'); };
  std::string f(128, '\0');
  const std::uint64_t labels = f.size();
  for (int s = 0; s < count; ++s) {
    const std::int32_t l = s % 2;
    f.append(reinterpret_cast<const char*>(&l), 4);
  }
  align(f);
  const std::uint64_t names = f.size(), names_bytes = 8;
  f += "cat\ndog\n";
  align(f);
  const std::uint64_t norm = f.size();
  for (const float v : {0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f}) f.append(reinterpret_cast<const char*>(&v), 4);
  align(f);
  const std::uint64_t samples = f.size(), per = std::uint64_t{3} * h * w;
  for (int s = 0; s < count; ++s)
    for (std::uint64_t i = 0; i < per; ++i) f.push_back(static_cast<char>((s * 7 + i) % 256));
  align(f);
  const auto put = [&](std::size_t at, auto v) { std::memcpy(f.data() + at, &v, sizeof v); };
  f.replace(0, 8, "EPDATA01");
  put(8, std::uint32_t{1});
  put(12, std::uint32_t{2});
  put(16, static_cast<std::uint64_t>(count));
  put(24, std::uint32_t{3});
  put(28, static_cast<std::uint32_t>(h));
  put(32, static_cast<std::uint32_t>(w));
  put(40, labels);
  put(56, samples);
  put(64, norm);
  put(72, names);
  put(80, names_bytes);
  put(88, static_cast<std::uint64_t>(f.size()));
  return f;
}

bool mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(path) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("A prepared image set's pixels stay in its file, mapped, until the data set is gone") {
  ep::test::TempDir dir;
  const std::string path = dir.file("train.epdata");
  std::ofstream(path, std::ios::binary) << prepared_images(5, 4, 6);
  {
    const Dataset d = load_prepared(path, 4, 0);  // the first 4 of 5
    REQUIRE(d.size == 4);
    REQUIRE(d.image_bytes.size() == 4u * 3 * 4 * 6);
    for (std::size_t i = 0; i < d.image_bytes.size(); ++i) {
      const std::size_t s = i / 72, p = i % 72;
      if (d.image_bytes[i] != (s * 7 + p) % 256) FAIL("byte " << i << " is " << int(d.image_bytes[i]));
    }
    CHECK(d.labels == std::vector<std::int64_t>{0, 1, 0, 1});
    CHECK(d.class_names == std::vector<std::string>{"cat", "dog"});
    CHECK(mapped(path));
    const Dataset copy = d;  // shares the mapping
    CHECK(copy.image_bytes.data() == d.image_bytes.data());
  }
  CHECK_FALSE(mapped(path));
}

namespace {

// A draw as torchvision composes it, written apart from augment_image:
// mirror the whole image, pad it by `pad` black pixels on each side, and
// cut the original size out at (pad + dy, pad + dx).
std::vector<float> reference_augment(const Dataset& d, const AugmentDraw& a, const std::vector<float>& image) {
  const int h = d.height, w = d.width, ph = crop_padding(h), pw = crop_padding(w);
  std::vector<float> out;
  for (int c = 0; c < d.channels; ++c) {
    const float black = d.black.empty() ? 0.0F : d.black[c];
    std::vector<float> padded(static_cast<std::size_t>(h + 2 * ph) * (w + 2 * pw), black);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        padded[(y + ph) * (w + 2 * pw) + x + pw] = image[(c * h + y) * w + (a.flip ? w - 1 - x : x)];
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) out.push_back(padded[(y + ph + a.dy) * (w + 2 * pw) + x + pw + a.dx]);
  }
  return out;
}

}  // namespace

TEST_CASE("augmentation draws per (seed, epoch, sample) alone, flips half the time and crops within its padding") {
  CHECK(crop_padding(224) == 28);
  CHECK(crop_padding(32) == 4);
  CHECK(crop_padding(7) == 1);
  const std::vector<Augmentation> both{Augmentation::HorizontalFlip, Augmentation::Crop};
  CHECK(draw_augment({}, 1, 0, 5, 32, 32) == AugmentDraw{});
  const int n = 4000;
  int flips = 0, moved_by_epoch = 0, moved_by_seed = 0;
  std::map<int, int> dys, dxs;
  for (int i = 0; i < n; ++i) {
    const AugmentDraw a = draw_augment(both, 9, 2, i, 16, 40);
    CHECK(a == draw_augment(both, 9, 2, i, 16, 40));  // no state: the same again, in any order
    flips += a.flip;
    ++dys[a.dy];
    ++dxs[a.dx];
    moved_by_epoch += !(a == draw_augment(both, 9, 3, i, 16, 40));
    moved_by_seed += !(a == draw_augment(both, 10, 2, i, 16, 40));
    const AugmentDraw only_flip = draw_augment({Augmentation::HorizontalFlip}, 9, 2, i, 16, 40);
    CHECK(only_flip.dy == 0);
    CHECK(only_flip.dx == 0);
    const AugmentDraw only_crop = draw_augment({Augmentation::Crop}, 9, 2, i, 16, 40);
    CHECK_FALSE(only_crop.flip);
  }
  CHECK(std::abs(flips - n / 2) < 5 * std::sqrt(n / 4.0));  // 5 sigma
  // Every offset in [-pad, pad], none outside, each about as often (5 sigma).
  const auto uniform = [&](const std::map<int, int>& seen, int pad) {
    CHECK(seen.size() == static_cast<std::size_t>(2 * pad + 1));
    CHECK(seen.begin()->first == -pad);
    CHECK(seen.rbegin()->first == pad);
    const double p = 1.0 / (2 * pad + 1);
    for (const auto& [off, count] : seen) CHECK(std::abs(count - n * p) < 5 * std::sqrt(n * p * (1 - p)));
  };
  uniform(dys, 2);  // 16 / 8
  uniform(dxs, 5);  // 40 / 8
  // Another epoch or seed draws anew: the same draw only by chance (2 x 5 x 11 outcomes).
  CHECK(moved_by_epoch > n * 0.9);
  CHECK(moved_by_seed > n * 0.9);
}

TEST_CASE("augment_image is a mirror and a crop of the black-padded image, as torchvision composes them") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    Dataset d;
    d.channels = 1 + static_cast<int>(rng() % 3);
    d.height = 1 + static_cast<int>(rng() % 20);
    d.width = 1 + static_cast<int>(rng() % 20);
    if (rng() % 2)
      for (int c = 0; c < d.channels; ++c) d.black.push_back(-1.0F - static_cast<float>(c));
    std::vector<float> image(static_cast<std::size_t>(d.channels) * d.height * d.width);
    for (float& v : image) v = static_cast<float>(rng() % 1000) / 100.0F;
    const std::vector<Augmentation> ops =
        rng() % 3 == 0 ? std::vector<Augmentation>{Augmentation::Crop}
                       : std::vector<Augmentation>{Augmentation::HorizontalFlip, Augmentation::Crop};
    const AugmentDraw a = draw_augment(ops, rng(), static_cast<int>(rng() % 50), rng() % 1000, d.height, d.width);
    std::vector<float> got = image;
    augment_image(d, a, got.data());
    INFO("trial " << trial << ": " << d.channels << "x" << d.height << "x" << d.width << " flip " << a.flip << " dy "
                  << a.dy << " dx " << a.dx);
    CHECK(got == reference_augment(d, a, image));
  }
  // A mirror twice is the image; a move there and back keeps the part that stayed in view.
  Dataset d;
  d.channels = 2, d.height = 6, d.width = 5;
  std::vector<float> image(60);
  std::iota(image.begin(), image.end(), 1.0F);
  std::vector<float> twice = image;
  augment_image(d, {true, 0, 0}, twice.data());
  CHECK(twice != image);
  augment_image(d, {true, 0, 0}, twice.data());
  CHECK(twice == image);
  std::vector<float> moved = image;
  augment_image(d, {false, 1, -1}, moved.data());
  augment_image(d, {false, -1, 1}, moved.data());
  for (int c = 0; c < 2; ++c)
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 5; ++x) {
        const float v = moved[(c * 6 + y) * 5 + x];
        CHECK(v == (y >= 1 && x <= 3 ? image[(c * 6 + y) * 5 + x] : 0.0F));
      }
}

TEST_CASE("a prepared image set pads a crop with its black pixel, as normalised") {
  ep::test::TempDir dir;
  const std::string path = dir.file("train.epdata");
  std::ofstream(path, std::ios::binary) << prepared_images(2, 4, 6);
  const Dataset d = load_prepared(path, 0, 0);
  CHECK(d.black == std::vector<float>{-2.0F, -2.0F, -2.0F});  // (0 - 0.5) / 0.25
}

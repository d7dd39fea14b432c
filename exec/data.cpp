// Datasets without torch: the IDX reader, Fashion-MNIST loading and
// resizing, and the splitmix64-driven synthetic images and token sequences.
#include "exec/data.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <numeric>

#include "planner/datasets.hpp"
#include "planner/error.hpp"
#include "planner/input_file.hpp"
#include "planner/random.hpp"

namespace ep::exec {
namespace {

namespace fs = std::filesystem;

// The most elements one array may hold: 2 GiB of bytes or 8 GiB of floats.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 31;

constexpr const char* kFashionDefaultDir = "/usr/share/datasets/fashion-mnist";
constexpr const char* kFashionHint =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
    "or set data.path";
constexpr int kFashionSide = 28;
constexpr int kFashionClasses = kFashionMnistClasses;
constexpr float kFashionMean = 0.2860f;  // of the training pixels, scaled to [0, 1]
constexpr float kFashionStd = 0.3530f;

void expect(bool ok, const std::string& where, const std::string& expected,
            const std::string& found) {
  if (!ok) throw Error(where + ": expected " + expected + ", found " + found);
}

std::string hex32(std::uint32_t v) {
  std::array<char, 16> buf{};
  std::snprintf(buf.data(), buf.size(), "0x%08x", v);
  return buf.data();
}

// The product of `dims` (each >= 1), checked before anything of that size is
// allocated, step by step so that it cannot overflow (factors <= 2^31).
std::size_t checked_numel(const std::string& where, std::initializer_list<std::int64_t> dims) {
  std::int64_t n = 1;
  std::string shape;
  for (std::int64_t d : dims) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
  for (std::int64_t d : dims) {
    n *= d;
    expect(n <= kMaxElements, where, "at most 2^31 elements", shape);
  }
  return static_cast<std::size_t>(n);
}

// ---- IDX ------------------------------------------------------------------

// zlib reads plain files as they are ("transparent" mode), telling them from
// gzip by the magic bytes 1f 8b, so one reader serves both.
using GzFile = std::unique_ptr<gzFile_s, decltype(&gzclose)>;

// Reads up to n bytes; fewer only at the end of the file (or of a cut-off
// gzip stream). Corrupt gzip data and I/O errors throw.
std::int64_t read_bytes(gzFile f, std::uint8_t* out, std::int64_t n, const std::string& path) {
  std::int64_t got = 0;
  while (got < n) {
    const auto chunk = static_cast<unsigned>(std::min<std::int64_t>(n - got, 1 << 30));
    const int r = gzread(f, out + got, chunk);
    if (r <= 0) break;
    got += r;
  }
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err == Z_ERRNO) throw Error(path + ": read error: " + std::strerror(errno));
  if (err != Z_OK && err != Z_BUF_ERROR) {  // Z_BUF_ERROR: a cut-off stream, reported as truncated
    std::string what = msg;                 // zlib's message starts with the path again
    if (what.rfind(path + ": ", 0) == 0) what.erase(0, path.size() + 2);
    throw Error(path + ": corrupt gzip data: " + what);
  }
  return got;
}

std::uint32_t big_endian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// ---- Fashion-MNIST ----------------------------------------------------------

std::string fashion_stem(bool train, bool images) {
  return std::string(train ? "train" : "t10k") +
         (images ? "-images-idx3-ubyte" : "-labels-idx1-ubyte");
}

// dir/STEM.gz, else dir/STEM uncompressed (torchvision's raw/ folder has
// both), else "". Whatever is there under the name counts: read_idx refuses
// what is not a regular file, naming it.
std::string find_idx_file(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    std::error_code ec;
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(fs::symlink_status(p, ec))) return p.string();
  }
  return "";
}

struct Tap {
  int src;
  float weight;
};

// Per output row (or column): the source pixels it takes and their weights.
// Growing pads, centred: one tap of weight 1, or none for the border, which
// so stays a black pixel. Shrinking averages the area each output pixel
// covers (a box filter, like OpenCV's INTER_AREA).
std::vector<std::vector<Tap>> resize_taps(int in, int out) {
  std::vector<std::vector<Tap>> taps(static_cast<std::size_t>(out));
  if (out >= in) {
    const int offset = (out - in) / 2;
    for (int i = 0; i < in; ++i) taps[static_cast<std::size_t>(i + offset)].push_back({i, 1.0f});
    return taps;
  }
  const double scale = static_cast<double>(in) / out;
  for (int o = 0; o < out; ++o) {
    const double lo = o * scale, hi = (o + 1) * scale;
    for (int i = static_cast<int>(lo); i < in && i < hi; ++i) {
      const double overlap = std::min(hi, i + 1.0) - std::max(lo, static_cast<double>(i));
      if (overlap > 1e-9)
        taps[static_cast<std::size_t>(o)].push_back({i, static_cast<float>(overlap / scale)});
    }
  }
  return taps;
}

// ---- Synthetic data ---------------------------------------------------------

// About N(0, 1): four 24-bit uniforms summed (Irwin-Hall), centred, scaled
// to variance 1. Summed as integers: exact in any evaluation order, so the
// data is the same on every platform (no a*b+c that FMA could round).
float normal(SplitMix64& g) {
  const auto sum = (g.next() >> 40) + (g.next() >> 40) + (g.next() >> 40) + (g.next() >> 40);
  const double centred = static_cast<double>(static_cast<std::int64_t>(sum) - (1ll << 25));
  return static_cast<float>(centred * 0x1p-24 * 1.7320508075688772);
}

// Stream tags: prototypes and keywords are shared by the splits, samples not.
enum : std::uint64_t { kPrototypes = 1, kKeywords = 2, kTrainSamples = 3, kTestSamples = 4 };

// An independent generator for (seed, tag, index), e.g. one per sample, so
// that sample i never depends on how many samples come before it.
SplitMix64 stream(std::uint64_t seed, std::uint64_t tag, std::uint64_t index) {
  SplitMix64 g(seed);
  SplitMix64 h(g.next() + tag);
  SplitMix64 k(h.next() + index);
  return SplitMix64(k.next());
}

}  // namespace

int crop_padding(int side) { return std::max(1, side / 8); }

AugmentDraw draw_augment(const std::vector<Augmentation>& ops, std::uint64_t seed, int epoch, std::int64_t index,
                         int height, int width) {
  // A stream of its own per (seed, epoch, index): tag 5, apart from the data's.
  SplitMix64 g = stream(seed, 5 + (static_cast<std::uint64_t>(epoch) << 8), static_cast<std::uint64_t>(index));
  AugmentDraw d;
  for (const Augmentation op : ops) switch (op) {
      case Augmentation::HorizontalFlip: d.flip = (g.next() >> 63) != 0; break;
      case Augmentation::Crop: {
        const int ph = crop_padding(height), pw = crop_padding(width);
        d.dy = static_cast<int>(g.below(2 * ph + 1)) - ph;
        d.dx = static_cast<int>(g.below(2 * pw + 1)) - pw;
        break;
      }
    }
  return d;
}

void augment_image(const Dataset& d, const AugmentDraw& draw, float* image) {
  if (draw == AugmentDraw{}) return;
  const int h = d.height, w = d.width;
  std::vector<float> plane(static_cast<std::size_t>(h) * w);
  for (int c = 0; c < d.channels; ++c) {
    float* p = image + static_cast<std::int64_t>(c) * h * w;
    std::copy_n(p, plane.size(), plane.begin());
    const float black = d.black.empty() ? 0.0F : d.black[c];
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        // Output (y, x) shows the source at (y + dy, x + dx), mirrored first.
        const int sy = y + draw.dy, sx = x + draw.dx;
        const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
        p[y * w + x] = inside ? plane[sy * w + (draw.flip ? w - 1 - sx : sx)] : black;
      }
  }
}

std::int64_t Dataset::sample_numel() const {
  return kind == SampleKind::Image ? std::int64_t{channels} * height * width : seq_length;
}

IdxArray read_idx(const std::string& path, int expected_dims) {
  expect(expected_dims == 1 || expected_dims == 3, path, "read_idx with 1 or 3 dims",
         std::to_string(expected_dims));
  // gzip never grows data by more than a few bytes per 16 kB block.
  constexpr InputFormat kIdxFile{"IDX file", kMaxElements + (kMaxElements >> 10),
                                 "at most 2^31 bytes of data (gzip'd or not) and a header"};
  InputFile input(path, kIdxFile);
  const int fd = input.release();
  const GzFile file(gzdopen(fd, "rb"), &gzclose);
  if (file == nullptr) {
    ::close(fd);
    throw Error(path + ": cannot read: " + std::strerror(errno));
  }

  std::array<std::uint8_t, 16> head{};
  const std::int64_t header_bytes = 4 + 4 * std::int64_t{expected_dims};
  const std::int64_t got_header = read_bytes(file.get(), head.data(), header_bytes, path);
  const std::uint32_t want = 0x800u | static_cast<std::uint32_t>(expected_dims);
  if (got_header >= 4 && big_endian32(head.data()) != want)
    throw Error(path + ": expected IDX magic " + hex32(want) +
                (expected_dims == 3 ? " (uint8 images, 3 dims)" : " (uint8 labels, 1 dim)") +
                ", found " + hex32(big_endian32(head.data())));
  expect(got_header == header_bytes, path + ": truncated",
         std::to_string(header_bytes) + " bytes of IDX header", std::to_string(got_header));

  IdxArray a;
  std::array<std::int64_t, 3> dims{1, 1, 1};
  for (int i = 0; i < expected_dims; ++i) {
    // A count, unsigned in the file.
    const std::uint32_t d = big_endian32(head.data() + 4 + 4 * i);
    expect(d >= 1 && d <= INT32_MAX, path, "dim " + std::to_string(i) + " in [1, " + std::to_string(INT32_MAX) + "]",
           std::to_string(d));
    a.dims.push_back(static_cast<int>(d));
    dims[static_cast<std::size_t>(i)] = d;
  }
  const auto numel = static_cast<std::int64_t>(checked_numel(path, {dims[0], dims[1], dims[2]}));
  a.data.resize(static_cast<std::size_t>(numel));
  const std::int64_t got = read_bytes(file.get(), a.data.data(), numel, path);
  expect(got == numel, path + ": truncated",
         std::to_string(numel) + " bytes of data after the header", std::to_string(got));
  std::uint8_t extra = 0;
  expect(read_bytes(file.get(), &extra, 1, path) == 0, path,
         "the end of the file after " + std::to_string(numel) + " bytes of data", "more bytes");
  return a;
}

std::string fashion_mnist_dir(const std::string& configured) {
  const std::string dir = configured.empty() ? kFashionDefaultDir : configured;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(dir + ": no such directory (looking for Fashion-MNIST); " + kFashionHint);
  for (bool train : {true, false})
    for (bool images : {true, false})
      if (find_idx_file(dir, fashion_stem(train, images)).empty())
        throw Error((fs::path(dir) / (fashion_stem(train, images) + ".gz")).string() +
                    ": no such file (nor without .gz); " + kFashionHint);
  return dir;
}

Dataset load_fashion_mnist(const std::string& dir, bool train, int image_size, std::int64_t limit,
                           const std::vector<int>& classes) {
  const std::string root = fashion_mnist_dir(dir);
  const std::string images_path = find_idx_file(root, fashion_stem(train, true));
  const std::string labels_path = find_idx_file(root, fashion_stem(train, false));
  expect(image_size >= 1 && image_size <= 4096, images_path, "image_size in [1, 4096]",
         std::to_string(image_size));
  expect(limit >= 0, images_path, "limit >= 0 (0: all samples)", std::to_string(limit));

  const IdxArray images = read_idx(images_path, 3);
  const IdxArray labels = read_idx(labels_path, 1);
  expect(images.dims[1] == kFashionSide && images.dims[2] == kFashionSide, images_path,
         "28x28 images", std::to_string(images.dims[1]) + "x" + std::to_string(images.dims[2]));
  expect(labels.dims[0] == images.dims[0], labels_path,
         std::to_string(images.dims[0]) + " labels, one per image in " + images_path,
         std::to_string(labels.dims[0]));
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    expect(labels.data[i] < kFashionClasses, labels_path,
           "label " + std::to_string(i) + " in [0, 10)", std::to_string(labels.data[i]));
  // Old label -> new label (-1: dropped); all ten unchanged without a subset.
  std::vector<int> relabel(kFashionClasses, -1);
  std::string of_classes;
  if (classes.empty()) std::iota(relabel.begin(), relabel.end(), 0);
  for (std::size_t j = 0; j < classes.size(); ++j) {
    expect(classes[j] >= 0 && classes[j] < kFashionClasses && relabel[classes[j]] < 0, images_path,
           "distinct classes in [0, 10)", std::to_string(classes[j]));
    relabel[classes[j]] = static_cast<int>(j);
    of_classes += (j ? "," : " of classes ") + std::to_string(classes[j]);
  }
  // The samples kept, in file order, and their labels.
  std::vector<std::size_t> kept;
  std::vector<std::int64_t> kept_labels;
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    if (relabel[labels.data[i]] >= 0) {
      kept.push_back(i);
      kept_labels.push_back(relabel[labels.data[i]]);
    }
  const auto available = static_cast<std::int64_t>(kept.size());
  expect(available > 0 && limit <= available, images_path,
         "at least " + std::to_string(std::max<std::int64_t>(limit, 1)) + " samples" + of_classes + " (the limit)",
         std::to_string(available));

  Dataset d;
  d.name = std::string("fashion-mnist/") + (train ? "train" : "test");
  d.size = limit > 0 ? limit : available;
  d.num_classes = classes.empty() ? kFashionClasses : static_cast<int>(classes.size());
  d.channels = 1;
  d.black = {-kFashionMean / kFashionStd};
  d.height = d.width = image_size;
  d.pixels.resize(checked_numel(images_path + " at image_size " + std::to_string(image_size),
                                {d.size, image_size, image_size}));
  d.labels.assign(kept_labels.begin(), kept_labels.begin() + d.size);

  // Resize in raw [0, 255] units (a border stays 0), then normalise.
  const auto taps = resize_taps(kFashionSide, image_size);
  const std::size_t in_numel = kFashionSide * kFashionSide;
  const auto out_numel = static_cast<std::size_t>(image_size) * image_size;
  for (std::size_t s = 0; s < static_cast<std::size_t>(d.size); ++s) {
    const std::uint8_t* in = images.data.data() + kept[s] * in_numel;
    float* out = d.pixels.data() + s * out_numel;
    for (std::size_t y = 0; y < taps.size(); ++y)
      for (std::size_t x = 0; x < taps.size(); ++x) {
        float v = 0;
        for (const Tap& ty : taps[y])
          for (const Tap& tx : taps[x])
            v += ty.weight * tx.weight * in[ty.src * kFashionSide + tx.src];
        out[y * static_cast<std::size_t>(image_size) + x] =
            (v / 255.0f - kFashionMean) / kFashionStd;
      }
  }
  return d;
}

Dataset synthetic_images(std::int64_t size, int channels, int image_size, int num_classes,
                         std::uint64_t seed, bool train) {
  Dataset d;
  d.name = std::string("synthetic-images/") + (train ? "train" : "test");
  expect(size >= 1, d.name, "size >= 1", std::to_string(size));
  expect(channels >= 1, d.name, "channels >= 1", std::to_string(channels));
  expect(image_size >= 1, d.name, "image_size >= 1", std::to_string(image_size));
  expect(num_classes >= 1, d.name, "num_classes >= 1", std::to_string(num_classes));
  const std::size_t per = checked_numel(d.name, {channels, image_size, image_size});
  d.pixels.resize(checked_numel(d.name, {size, channels, image_size, image_size}));
  std::vector<float> prototypes(
      checked_numel(d.name, {num_classes, channels, image_size, image_size}));
  d.kind = SampleKind::Image;
  d.size = size;
  d.num_classes = num_classes;
  d.channels = channels;
  d.height = d.width = image_size;

  for (std::size_t c = 0; c < static_cast<std::size_t>(num_classes); ++c) {
    SplitMix64 g = stream(seed, kPrototypes, c);
    for (std::size_t j = 0; j < per; ++j) prototypes[c * per + j] = normal(g);
  }
  // Prototype and noise each have variance 1; 1/sqrt(2) brings the sum back to std 1.
  constexpr float kInvSqrt2 = 0.70710678f;
  d.labels.resize(static_cast<std::size_t>(size));
  for (std::size_t i = 0; i < d.labels.size(); ++i) {
    SplitMix64 g = stream(seed, train ? kTrainSamples : kTestSamples, i);
    const auto c = static_cast<std::size_t>(g.below(static_cast<std::uint64_t>(num_classes)));
    d.labels[i] = static_cast<std::int64_t>(c);
    const float* proto = prototypes.data() + c * per;
    float* out = d.pixels.data() + i * per;
    for (std::size_t j = 0; j < per; ++j) out[j] = (proto[j] + normal(g)) * kInvSqrt2;
  }
  return d;
}

Dataset synthetic_tokens(std::int64_t size, int seq_length, int vocab_size, int num_classes,
                         std::uint64_t seed, bool train) {
  Dataset d;
  d.name = std::string("synthetic-tokens/") + (train ? "train" : "test");
  expect(size >= 1, d.name, "size >= 1", std::to_string(size));
  expect(seq_length >= 2, d.name, "seq_length >= 2 ([CLS] and one token)",
         std::to_string(seq_length));
  expect(num_classes >= 1, d.name, "num_classes >= 1", std::to_string(num_classes));
  expect(vocab_size >= num_classes + 2 && vocab_size <= (1 << 24), d.name,
         "vocab_size in [num_classes + 2, 2^24] ([CLS], a keyword per class and a filler)",
         std::to_string(vocab_size));
  d.tokens.resize(checked_numel(d.name, {size, seq_length}));
  d.kind = SampleKind::Tokens;
  d.size = size;
  d.num_classes = num_classes;
  d.seq_length = seq_length;

  // Keywords: a seeded partial shuffle of ids 1..vocab_size-1; class c owns
  // ids[c*per_class, (c+1)*per_class), the rest are fillers.
  const int per_class = std::clamp((vocab_size - 1) / (4 * num_classes), 1, 8);
  const auto keyword_count = static_cast<std::uint64_t>(per_class) * num_classes;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(vocab_size - 1));
  std::iota(ids.begin(), ids.end(), 1);
  SplitMix64 shuffle = stream(seed, kKeywords, 0);
  for (std::uint64_t i = 0; i < keyword_count; ++i)
    std::swap(ids[i], ids[i + shuffle.below(ids.size() - i)]);
  const std::uint64_t fillers = ids.size() - keyword_count;

  constexpr std::uint64_t kPlantPercent = 30, kDistractorPercent = 10;
  d.labels.resize(static_cast<std::size_t>(size));
  for (std::size_t i = 0; i < d.labels.size(); ++i) {
    SplitMix64 g = stream(seed, train ? kTrainSamples : kTestSamples, i);
    const std::uint64_t c = g.below(static_cast<std::uint64_t>(num_classes));
    d.labels[i] = static_cast<std::int64_t>(c);
    std::int64_t* out = d.tokens.data() + i * static_cast<std::size_t>(seq_length);
    out[0] = 0;  // [CLS]
    for (int p = 1; p < seq_length; ++p) {
      const std::uint64_t roll = g.below(100);
      if (roll < kPlantPercent)
        out[p] = ids[c * per_class + g.below(per_class)];
      else if (roll < kPlantPercent + kDistractorPercent)
        out[p] = ids[g.below(keyword_count)];
      else
        out[p] = ids[keyword_count + g.below(fillers)];
    }
  }
  return d;
}

}  // namespace ep::exec

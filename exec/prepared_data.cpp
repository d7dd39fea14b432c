#include "exec/prepared_data.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "planner/error.hpp"
#include "planner/input_file.hpp"

namespace ep::exec {
namespace {

static_assert(std::endian::native == std::endian::little, "the file's integers are little-endian, as this host");

constexpr char kMagic[8] = {'E', 'P', 'D', 'A', 'T', 'A', '0', '1'};
constexpr std::uint64_t kHeaderBytes = 128, kAlign = 64;
constexpr std::uint32_t kImages = 1, kTokens = 2;
// A split is mapped, not read: 16 TiB (an ImageNet split at 224x224 as
// bytes is 0.2 TB).
constexpr InputFormat kFormat{"prepared data set", std::int64_t{16} << 40,
                              "a split is mapped into memory, not read: at most 16 TiB"};

// The file mapped read-only, unmapped when the last holder lets go.
std::shared_ptr<const void> map_file(InputFile& in) {
  const auto size = static_cast<std::size_t>(in.size());
  const int fd = in.release();
  void* at = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  close(fd);  // the mapping keeps the file
  if (at == MAP_FAILED) throw Error(in.path() + ": cannot map the prepared data set: " + std::strerror(err));
  return std::shared_ptr<const void>(at, [size](const void* p) { munmap(const_cast<void*>(p), size); });
}

struct Header {
  char magic[8];
  std::uint32_t kind, num_classes;
  std::uint64_t count;
  std::uint32_t shape[3], pad_id;
  std::uint64_t labels, lengths, samples, norm, names, names_bytes, file_size;
  std::uint8_t reserved[32];
};
static_assert(sizeof(Header) == kHeaderBytes);

[[noreturn]] void fail(const std::string& where, const std::string& expected, const std::string& found) {
  throw Error(where + ": expected " + expected + ", found " + found);
}

struct Section {
  const char* name;
  std::uint64_t offset, bytes;
};

// The sections' sizes follow from the header's counts; each must start
// 64-byte aligned after the header, inside the file, not overlapping another.
void check_sections(const std::string& path, std::vector<Section> sections, std::uint64_t file_size) {
  std::sort(sections.begin(), sections.end(), [](const Section& a, const Section& b) { return a.offset < b.offset; });
  std::uint64_t end = kHeaderBytes;
  const char* previous = "the header";
  for (const Section& s : sections) {
    const std::string where = path + ": " + s.name + " offset";
    if (s.offset % kAlign != 0) fail(where, "a multiple of 64", std::to_string(s.offset));
    if (s.offset < end)
      fail(where, "at least " + std::to_string(end) + " (after " + previous + ")", std::to_string(s.offset));
    if (s.offset > file_size || s.bytes > file_size - s.offset)
      fail(path + ": " + s.name, std::to_string(s.bytes) + " bytes from offset " + std::to_string(s.offset) +
                                     " within the file's " + std::to_string(file_size),
           "a section past the end");
    end = s.offset + s.bytes;
    previous = s.name;
  }
}

// `count` x `per` elements of `element` bytes, without overflow (the file's
// size bounds any real product).
std::uint64_t section_bytes(const std::string& path, const char* what, std::uint64_t count, std::uint64_t per,
                            std::uint64_t element, std::uint64_t file_size) {
  if (per != 0 && count > file_size / per / element)
    fail(path + ": " + what, "at most the file's " + std::to_string(file_size) + " bytes",
         std::to_string(count) + " x " + std::to_string(per) + " elements of " + std::to_string(element) + " bytes");
  return count * per * element;
}

template <class T>
std::vector<T> read_section(const char* file, std::uint64_t offset, std::uint64_t n) {
  std::vector<T> out(n);
  if (n > 0) std::memcpy(out.data(), file + offset, n * sizeof(T));
  return out;
}

}  // namespace

std::string prepared_file(const std::string& dir, bool train) {
  return (std::filesystem::path(dir) / (train ? "train.epdata" : "test.epdata")).string();
}

Dataset load_prepared(const std::string& path, std::int64_t limit, std::int64_t vocab_size) {
  InputFile in(path, kFormat);
  const auto size = static_cast<std::uint64_t>(in.size());
  if (size < kHeaderBytes) fail(path, "a prepared data set (a 128-byte header, then its sections)", std::to_string(size) + " bytes");
  const std::shared_ptr<const void> mapping = map_file(in);
  const char* file = static_cast<const char*>(mapping.get());
  Header h;
  std::memcpy(&h, file, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    fail(path, "magic EPDATA01 (scripts/prepare_data.py writes it)", "'" + printable(std::string(h.magic, 8)) + "'");
  if (h.kind != kImages && h.kind != kTokens) fail(path + ": kind", "1 (images) or 2 (tokens)", std::to_string(h.kind));
  if (h.file_size != size) fail(path + ": file size", std::to_string(h.file_size) + " bytes (its header's)", std::to_string(size));
  if (std::any_of(std::begin(h.reserved), std::end(h.reserved), [](std::uint8_t b) { return b != 0; }))
    fail(path + ": reserved header bytes", "zeros", "others");
  if (h.num_classes < 1 || h.num_classes > (1u << 24)) fail(path + ": num_classes", "1 to 2^24", std::to_string(h.num_classes));
  if (h.count < 1) fail(path + ": count", "at least 1 sample", "0");
  const bool images = h.kind == kImages;
  for (int i = 0; i < 3; ++i)
    if ((images || i == 0) ? h.shape[i] < 1 || h.shape[i] > 65536 : h.shape[i] != 0)
      fail(path + ": shape[" + std::to_string(i) + "]", images || i == 0 ? "1 to 65536" : "0", std::to_string(h.shape[i]));
  const std::uint64_t per = images ? std::uint64_t{h.shape[0]} * h.shape[1] * h.shape[2] : h.shape[0];
  const std::uint64_t n = h.count;
  std::vector<Section> sections{{"labels", h.labels, section_bytes(path, "labels", n, 1, 4, size)},
                                {"samples", h.samples, section_bytes(path, "samples", n, per, images ? 1 : 4, size)},
                                {"class names", h.names, h.names_bytes}};
  if (images) sections.push_back({"normalisation", h.norm, std::uint64_t{8} * h.shape[0]});
  else sections.push_back({"lengths", h.lengths, section_bytes(path, "lengths", n, 1, 4, size)});
  if ((images ? h.lengths : h.norm) != 0)
    fail(path + (images ? ": lengths offset" : ": normalisation offset"), "0 for " + std::string(images ? "images" : "tokens"),
         std::to_string(images ? h.lengths : h.norm));
  check_sections(path, sections, size);

  if (limit > static_cast<std::int64_t>(n))
    fail(path, "at least " + std::to_string(limit) + " samples (data.num_*_samples)", std::to_string(n));
  const std::uint64_t kept = limit > 0 ? static_cast<std::uint64_t>(limit) : n;
  Dataset d;
  d.name = path;
  d.kind = images ? SampleKind::Image : SampleKind::Tokens;
  d.size = static_cast<std::int64_t>(kept);
  d.num_classes = static_cast<int>(h.num_classes);
  const std::vector<std::int32_t> labels = read_section<std::int32_t>(file, h.labels, kept);
  for (std::uint64_t i = 0; i < kept; ++i)
    if (labels[i] < 0 || labels[i] >= static_cast<std::int32_t>(h.num_classes))
      fail(path + ": sample " + std::to_string(i) + " label", "a class in [0, " + std::to_string(h.num_classes) + ")",
           std::to_string(labels[i]));
  d.labels.assign(labels.begin(), labels.end());

  const std::string names(file + h.names, h.names_bytes);
  for (std::size_t at = 0; at < names.size();) {
    const std::size_t nl = names.find('\n', at);
    if (nl == std::string::npos) fail(path + ": class names", "each followed by a newline", "a last one without");
    if (nl == at) fail(path + ": class name " + std::to_string(d.class_names.size()), "a name", "an empty line");
    d.class_names.push_back(names.substr(at, nl - at));
    at = nl + 1;
  }
  if (d.class_names.size() != h.num_classes)
    fail(path + ": class names", std::to_string(h.num_classes) + " (num_classes)", std::to_string(d.class_names.size()));

  if (images) {
    d.channels = static_cast<int>(h.shape[0]);
    d.height = static_cast<int>(h.shape[1]);
    d.width = static_cast<int>(h.shape[2]);
    const std::vector<float> norm = read_section<float>(file, h.norm, 2 * std::uint64_t{h.shape[0]});
    d.channel_mean.assign(norm.begin(), norm.begin() + d.channels);
    d.channel_std.assign(norm.begin() + d.channels, norm.end());
    for (int c = 0; c < d.channels; ++c)
      if (!std::isfinite(d.channel_mean[c]) || !(d.channel_std[c] > 0) || !std::isfinite(d.channel_std[c]))
        fail(path + ": normalisation of channel " + std::to_string(c), "a finite mean and a std > 0",
             std::to_string(d.channel_mean[c]) + ", " + std::to_string(d.channel_std[c]));
    for (int c = 0; c < d.channels; ++c) d.black.push_back(-d.channel_mean[c] / d.channel_std[c]);
    d.image_bytes = {reinterpret_cast<const std::uint8_t*>(file) + h.samples, kept * per};
    d.image_file = mapping;
    return d;
  }
  d.seq_length = static_cast<int>(h.shape[0]);
  d.lengths = read_section<std::int32_t>(file, h.lengths, kept);
  const std::vector<std::int32_t> ids = read_section<std::int32_t>(file, h.samples, kept * per);
  for (std::uint64_t i = 0; i < kept; ++i) {
    const std::string where = path + ": sample " + std::to_string(i);
    const std::int32_t len = d.lengths[i];
    if (len < 1 || len > d.seq_length)
      fail(where + " length", "1 to seq_length = " + std::to_string(d.seq_length), std::to_string(len));
    for (std::uint64_t p = 0; p < per; ++p) {
      const std::int32_t id = ids[i * per + p];
      if (static_cast<std::int64_t>(p) >= len ? id != static_cast<std::int32_t>(h.pad_id)
                                              : id < 0 || (vocab_size > 0 && id >= vocab_size))
        fail(where + " token " + std::to_string(p),
             static_cast<std::int64_t>(p) >= len ? "the pad id " + std::to_string(h.pad_id) + " after its length"
                                                 : "an id in [0, model.vocab_size = " + std::to_string(vocab_size) + ")",
             std::to_string(id));
    }
  }
  d.tokens.assign(ids.begin(), ids.end());
  return d;
}

}  // namespace ep::exec

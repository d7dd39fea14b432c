// The executor's datasets, without torch: Fashion-MNIST read from the IDX
// files that Debian's dataset-fashion-mnist package installs, and
// deterministic synthetic images and token sequences for runs that need no
// data at all. A dataset is held in memory as plain arrays (a prepared
// image set's pixels mapped from its file: prepared_data.hpp); the
// executor turns a batch into tensors, so this module and its tests build
// and run without LibTorch. Every failure is an ep::Error naming the file
// (or generator) and what was expected and found.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "planner/config.hpp"

namespace ep::exec {

enum class SampleKind { Image, Tokens };

// A whole dataset in memory as plain arrays; the executor turns a batch into tensors.
struct Dataset {
  std::string name;  // "fashion-mnist/train", "synthetic-images/test", ...
  SampleKind kind = SampleKind::Image;
  std::int64_t size = 0;
  int num_classes = 0;
  // Image: channels x height x width floats per sample, normalised (mean 0,
  // std ~1 over the training set for real data).
  int channels = 0, height = 0, width = 0;
  std::vector<float> pixels;  // size * channels * height * width
  // A prepared image set's pixels as bytes (size * channels * height *
  // width), normalised per channel, (byte / 255 - mean) / std, when batched;
  // empty where `pixels` holds the images. They stay in the file, mapped
  // read-only (`image_file` keeps the mapping): a split larger than memory
  // is paged in as batches touch it.
  std::span<const std::uint8_t> image_bytes;
  std::shared_ptr<const void> image_file;
  std::vector<float> channel_mean, channel_std;
  // Image: a black pixel per channel as normalised (what a crop pads
  // with); empty: 0.
  std::vector<float> black;
  // Tokens: seq_length int64 ids per sample, id 0 is [CLS] at position 0
  // in the synthetic set (a tokenizer's own ids in a prepared one).
  int seq_length = 0;
  std::vector<std::int64_t> tokens;                 // size * seq_length
  // Each sample's real tokens, in [1, seq_length], the rest right padding
  // (a prepared text set); empty: none padded.
  std::vector<std::int32_t> lengths;
  std::vector<std::int64_t> labels;                 // size, each in [0, num_classes)
  std::vector<std::string> class_names;             // num_classes names where the data has them; else empty
  [[nodiscard]] std::int64_t sample_numel() const;  // C*H*W or seq_length
};

// Raw IDX file reading (gzip or plain, told apart by the gzip magic bytes
// 1f 8b). Only the uint8 variants exist in (Fashion-)MNIST: images with 3
// dims (n, rows, cols) and labels with 1 dim (n). Sizes are checked before
// anything is allocated: a dim <= 0 or more than 2^31 elements is rejected,
// as are missing bytes and bytes left over after the data.
struct IdxArray {
  std::vector<int> dims;
  std::vector<std::uint8_t> data;  // row-major, product(dims) bytes
};
[[nodiscard]] IdxArray read_idx(const std::string& path, int expected_dims /* 1 or 3 */);

// Where the Fashion-MNIST files are: `configured` when non-empty, else the
// Debian default /usr/share/datasets/fashion-mnist. Each file may be
// gzipped (NAME.gz, as Debian ships it) or plain (NAME). Throws an ep::Error
// naming the path tried and how to get the data when the directory or one
// of the four files is missing. Returns the directory.
[[nodiscard]] std::string fashion_mnist_dir(const std::string& configured);

// Loads the train split (t10k for train=false) from `dir` (resolved by
// fashion_mnist_dir, so "" means the Debian default). The 28x28 images are
// zero-padded, centred, to image_size x image_size when image_size >= 28
// (the padding is the normalised value of a black pixel), or downsampled by
// area averaging when smaller, so a ViT's patch grid can divide the side.
// Pixels are normalised with the Fashion-MNIST training mean 0.2860 and std
// 0.3530. `classes` (non-empty) keeps only the samples of those classes,
// relabelled by their position in it (a task of its own: pretrain on some
// classes, fine-tune on others); each must be < 10. `limit` > 0 then keeps
// the first `limit` samples left (tests, quick runs); it is an error if
// there are fewer. Checks that images and labels agree in count, labels are
// < 10 and images are 28x28.
[[nodiscard]] Dataset load_fashion_mnist(const std::string& dir, bool train, int image_size,
                                         std::int64_t limit, const std::vector<int>& classes = {});

// Deterministic learnable synthetic images from a seed (splitmix64, no std::
// distributions, so they are the same on every platform): each class has a
// fixed random prototype image; a sample is its class prototype plus noise
// of the same scale, rescaled to std ~1 (label = a hash of (seed, split,
// index) mod num_classes). Train and test share prototypes (same seed) but
// differ in samples (a distinct stream per split). Sample i depends only on
// (seed, split, i), so a smaller `size` gives a prefix of a larger one.
[[nodiscard]] Dataset synthetic_images(std::int64_t size, int channels, int image_size,
                                       int num_classes, std::uint64_t seed, bool train);

// Token sequences for BERT-style models: position 0 is id 0 ([CLS]); other
// ids are in [1, vocab_size). Each class owns a disjoint set of "keyword"
// ids (chosen by the seed); a class-c sample plants class-c keywords at 30%
// of its positions, any class's keywords at 10% (distractors) and filler ids
// elsewhere, so the label is the class whose keywords occur most often in
// all but a few short sequences. Needs vocab_size >= num_classes + 2.
// Deterministic per seed, with the same split and prefix properties as
// synthetic_images.
[[nodiscard]] Dataset synthetic_tokens(std::int64_t size, int seq_length, int vocab_size,
                                       int num_classes, std::uint64_t seed, bool train);

// data.augment's transforms of one training image, drawn from (seed,
// epoch, dataset index) alone: a sample gets the same draw in any
// micro-batch, replica or process, and again when a resumed run repeats
// the epoch. hflip mirrors left to right with probability 1/2; crop moves
// the image by (dy, dx), each uniform in [-pad, pad] with pad = side / 8
// (at least 1), and fills what it uncovers with black: a crop of the image
// padded by pad on each side, as torchvision's RandomCrop(side, padding=pad).
struct AugmentDraw {
  bool flip = false;
  int dy = 0, dx = 0;
  friend bool operator==(const AugmentDraw&, const AugmentDraw&) = default;
};
[[nodiscard]] int crop_padding(int side);
[[nodiscard]] AugmentDraw draw_augment(const std::vector<Augmentation>&, std::uint64_t seed, int epoch,
                                       std::int64_t index, int height, int width);
// Applies `draw` to `image` (channels x height x width of d, normalised) in place.
void augment_image(const Dataset& d, const AugmentDraw& draw, float* image);

}  // namespace ep::exec

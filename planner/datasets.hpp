// The data sets the executor knows, and what a config naming one must say
// about the model: checked when any config is loaded, so that plan,
// simulate and train accept the same configs (train alone then refuses
// what this machine cannot run: another data set, too little memory).
#pragma once

#include <cstdint>

namespace ep {

struct Config;

// Fashion-MNIST: ten classes of 28 x 28 grey images, 6,000 training and
// 1,000 test images each.
constexpr int kFashionMnistClasses = 10;
constexpr std::int64_t kFashionMnistTrainPerClass = 6000, kFashionMnistTestPerClass = 1000;

// Throws the config error of the first key that contradicts the data set:
// data.classes (a subset of fashion-mnist's only), model.num_labels (one per
// class), model.num_channels, model.family (images or tokens), and
// data.num_train_samples / num_test_samples beyond the samples there are.
void check_dataset(const Config& c);

}  // namespace ep

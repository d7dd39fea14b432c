// The training loop a LibTorch user writes by hand, the first baseline of
// bench/bench_tta.py: the same model (exec::Model), data (exec::load_data,
// data.classes included), initial weights and learning-rate schedule
// (exec::learning_rate; a Hugging Face checkpoint's, model.checkpoint, with
// its dropout) as `elasticpipe train`, run by a plain loop: shuffle,
// forward, cross-entropy, backward, torch::optim (AdamW, Adam or SGD with
// the config's hyper-parameters), and test accuracy after every epoch. One
// process, one intra-op thread pool over all cores, no pipeline.
//   ./build/plain_train CONFIG [--set key=value]...
// Prints one line per epoch in the trainer's format ("epoch E/N  loss L  acc
// A%") as it ends, then "trained N epochs in S s, final test accuracy A%".
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "exec/exec_config.hpp"
#include "exec/hf_weights.hpp"
#include "exec/job.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/torch_compat.hpp"
#include "planner/config.hpp"
#include "planner/error.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const ep::TrainingConfig& t, std::vector<at::Tensor> params) {
  switch (t.optimizer) {
    case ep::Optimizer::AdamW:
      return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(t.lr).weight_decay(t.weight_decay));
    case ep::Optimizer::Adam:
      return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(t.lr).weight_decay(t.weight_decay));
    case ep::Optimizer::SGD:
      break;
  }
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(t.lr).momentum(t.momentum).weight_decay(t.weight_decay));
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

std::vector<std::int64_t> range(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(hi - lo));
  std::iota(v.begin(), v.end(), lo);
  return v;
}

double accuracy(const ep::exec::Model& model, const ep::exec::Dataset& test, int batch) {
  c10::NoGradGuard no_grad;
  const ep::SublayerRange all{0, model.num_sublayers()};
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < test.size; first += batch) {
    const auto mb = ep::exec::make_batch(test, range(first, std::min(test.size, first + batch)));
    correct += model.forward(all, mb.input, mb.lengths).argmax(1).eq(mb.labels).sum().item<std::int64_t>();
  }
  return 100.0 * static_cast<double>(correct) / static_cast<double>(test.size);
}

int run(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: plain_train CONFIG [--set key=value]...\n");
    return 2;
  }
  ep::Overrides overrides;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--set") != 0 || i + 1 == argc) {
      std::fprintf(stderr, "plain_train: expected --set key=value, found '%s'\n", argv[i]);
      return 2;
    }
    overrides.push_back(argv[++i]);
  }
  const ep::Config c = ep::load_config(argv[1], overrides);
  const auto& t = c.training;
  ep::exec::compat::set_thread_count(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const ep::exec::Data data = ep::exec::load_data(c);
  ep::exec::Model model(c.model, t.seed, ep::exec::checkpoint_dropout(c.model.checkpoint));
  if (!t.init_weights.empty()) model.load(t.init_weights, t.init_keep);
  if (!c.model.checkpoint.empty()) (void)ep::exec::load_hf_weights(model, c.model.checkpoint, t.init_keep);
  std::vector<at::Tensor> params;
  for (auto& p : model.named_params()) params.push_back(p.tensor.requires_grad_(true));
  const auto opt = make_optimizer(t, params);
  const ep::SublayerRange all{0, model.num_sublayers()};
  const std::int64_t n = data.train.size;
  const std::int64_t steps_per_epoch = (n + t.batch_size - 1) / t.batch_size;
  const std::int64_t total = steps_per_epoch * t.epochs;
  const int eval_batch_size = ep::exec::read_exec_config(c).eval_batch_size;
  const int eval_batch = eval_batch_size > 0 ? eval_batch_size : t.batch_size;
  std::mt19937_64 rng(t.seed);
  std::vector<std::int64_t> order = range(0, n);
  std::int64_t step = 0;
  double trained_s = 0, acc = 0;
  for (int epoch = 1; epoch <= t.epochs; ++epoch) {
    const auto t0 = Clock::now();
    std::shuffle(order.begin(), order.end(), rng);
    double loss_sum = 0;
    for (std::int64_t first = 0; first < n; first += t.batch_size, ++step) {
      const std::vector<std::int64_t> idx(order.begin() + first, order.begin() + std::min(n, first + t.batch_size));
      const auto mb = ep::exec::make_batch(data.train, idx, false, true, {c.data.augment, t.seed, epoch - 1});
      set_lr(*opt, ep::exec::learning_rate(t, step, total));
      opt->zero_grad();
      const at::Tensor keys =
          model.dropout().any() ? ep::exec::dropout_keys(ep::exec::dropout_seed(t.seed, epoch - 1), idx) : at::Tensor();
      const at::Tensor loss = at::cross_entropy_loss(model.forward(all, mb.input, mb.lengths, keys), mb.labels);
      torch::autograd::backward({loss});
      opt->step();
      loss_sum += loss.item<double>();
    }
    trained_s += std::chrono::duration<double>(Clock::now() - t0).count();
    acc = accuracy(model, data.test, eval_batch);
    std::printf("epoch %d/%d  loss %.4f  acc %.2f%%\n", epoch, t.epochs, loss_sum / static_cast<double>(steps_per_epoch),
                acc);
    std::fflush(stdout);
  }
  std::printf("trained %d epochs in %.1f s, final test accuracy %.2f%%\n", t.epochs, trained_s, acc);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ep::Error& e) {  // bad config or data: exit code 2, as elasticpipe
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 1;
  }
}

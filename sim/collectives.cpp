#include "sim/collectives.hpp"

#include "planner/error.hpp"
#include "planner/registry.hpp"

namespace ep::sim {
namespace {

class Steps final : public CollectiveModel {
 public:
  bool two_nodes_stand_for_all() const override { return false; }
  void all_reduce(RingRank& rank, std::uint64_t chunk) const override {
    for (int step = 0; step < 2 * (rank.ranks() - 1); ++step) rank.exchange(chunk, "step", step);
  }
};

class Phases final : public CollectiveModel {
 public:
  bool two_nodes_stand_for_all() const override { return true; }
  void all_reduce(RingRank& rank, std::uint64_t chunk) const override {
    const int n = rank.ranks();
    for (const char* phase : {"reduce-scatter", "all-gather"}) {
      rank.exchange(chunk * (n - 1), phase, -1);
      // A ring's step waits for its slowest link, so a phase ends for all
      // ranks when its slowest flow does.
      rank.meet();
      rank.wait((n - 2) * rank.latency());
    }
  }
};

class Analytic final : public CollectiveModel {
 public:
  bool two_nodes_stand_for_all() const override { return true; }
  void all_reduce(RingRank& rank, std::uint64_t chunk) const override {
    const int n = rank.ranks();
    rank.wait(2.0 * (n - 1) * (rank.latency() + static_cast<double>(chunk) / rank.bandwidth()));
  }
};

using Model = std::shared_ptr<const CollectiveModel>;

Registry<Model>& models() {
  static Registry<Model> r("collective model", {{"steps", std::make_shared<Steps>()},
                                                {"phases", std::make_shared<Phases>()},
                                                {"analytic", std::make_shared<Analytic>()}});
  return r;
}

}  // namespace

void register_collective_model(const std::string& name, Model model) {
  if (!model) throw Error("collective model \"" + name + "\": no model");
  models().add(name, std::move(model));
}

std::vector<std::string> collective_model_names() { return models().names(); }

Model find_collective_model(const std::string& name) { return models().find(name).value_or(nullptr); }

}  // namespace ep::sim

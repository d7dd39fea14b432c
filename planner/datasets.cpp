#include "planner/datasets.hpp"

#include <string>

#include "planner/config.hpp"

namespace ep {

void check_dataset(const Config& c) {
  const std::string& name = c.data.name;
  const bool fashion = name == "fashion-mnist";
  const bool vit = c.model.family == ModelFamily::ViT;
  if ((fashion || name == "synthetic-images") && !vit)
    throw c.error("data.name", "a token data set for model.family = \"bert\"", "\"" + name + "\" (images)");
  if (name == "synthetic-tokens" && vit)
    throw c.error("data.name", "an image data set for model.family = \"vit\"", "\"synthetic-tokens\"");
  if (name == "prepared" && c.data.path.empty())
    throw c.error("data.path", "the folder scripts/prepare_data.py wrote (data.name = \"prepared\")", "none");
  const auto& classes = c.data.classes;
  if (!fashion) {
    if (!classes.empty())
      throw c.error("data.classes", "no class subset for " + name + " (only fashion-mnist has one)",
                    std::to_string(classes.size()) + " classes");
    return;
  }
  if (c.model.num_channels != 1)
    throw c.error("model.num_channels", "1 for fashion-mnist (grey images)", std::to_string(c.model.num_channels));
  for (const int k : classes)
    if (k >= kFashionMnistClasses)
      throw c.error("data.classes", "fashion-mnist classes in [0, " + std::to_string(kFashionMnistClasses) + ")",
                    std::to_string(k));
  const auto kept = static_cast<std::int64_t>(classes.empty() ? kFashionMnistClasses : classes.size());
  if (c.model.num_labels != kept)
    throw c.error("model.num_labels",
                  std::to_string(kept) + " for fashion-mnist" + (classes.empty() ? "" : " with these data.classes"),
                  std::to_string(c.model.num_labels));
  for (const auto& [key, value, per_class] :
       {std::tuple{"data.num_train_samples", c.data.num_train_samples, kFashionMnistTrainPerClass},
        std::tuple{"data.num_test_samples", c.data.num_test_samples, kFashionMnistTestPerClass}})
    if (value > kept * per_class)
      throw c.error(key,
                    "at most " + std::to_string(kept * per_class) + " (" + std::to_string(per_class) +
                        " per fashion-mnist class x " + std::to_string(kept) + " kept)",
                    std::to_string(value));
}

}  // namespace ep

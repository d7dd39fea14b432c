// Inside the planner: how the schedule check and the timing engine name a
// bad schedule (the message and the schedule as a grid, bad steps marked).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "planner/error.hpp"
#include "planner/schedule.hpp"

namespace ep {

struct ScheduleStep {
  int device;
  std::size_t index;  // in the device's list
  friend bool operator==(const ScheduleStep&, const ScheduleStep&) = default;
};

// "invalid schedule: <what>" and the schedule's rows, `marks` as [[...]].
[[nodiscard]] Error schedule_error(const Schedule&, const std::string& what, const std::vector<ScheduleStep>& marks);

}  // namespace ep

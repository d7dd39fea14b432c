// An iteration program in words, every field of it: what a measurement of
// the program depends on on a given machine. The chunk memo (exec/measure)
// keys its timings on a digest of this text, so a key is derived from the
// program, never assembled by hand.
#pragma once

#include <string>

#include "planner/iteration.hpp"

namespace ep {

// One line per part: setup, partition, schedule (its CSV), micro-batches,
// recomputation, replica layout, threads. Equal texts, equal programs.
[[nodiscard]] std::string program_text(const IterationProgram&);

}  // namespace ep

// Torch first: Debian's c10 logs through glog, whose CHECK macro would
// replace Catch's. Precompiled for every exec test file.
#pragma once
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#undef CHECK
#include <catch2/catch.hpp>

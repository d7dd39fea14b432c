// Training state as bytes, keyed by names (never by rank or stage), so a
// replica with another partition or device layout can take it over: used to
// onboard a new data-parallel replica over the network and, on disk, for
// checkpoints (checkpoint.hpp).
//
// Everything a replica needs to continue training: every parameter's value
// (frozen and active), each optimizer state entry (step, momentum/exp_avg,
// exp_avg_sq) by parameter name, plus `meta` (JSON: epoch, iteration,
// lr-schedule step, frozen boundary, sampler position, plan history ... -
// the trainer fills it; this layer does not interpret it).
//
// Format (little-endian host order is assumed, and checked at compile time):
//   "EPSTATE1", u32 version (1), u64 meta length + meta JSON text,
//   u64 record count, records
//     {u32 name len, name, u8 kind (0 weight, 1 momentum, 2 second moment),
//      i64 step, u8 dtype (0: float32, the only one for now), u32 ndim,
//      i64 dims[ndim], u64 nbytes, bytes},
//   then a u32 CRC-32 (zlib crc32) of everything before it.
// `step` is the parameter's optimizer step; on a weight record it is -1
// when the parameter is not in the optimizer (frozen), so membership
// survives even for entries that have no tensors yet (added, never
// stepped; SGD without momentum). Records come in the model's parameter
// order, each weight followed by its state tensors; the reader does not
// depend on that order.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "exec/model.hpp"
#include "exec/optimizer.hpp"

namespace ep::exec {

// Throws ep::Error for a non-float32 parameter or state tensor, or for
// optimizer state under a name the model does not have.
[[nodiscard]] std::vector<std::uint8_t> pack_state(const Model& model, const Optimizer& optimizer,
                                                   const nlohmann::json& meta);

// Restores into `model` (values copied into the existing parameters,
// keeping each one's device) and `optimizer` (its state replaced by the
// packed one; state tensors on the parameter's device) and returns meta.
// Requires exactly this model's names and shapes; throws ep::Error starting
// with `what` (e.g. the file path or "state from rank 0") that names the
// first problem: bad magic/version, CRC mismatch ("corrupted"), truncated,
// unknown parameter, missing parameter, shape mismatch (expected vs found).
// Everything is checked before anything is written: on a throw, `model`
// and `optimizer` are untouched.
nlohmann::json unpack_state(std::span<const std::uint8_t> bytes, Model& model, Optimizer& optimizer,
                            const std::string& what);

// The most bytes pack_state can give for `model` (its weights and two
// optimizer moments per parameter, and the run state in meta): the bound on
// a checkpoint read back for it.
[[nodiscard]] std::int64_t max_state_bytes(const Model& model);

// Meta only, without touching a model (cheap validation of a checkpoint:
// magic, version and CRC are checked).
[[nodiscard]] nlohmann::json peek_meta(std::span<const std::uint8_t> bytes, const std::string& what);

}  // namespace ep::exec

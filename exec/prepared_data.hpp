// Users' own data sets, as scripts/prepare_data.py writes them: an image
// folder (one subfolder per class) or a text CSV / JSON-lines file of
// (text, label) tokenised by a checkpoint's tokenizer, each split in one
// file, `<data.path>/train.epdata` and `<data.path>/test.epdata`. Without
// torch, like data.hpp.
//
// Format (all integers little-endian; every section starts at a multiple
// of 64 bytes, so that the file maps straight into memory):
//   offset  type       field
//   0       char[8]    "EPDATA01"
//   8       u32        kind: 1 images (u8 pixels), 2 tokens (i32 ids)
//   12      u32        num_classes (>= 1)
//   16      u64        count, the samples (>= 1)
//   24      u32[3]     images: channels, height, width; tokens: seq_length, 0, 0
//   36      u32        tokens: the pad id (every id after a sample's length); images: 0
//   40      u64        labels offset: i32[count], each in [0, num_classes)
//   48      u64        lengths offset: tokens: i32[count], each in [1, seq_length]; images: 0
//   56      u64        samples offset: images u8[count][c][h][w]; tokens i32[count][seq_length]
//   64      u64        normalisation offset: images f32 mean[c], f32 std[c] (pixel / 255 - mean) / std; tokens: 0
//   72      u64        class names offset, 80 u64 their bytes: UTF-8, each name followed by '\n'
//   88      u64        the file's size
//   96      32 bytes   zero
// The reader checks every field, that the sections lie inside the file
// without overlapping, and every label, length, pad and (given the
// vocabulary) token id, before the data set is used; a refusal names the
// file, the field or the sample, what was expected and what was found.
// The file is mapped read-only: the header and the small sections (labels,
// lengths, class names, tokens) are checked and copied, an image set's
// pixels stay in the mapping as bytes until a batch normalises them, so a
// split larger than memory is paged in as it is read.
#pragma once

#include <cstdint>
#include <string>

#include "exec/data.hpp"

namespace ep::exec {

// The split's file in a prepared data set's folder.
[[nodiscard]] std::string prepared_file(const std::string& dir, bool train);

// Reads `path`; `limit` > 0 keeps the first `limit` samples (more than the
// file holds is refused); `vocab_size` > 0 bounds token ids.
[[nodiscard]] Dataset load_prepared(const std::string& path, std::int64_t limit, std::int64_t vocab_size);

}  // namespace ep::exec

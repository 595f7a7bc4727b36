#pragma once
// Tensor parallelism for the shared decoder (issue 17): how a layer's
// projections are split over N shards, and the fixed-order sum that joins
// the shards' partial outputs. The decoder (decoder.cc) runs every layer as
// N shards whatever N is; N = 1 is the unsplit model, bit for bit.
//
// The split (Megatron's):
//  - q/k/v projections (and their biases) by output rows: shard s holds
//    query heads [s·nH/N, (s+1)·nH/N) and KV heads [s·kvh/N, (s+1)·kvh/N),
//    so grouped-query attention stays within a shard.
//  - gate/up by output rows (MLP columns [s·I/N, (s+1)·I/N)).
//  - o_proj and down_proj by input columns: each shard's product is a
//    partial sum of the full output, [T, hidden] f32.
//  - the partials are summed by all_reduce_in_order: ((p0 + p1) + p2) + …,
//    shard order, each partial complete before it is added. An elementwise
//    sum, so a token's result never depends on the batch; at a given N a
//    row's output is bitwise the same alone and batched. Against N = 1 only
//    the split of the o/down reductions differs.
//  - o_proj's bias is added once, after the sum.
//  - KV: each owned layer's storage is N storage layers of kvh/N heads
//    (storage layer logical·N + s): one KvCache, one block table per row,
//    so the row operations (join, retire, rounds, prefix reuse,
//    extract/restore) stay one logical operation over every shard's blocks.
//  - Not split, computed once: embeddings, norms, residual stream, per-layer
//    inputs, the output head. On one host (this stand-in) "replicated" and
//    "computed once" are the same bits; devices would each hold a copy.
//
// Where the shards run (ModelOptions::shard_backends, decoder.cc): either
// all on the model's one backend, one after another (the one-device
// stand-in), or each on a backend of its own (CPU "devices": N CPU
// backends of threads/N threads each; or a CUDA backend per shard, on GPUs
// of their own or several on one GPU; make_sharded_backends), shard s's
// split weights prepared there and its layer work issued from its own
// thread (shard_workers.h). Both run one code path, the same operations in
// the same order per shard, so the bits are the same (tested against
// hashes of the stand-in as it was before devices existed). KV storage
// layer logical·N + s lives on shard s's backend when the cache is built
// with Model::kv_backends() (the engine's and CLI's are), and a layer's
// shards meet only at the two sums; a cache all on the model's backend
// adds a meeting after the q/k/v projections (KV written and read there,
// shard after shard). The residual stream, embeddings, head and KV books
// stay on the model's backend; shards copy the stream in and their
// partials out (Backend::copy_from_backend: a host copy between CPU
// backends, a copy on the GPUs between CUDA backends, after an event).
// A multi-GPU version keeps the split, the placement and the order and
// would gather the partials with NCCL (an all-gather, then this order);
// see docs/design/tensor-parallel.md. Nothing has run on several GPUs.
//
// Memory: column shards are copies, so a split model holds o_proj and
// down_proj once more in host memory (before a backend prepares them).
//
// Threads: the split functions are pure; all_reduce_in_order runs on the
// backend, one caller at a time as every backend operation (the decoder
// calls it on the model's thread after every shard has finished).
//
// Refused with an Error, never split wrongly: fewer KV heads than shards (the
// message names the model's count; KV heads are not replicated), heads,
// KV heads or MLP width not divisible by N, routed experts (MoE), layers
// reading another model's KV (the Gemma 4 assistant), affine weights whose
// column split would cut a quantization group.

#include <span>

#include "backend/backend.h"
#include "backend/weight.h"
#include "core/tensor.h"
#include "model/decoder.h"

namespace rowlm::tensor_parallel {

// Throws rowlm::Error naming the first reason `config` cannot be split over
// `shards` (which must be >= 1; 1 always can).
void check_split(const decoder::DecoderConfig& config, int shards);

// Shard `shard` of `shards` of w's rows: a view (no copy). rows % shards == 0.
Weight split_rows(const Weight& w, int shard, int shards);
// Shard `shard` of `shards` of w's columns: a host copy (a column range is
// not a view of row-major storage); w itself when shards == 1. w must be an
// unprepared checkpoint weight in host memory (code order Stream), with
// cols % shards == 0 and, when affine, each shard whole groups. Throws
// rowlm::Error otherwise.
Weight split_columns(const Weight& w, int shard, int shards);
// Shard `shard` of `shards` of a vector (a bias, [n]); empty stays empty.
Tensor split_vector(const Tensor& v, int shard, int shards);

// The in-process all-reduce: partials[0] += partials[1], then partials[2], …
// in shard order, on `backend` (elementwise, so per token and in one order
// whatever the batch); returns partials[0]. All of one shape, at least one.
Tensor all_reduce_in_order(Backend& backend, std::span<Tensor> partials);

}  // namespace rowlm::tensor_parallel

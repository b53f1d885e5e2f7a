// One value of every message type of common/ipc/messaging.h (schemas/messages.fbs), for the messaging
// and channel tests: fields chosen so that a swapped, truncated or sign-mangled field shows (all
// bits used, negatives, empty and non-ASCII strings, embedded NUL), plus each type at its defaults.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/ipc/messaging.h"

namespace zipmoe::messaging::samples {

template <typename M>
M WithStatus(M m, const Status& status) {
  SetStatus(&m, status);
  return m;
}

inline std::vector<Body> AllBodies() {
  constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
  ChunkRead e;
  e.op_id = 0xFEDCBA9876543210ull;
  e.attempt = 3;
  e.file_offset = 4096ull * 1234567;
  e.stored_bytes = 1000001;
  e.dst_offset = 1ull << 40;
  e.dst_capacity_bytes = 1003520;
  e.xxh64 = kMax64;
  e.tensor_name = "model.layers.3.mlp.experts.7.up_proj.weight";
  e.layer_id = 3;
  e.expert_id = 7;
  e.kind = fb::ChunkKind::E;
  e.chunk_index = 2;
  ChunkRead sm = e;
  sm.op_id = 1;
  sm.attempt = 0;
  sm.kind = fb::ChunkKind::SM;
  sm.tensor_name = std::string("t\0\xc3\xa9", 4);  // embedded NUL, UTF-8
  sm.layer_id = std::numeric_limits<int32_t>::min();
  sm.expert_id = -1;
  sm.chunk_index = std::numeric_limits<int32_t>::max();
  ReadRequest reads;
  reads.ops.push_back(std::make_unique<ChunkRead>(e));
  reads.ops.push_back(std::make_unique<ChunkRead>(sm));
  reads.ops.push_back(std::make_unique<ChunkRead>());  // every field at its default

  ReadCompletion read_failed;
  read_failed.op_id = 42;
  read_failed.attempt = 1;
  SetStatus(&read_failed, Status::Corruption("experts.bin@8192: E-chunk 0 of 'x' (layer 1, expert 2): xxh64 mismatch"));
  read_failed.kind = fb::ChunkKind::SM;
  read_failed.stored_bytes = 123;
  read_failed.read_bytes = 4096;
  read_failed.read_us = kMax64 - 1;
  read_failed.verify_us = 17;

  DecodeRequest decode;
  decode.op_id = kMax64;
  decode.attempt = 0xFFFFFFFFu;
  decode.priority = -5;
  decode.kind = DecodeKind::DecodeEChunk;
  decode.codec = fb::Codec::Lz4;
  decode.src_offset = 8192;
  decode.stored_bytes = 777;
  decode.dst_offset = 1ull << 33;
  decode.raw_bytes = 65536;
  decode.tensor_name = "w1";
  decode.layer_id = 0;
  decode.expert_id = 0;
  decode.chunk_index = 0;
  DecodeRequest recover = decode;
  recover.kind = DecodeKind::RecoverBf16;
  recover.codec = fb::Codec::None;
  recover.sm_offset = 12288;
  recover.expected_xxh64 = 0;  // present-and-zero must differ from absent
  recover.chunk_index = -1;

  DecodeCompletion decoded;
  decoded.op_id = 9;
  decoded.attempt = 2;
  decoded.worker_index = 5;
  decoded.run_us = 1234;
  DecodeCompletion cancelled;
  cancelled.op_id = 10;
  SetStatus(&cancelled, Status::Unavailable("stopped before the op ran"));

  WorkerReady ready;
  ready.n_threads = 8;
  ready.credits = 7;
  ready.arena_name = "/zipmoe-arena";
  ready.arena_bytes = 3ull << 30;
  ready.pid = 4242;
  ready.heartbeat_interval_ms = 500;
  ready.role = kRoleDecompressor;
  LayerRequest layer;
  layer.layer_id = 23;
  layer.expert_ids = {0, 5, 59};
  layer.tokens_per_expert = {1, 7, 1};
  layer.mean_scores = {0.5f, 0.25f, -0.0f, 1e-30f};
  layer.substituted = 2;
  ExpertReady expert;
  expert.layer_id = 23;
  expert.expert_id = 59;
  expert.gate_offset = 1ull << 36;
  expert.up_offset = 4096;
  expert.down_offset = kMax64;
  expert.intermediate = 1408;
  expert.hidden = 2048;
  ExpertReady expert_planes = expert;
  expert_planes.expert_id = 58;
  expert_planes.gate_offset = expert_planes.up_offset = expert_planes.down_offset = 0;
  expert_planes.e_plane_offsets = {1, 1ull << 40, kMax64};
  expert_planes.sm_offsets = {7, 8, 9};
  ExpertReady expert_failed;
  expert_failed.layer_id = -1;
  SetStatus(&expert_failed, Status::Corruption("layer 3: E-chunk 1 of 'w': xxh64 mismatch"));
  LeaseRelease release;
  release.layer_id = 7;
  release.expert_ids = {-3, 4, 59};
  LayerEnd end;
  end.layer_id = 23;
  LayerEnd end_releasing = end;
  end_releasing.released_expert_ids = {0, 5};

  // Cache manager (scheduler <-> cache-manager).
  CacheHello hello;
  hello.request_id = 1;
  hello.pid = 4242;
  hello.heartbeat_interval_ms = 500;
  hello.arena_name = "/zipmoe-arena";
  CacheHelloReply hello_reply;
  hello_reply.request_id = kMax64;
  hello_reply.arena_name = "/zipmoe-arena";
  hello_reply.arena_bytes = 3ull << 30;
  hello_reply.budget_bytes = 3ull << 30;
  hello_reply.policy = 1;
  hello_reply.pools = "FCSE";
  hello_reply.staging_offsets = {0, 1ull << 20, kMax64};
  hello_reply.staging_e_sm_bytes = 4096;
  hello_reply.staging_e_plane_offset = 4096;
  hello_reply.staging_bf16_offset = 8192;
  hello_reply.staging_slot_bytes = 12288;
  hello_reply.sm_read_us = 1.5;
  hello_reply.e_read_us = 0.25;
  hello_reply.decompress_us = 3;
  hello_reply.recovery_us = 0;
  hello_reply.expert_compute_us = 1e-9;
  hello_reply.n_shards = 4;
  CacheLookup lookup;
  lookup.request_id = 9;
  lookup.layer_id = 3;
  lookup.expert_ids = {0, 59};
  lookup.scores = {0.125f, 0.875f};
  CacheLookup lookup_unscored = lookup;
  lookup_unscored.scores.clear();
  CacheLookupReply lookup_reply;
  lookup_reply.request_id = 9;
  lookup_reply.layer_id = 3;
  lookup_reply.entries = {CacheEntry(0, 0, 0, 0), CacheEntry(59, 4, kMax64, 12)};
  lookup_reply.admit_calls = 17;
  lookup_reply.admit_outcomes = {1, 2, 3, 4, 5, 6};
  StatusTo(Status::InvalidArgument("admit layer 3 expert 1: outside the arena"), &lookup_reply.admit_status_code,
           &lookup_reply.admit_message);
  CacheAdmitItem admit_item;
  admit_item.layer_id = 3;
  admit_item.expert_id = 59;
  admit_item.lease_id = 12;
  admit_item.admit = true;
  admit_item.parts = kCachePartE | kCachePartSm | kCachePartBf16;
  admit_item.e_offsets = {0, 4096, kMax64};
  admit_item.sm_offsets = {1, 2, 3};
  admit_item.bf16_offsets = {4, 5, 6};
  CacheAdmitItem admit_planes = admit_item;
  admit_planes.expert_id = 58;
  admit_planes.lease_id = 13;
  admit_planes.e_plane_offsets = {7, 8, kMax64};
  admit_planes.bf16_from_planes = true;
  CacheAdmit admit;
  admit.request_id = 10;
  admit.items.push_back(std::make_unique<CacheAdmitItem>(admit_item));
  admit.items.push_back(std::make_unique<CacheAdmitItem>());
  admit.items.push_back(std::make_unique<CacheAdmitItem>(admit_planes));
  admit.want_reply = true;
  CacheReply cache_reply;
  cache_reply.request_id = 11;
  CacheStatsRequest stats_request;
  stats_request.request_id = 12;
  CacheStats stats;
  stats.request_id = 5;
  stats.lookups = 10;
  stats.misses = 3;
  stats.drops = 1;
  stats.pool_counters.assign(28, 7);
  stats.layer_requests = {1, 2, 3, 4, 5};

  ReadCompletions read_batch;  // batches (message version 3): items as they would travel alone
  read_batch.items.push_back(std::make_unique<ReadCompletion>(read_failed));
  read_batch.items.push_back(std::make_unique<ReadCompletion>());
  DecodeRequests decode_batch;
  decode_batch.items.push_back(std::make_unique<DecodeRequest>(decode));
  decode_batch.items.push_back(std::make_unique<DecodeRequest>(recover));
  DecodeCompletions decoded_batch;
  decoded_batch.items.push_back(std::make_unique<DecodeCompletion>(decoded));
  decoded_batch.items.push_back(std::make_unique<DecodeCompletion>(cancelled));

  ExpertsReady experts_batch;  // message version 4
  experts_batch.items.push_back(std::make_unique<ExpertReady>(expert));
  experts_batch.items.push_back(std::make_unique<ExpertReady>(expert_planes));

  std::vector<Body> bodies;
  bodies.emplace_back(std::move(reads));
  bodies.emplace_back(ReadRequest());
  bodies.emplace_back(read_failed);
  bodies.emplace_back(ReadCompletion());
  bodies.emplace_back(decode);
  bodies.emplace_back(recover);
  bodies.emplace_back(decoded);
  bodies.emplace_back(cancelled);
  bodies.emplace_back(ready);
  bodies.emplace_back(MakeHeartbeat(500, 3));
  bodies.emplace_back(MakeDisconnect("SIGTERM"));
  bodies.emplace_back(Disconnect());
  bodies.emplace_back(layer);
  bodies.emplace_back(LayerRequest());
  bodies.emplace_back(expert);
  bodies.emplace_back(expert_planes);
  bodies.emplace_back(expert_failed);
  bodies.emplace_back(release);
  bodies.emplace_back(end);
  bodies.emplace_back(end_releasing);
  bodies.emplace_back(Ack());
  bodies.emplace_back(WithStatus(Ack(), Status::InvalidArgument("EndLayer(3): the active layer is 4")));
  bodies.emplace_back(hello);
  bodies.emplace_back(CacheHello());
  bodies.emplace_back(hello_reply);
  bodies.emplace_back(WithStatus(CacheHelloReply(), Status::InvalidArgument("arena mismatch")));
  bodies.emplace_back(lookup);
  bodies.emplace_back(lookup_unscored);
  bodies.emplace_back(lookup_reply);
  bodies.emplace_back(CacheLookupReply());
  bodies.emplace_back(std::move(admit));
  bodies.emplace_back(CacheAdmit());
  bodies.emplace_back(WithStatus(cache_reply, Status::Unavailable("no CacheHello from this client")));
  bodies.emplace_back(stats_request);
  bodies.emplace_back(stats);
  bodies.emplace_back(std::move(read_batch));
  bodies.emplace_back(ReadCompletions());
  bodies.emplace_back(std::move(decode_batch));
  bodies.emplace_back(std::move(decoded_batch));
  bodies.emplace_back(std::move(experts_batch));
  bodies.emplace_back(ExpertsReady());
  PipeOpen pipe;
  pipe.name = "/zipmoe-pipe-4242-0";
  pipe.ring_bytes = 1u << 20;
  bodies.emplace_back(pipe);
  bodies.emplace_back(PipeOpen());
  return bodies;
}

// Builds an Envelope by hand, so tests can write what EncodeMessage never would.
inline std::string RawEnvelope(uint16_t version, fb::Body type, bool with_body, const char* identifier = "ZMSG") {
  flatbuffers::FlatBufferBuilder fbb;
  flatbuffers::Offset<void> body = 0;
  if (with_body) body = fb::CreateHeartbeat(fbb, 500, 1).Union();
  fbb.FinishSizePrefixed(fb::CreateEnvelope(fbb, version, fbb.CreateString("rogue"), type, body), identifier);
  return std::string(reinterpret_cast<const char*>(fbb.GetBufferPointer()), fbb.GetSize());
}

}  // namespace zipmoe::messaging::samples

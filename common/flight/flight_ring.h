// Flight recorder: a fixed-layout ring of the last collectives of one rank, in a file
// that every rank of the host can read (RUN_DIR/flight/rank-RRRRR.ring). The owning
// rank maps it MAP_SHARED and writes it with lock-free atomic stores; a reader (the
// watchdog of another rank, a dump tool) maps it read-only, so the ring of a rank that
// is SIGSTOPped, hung or dead is still readable. Torch-free.
//
// Layout (all integers little-endian host order, every mutable field an 8-byte
// atomic): RingHeader at offset 0 (magic, version, the sizes below, rank, world size,
// pid, current step, last step-progress time in CLOCK_MONOTONIC and CLOCK_REALTIME ns,
// the watchdog heartbeat, the in-flight entry, and a table of kMaxGroups groups with
// name, size, this rank's rank in the group, entered seq and completed seq), then
// entry_count EntrySlots. Entry `id` (1-based, ever increasing) lives in slot
// (id - 1) % entry_count and is published with a seqlock: seq = 2·id + 1 while its
// fields are written, 2·id + 2 once done; end_ns is written last (0 = still in flight).
//
// Two kinds of entry share the slot. A collective ("allreduce", ...) has group_seq, its
// 1-based seq in the group (the group's entered/completed count collectives only), and
// peer = -1, microbatch = -1, p2p_seq = 0. A point-to-point op ("send" or "recv") has
// group_seq = 0, peer = the other rank's WORLD rank (so a Stall can name it without the
// group's member list), microbatch (>= 0, the caller's label) and p2p_seq, its 1-based
// seq among this rank's ops of that direction with that peer on that group: the k-th
// send from A to B pairs with B's k-th recv from A. Version 1 (no p2p fields) and
// version 2 files are refused by a reader of the other version.
//
// Thread contract: FlightRing's writers (RegisterGroup, Enter, Exit, SetStep,
// MarkProgress) are called by one thread at a time (the training thread), Heartbeat
// by the watchdog; the readers of the header atomics (InFlight, Heartbeat...) are
// safe from any thread. ReadRing and DumpFlightDirJson are thread-safe and never
// crash on a hostile file: a short, oversized or garbled file is an error naming the
// path and the field.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainyard::flight {

inline constexpr std::uint64_t kRingMagic = 0x31474E4952465954ULL;  // "TYFRING1"
inline constexpr std::uint32_t kRingVersion = 2;                    // 2: p2p fields, member_rank
inline constexpr int kMaxGroups = 16;
inline constexpr int kNameWords = 2;  // names are at most 15 bytes + NUL, in 2 words
inline constexpr int kMaxName = kNameWords * 8 - 1;
inline constexpr std::uint32_t kDefaultEntries = 256;
inline constexpr std::uint32_t kMaxEntries = 1u << 16;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the ring needs lock-free 64-bit atomics");

using Word = std::atomic<std::uint64_t>;
using SWord = std::atomic<std::int64_t>;

struct GroupSlot {
  Word name[kNameWords];  // NUL-padded; written once, before group_count publishes it
  SWord size;             // members of the group
  Word entered;           // seq of the last collective entered (1-based; 0 none)
  Word completed;         // seq of the last collective completed
  SWord member_rank;      // this rank's rank in the group (-1 unknown); a pipeline
                          // group's members are in stage order, so this is the stage
  Word reserved[2];
};

struct RingHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_bytes;  // sizeof(RingHeader)
  std::uint32_t entry_bytes;   // sizeof(EntrySlot)
  std::uint32_t entry_count;
  std::uint32_t max_groups;  // kMaxGroups
  std::int32_t rank;
  std::int32_t world_size;
  std::int32_t pid;
  SWord step;               // the step being run (0 before the first)
  SWord progress_mono_ns;   // last step progress, CLOCK_MONOTONIC
  SWord progress_real_ns;   // the same moment, CLOCK_REALTIME
  SWord heartbeat_mono_ns;  // the watchdog's last beat, CLOCK_MONOTONIC (0 none)
  Word next_id;             // entries started so far (the newest id)
  Word inflight_id;         // id of the collective in flight, 0 none
  SWord inflight_start_ns;  // its start, CLOCK_MONOTONIC (0 none)
  SWord inflight_group;     // its group index (-1 none)
  SWord group_count;
  Word reserved[7];
  GroupSlot groups[kMaxGroups];
};

struct EntrySlot {
  Word seq;  // seqlock: 2·id+1 while written, 2·id+2 published, 0 never used
  Word id;
  SWord group;     // index into RingHeader::groups
  Word group_seq;  // a collective's seq in the group; 0 for send/recv
  Word op[kNameWords];
  SWord numel;
  SWord start_ns;    // CLOCK_MONOTONIC
  SWord end_ns;      // 0 while in flight
  SWord peer;        // send/recv: the other rank (world rank); -1 for a collective
  SWord microbatch;  // send/recv: the caller's microbatch (>= 0); -1 for a collective
  Word p2p_seq;      // send/recv: 1-based per (group, peer, direction); 0 otherwise
  Word reserved;
};

struct GroupSnapshot;

std::int64_t MonotonicNs();
std::int64_t RealtimeNs();

// "rank-00003.ring"
std::string RingFileName(int rank);

class FlightRing {
 public:
  // Creates (or truncates) dir/rank-RRRRR.ring, creating `dir` if needed. Returns null
  // and sets *error naming the path on failure.
  static std::unique_ptr<FlightRing> Create(const std::string& dir, int rank, int world_size, std::string* error,
                                            std::uint32_t entries = kDefaultEntries);
  ~FlightRing();
  FlightRing(const FlightRing&) = delete;
  FlightRing& operator=(const FlightRing&) = delete;

  // The group's index, or -1 when the table is full (its collectives go unrecorded).
  // `name` is cut to kMaxName bytes; `member_rank` is this rank's rank in the group.
  int RegisterGroup(const std::string& name, int size, int member_rank = -1);
  // Records the start of the group's next collective; returns its entry id. A few
  // relaxed stores and two release stores; no allocation, no syscall but the clock.
  std::uint64_t Enter(int group, const char* op, std::int64_t numel);
  // Records the start of a point-to-point op ("send"/"recv") with world rank `peer`,
  // labelled `microbatch`, the `p2p_seq`-th of its direction with that peer on the
  // group (the caller counts). It is the in-flight entry like a collective, but
  // leaves the group's collective seqs alone. Returns its entry id.
  std::uint64_t EnterP2P(int group, const char* op, std::int64_t numel, int peer, std::int64_t microbatch,
                         std::uint64_t p2p_seq);
  // Ends entry `id` (from Enter or EnterP2P).
  void Exit(int group, std::uint64_t id);

  void SetStep(std::int64_t step);  // also marks progress
  void MarkProgress();
  void Heartbeat();

  // Lock-free reads of this ring's header.
  std::int64_t step() const;
  std::int64_t progress_mono_ns() const;
  std::int64_t heartbeat_mono_ns() const;
  std::uint64_t inflight_id() const;
  std::int64_t inflight_start_ns() const;
  int inflight_group() const;
  std::string group_name(int group) const;
  std::uint64_t group_entered(int group) const;
  std::string inflight_op() const;  // "" when none
  // The in-flight entry's p2p fields: peer -1, microbatch -1, seq 0 when none is in
  // flight or it is a collective.
  int inflight_peer() const;
  std::int64_t inflight_microbatch() const;
  std::uint64_t inflight_p2p_seq() const;
  // The same two names into `buf` (at least kMaxName + 1 bytes) without allocating,
  // for a last-resort writer; "" when none.
  void CopyGroupName(int group, char* buf) const;
  void CopyInflightOp(char* buf) const;
  std::int64_t group_size(int group) const;
  // Every registered group with its seqs (allocates; not for a last-resort path).
  std::vector<GroupSnapshot> Groups() const;

  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }
  int rank() const { return rank_; }

 private:
  FlightRing() = default;
  RingHeader* header() const { return static_cast<RingHeader*>(base_); }
  EntrySlot* slot(std::uint64_t id) const;
  std::uint64_t Publish(int group, const char* op, std::int64_t numel, std::uint64_t group_seq, int peer,
                        std::int64_t microbatch, std::uint64_t p2p_seq);

  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::string path_;
  std::string dir_;
  int rank_ = 0;
};

// What ReadRing saw.
struct GroupSnapshot {
  std::string name;
  std::int64_t size = 0;
  std::uint64_t entered = 0;
  std::uint64_t completed = 0;
  int member_rank = -1;  // the ring's rank within the group (-1 unknown)
};

struct EntrySnapshot {
  std::uint64_t id = 0;
  int group = -1;
  std::string group_name;
  std::uint64_t group_seq = 0;
  std::string op;
  std::int64_t numel = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;  // 0: in flight
  int peer = -1;            // send/recv: the other rank's world rank; -1: a collective
  std::int64_t microbatch = -1;
  std::uint64_t p2p_seq = 0;

  bool is_p2p() const { return peer >= 0; }
};

struct RingSnapshot {
  std::string path;
  int rank = -1;
  int world_size = 0;
  int pid = 0;
  std::int64_t step = 0;
  std::int64_t progress_mono_ns = 0;
  std::int64_t progress_real_ns = 0;
  std::int64_t heartbeat_mono_ns = 0;
  std::uint64_t total_entries = 0;  // ids ever started
  std::uint64_t inflight_id = 0;
  EntrySnapshot inflight;  // the in-flight entry (id 0: none, or unreadable), read
                           // whatever last_entries is
  std::vector<GroupSnapshot> groups;
  std::vector<EntrySnapshot> entries;  // the last ones, oldest first

  // Index into groups of `name`, or -1.
  int FindGroup(const std::string& name) const;
};

// Reads the ring at `path` (read-only; never writes it) with its last `last_entries`
// entries. Returns false and sets *error ("PATH: ...": missing, too short, bad magic,
// version, sizes, a group's member_rank or a published entry's peer, microbatch or
// p2p_seq out of range) when it is not a ring this build understands.
bool ReadRing(const std::string& path, std::size_t last_entries, RingSnapshot* out, std::string* error);

// Every *.ring file under `dir`, ordered by rank. Rings that fail to read are listed in
// *bad as "PATH: why" (may be null).
std::vector<RingSnapshot> ReadRingDir(const std::string& dir, std::size_t last_entries, std::vector<std::string>* bad,
                                      std::string* error);

// The JSON of every ring in `dir`:
//   {"dir": D, "rings": [{"path","rank","world_size","pid","step","progress_mono_ns",
//     "progress_realtime_ns","heartbeat_mono_ns","total_entries","inflight_id",
//     "groups":[{"name","size","member_rank","entered","completed"}],
//     "entries":[{"id","group","group_seq","op","numel","start_ns","end_ns","in_flight",
//                 and for send/recv "peer","microbatch","p2p_seq"}]}],
//    "errors": ["PATH: why", ...]}
// Returns false (and *error) only when `dir` cannot be listed.
bool DumpFlightDirJson(const std::string& dir, std::size_t last_entries, std::string* json, std::string* error);

}  // namespace trainyard::flight

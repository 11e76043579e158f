#include "common/flight/flight_ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>

namespace trainyard::flight {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;

std::int64_t ClockNs(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void StoreName(Word* words, const char* name) {
  char buf[kNameWords * 8] = {};
  std::strncpy(buf, name, kMaxName);
  for (int i = 0; i < kNameWords; ++i) {
    std::uint64_t w = 0;
    std::memcpy(&w, buf + i * 8, 8);
    words[i].store(w, kRelaxed);
  }
}

// Printable ASCII up to the first NUL; anything else becomes '?'.
std::string LoadName(const Word* words) {
  char buf[kNameWords * 8 + 1] = {};
  for (int i = 0; i < kNameWords; ++i) {
    const std::uint64_t w = words[i].load(kRelaxed);
    std::memcpy(buf + i * 8, &w, 8);
  }
  std::string s;
  for (int i = 0; i < kNameWords * 8 && buf[i] != '\0'; ++i) {
    s += (buf[i] >= 0x20 && buf[i] < 0x7f) ? buf[i] : '?';
  }
  return s;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

bool MakeDirs(const std::string& dir, std::string* error) {
  std::string prefix;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    prefix = dir.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = Errno("mkdir " + prefix);
      return false;
    }
  }
  return true;
}

}  // namespace

std::int64_t MonotonicNs() { return ClockNs(CLOCK_MONOTONIC); }
std::int64_t RealtimeNs() { return ClockNs(CLOCK_REALTIME); }

std::string RingFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05d.ring", rank);
  return buf;
}

std::unique_ptr<FlightRing> FlightRing::Create(const std::string& dir, int rank, int world_size, std::string* error,
                                               std::uint32_t entries) {
  if (entries == 0 || entries > kMaxEntries) {
    *error =
        "flight ring: entry count " + std::to_string(entries) + " must be in [1, " + std::to_string(kMaxEntries) + "]";
    return nullptr;
  }
  if (!MakeDirs(dir, error)) return nullptr;
  const std::string path = dir + "/" + RingFileName(rank);
  const std::size_t bytes = sizeof(RingHeader) + std::size_t{entries} * sizeof(EntrySlot);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = Errno("flight ring: open " + path);
    return nullptr;
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *error = Errno("flight ring: ftruncate " + path);
    close(fd);
    return nullptr;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *error = Errno("flight ring: mmap " + path);
    return nullptr;
  }
  // The file is all zeros (ftruncate); construct the atomics in place over it.
  auto* h = new (base) RingHeader();
  for (std::uint32_t i = 0; i < entries; ++i) {
    new (static_cast<char*>(base) + sizeof(RingHeader) + i * sizeof(EntrySlot)) EntrySlot();
  }
  h->version = kRingVersion;
  h->header_bytes = sizeof(RingHeader);
  h->entry_bytes = sizeof(EntrySlot);
  h->entry_count = entries;
  h->max_groups = kMaxGroups;
  h->rank = rank;
  h->world_size = world_size;
  h->pid = static_cast<std::int32_t>(getpid());
  h->inflight_group.store(-1, kRelaxed);
  h->progress_mono_ns.store(MonotonicNs(), kRelaxed);
  h->progress_real_ns.store(RealtimeNs(), kRelaxed);
  // The magic goes last: a reader that sees it sees a complete header.
  std::atomic_thread_fence(kRelease);
  reinterpret_cast<std::atomic<std::uint64_t>*>(&h->magic)->store(kRingMagic, kRelease);
  std::unique_ptr<FlightRing> ring(new FlightRing());
  ring->base_ = base;
  ring->bytes_ = bytes;
  ring->path_ = path;
  ring->dir_ = dir;
  ring->rank_ = rank;
  return ring;
}

FlightRing::~FlightRing() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

EntrySlot* FlightRing::slot(std::uint64_t id) const {
  auto* first = reinterpret_cast<EntrySlot*>(static_cast<char*>(base_) + sizeof(RingHeader));
  return first + (id - 1) % header()->entry_count;
}

int FlightRing::RegisterGroup(const std::string& name, int size, int member_rank) {
  RingHeader* h = header();
  const std::int64_t n = h->group_count.load(kRelaxed);
  if (n >= kMaxGroups) return -1;
  GroupSlot& g = h->groups[n];
  StoreName(g.name, name.c_str());
  g.size.store(size, kRelaxed);
  g.member_rank.store(member_rank, kRelaxed);
  g.entered.store(0, kRelaxed);
  g.completed.store(0, kRelaxed);
  h->group_count.store(n + 1, kRelease);
  return static_cast<int>(n);
}

std::uint64_t FlightRing::Publish(int group, const char* op, std::int64_t numel, std::uint64_t group_seq, int peer,
                                  std::int64_t microbatch, std::uint64_t p2p_seq) {
  RingHeader* h = header();
  const std::uint64_t id = h->next_id.load(kRelaxed) + 1;
  const std::int64_t now = MonotonicNs();
  EntrySlot* e = slot(id);
  e->seq.store(2 * id + 1, kRelaxed);
  std::atomic_thread_fence(kRelease);
  e->id.store(id, kRelaxed);
  e->group.store(group, kRelaxed);
  e->group_seq.store(group_seq, kRelaxed);
  StoreName(e->op, op);
  e->numel.store(numel, kRelaxed);
  e->start_ns.store(now, kRelaxed);
  e->end_ns.store(0, kRelaxed);
  e->peer.store(peer, kRelaxed);
  e->microbatch.store(microbatch, kRelaxed);
  e->p2p_seq.store(p2p_seq, kRelaxed);
  e->seq.store(2 * id + 2, kRelease);
  h->next_id.store(id, kRelease);
  h->inflight_group.store(group, kRelaxed);
  h->inflight_start_ns.store(now, kRelaxed);
  h->inflight_id.store(id, kRelease);
  return id;
}

std::uint64_t FlightRing::Enter(int group, const char* op, std::int64_t numel) {
  GroupSlot& g = header()->groups[group];
  const std::uint64_t seq = g.entered.load(kRelaxed) + 1;
  const std::uint64_t id = Publish(group, op, numel, seq, -1, -1, 0);
  g.entered.store(seq, kRelease);
  return id;
}

std::uint64_t FlightRing::EnterP2P(int group, const char* op, std::int64_t numel, int peer, std::int64_t microbatch,
                                   std::uint64_t p2p_seq) {
  return Publish(group, op, numel, 0, peer, microbatch, p2p_seq);
}

void FlightRing::Exit(int group, std::uint64_t id) {
  RingHeader* h = header();
  EntrySlot* e = slot(id);
  if (e->id.load(kRelaxed) == id) e->end_ns.store(MonotonicNs(), kRelease);
  // One entry is in flight at a time, so completed catches up with entered (for a
  // send/recv, which left entered alone, it already equals it).
  GroupSlot& g = h->groups[group];
  g.completed.store(g.entered.load(kRelaxed), kRelease);
  h->inflight_id.store(0, kRelease);
  h->inflight_start_ns.store(0, kRelaxed);
  h->inflight_group.store(-1, kRelaxed);
  MarkProgress();  // a finished collective is progress too
}

void FlightRing::SetStep(std::int64_t step) {
  header()->step.store(step, kRelaxed);
  MarkProgress();
}

void FlightRing::MarkProgress() {
  header()->progress_real_ns.store(RealtimeNs(), kRelaxed);
  header()->progress_mono_ns.store(MonotonicNs(), kRelease);
}

void FlightRing::Heartbeat() { header()->heartbeat_mono_ns.store(MonotonicNs(), kRelease); }

std::int64_t FlightRing::step() const { return header()->step.load(kRelaxed); }
std::int64_t FlightRing::progress_mono_ns() const { return header()->progress_mono_ns.load(kAcquire); }
std::int64_t FlightRing::heartbeat_mono_ns() const { return header()->heartbeat_mono_ns.load(kAcquire); }
std::uint64_t FlightRing::inflight_id() const { return header()->inflight_id.load(kAcquire); }
std::int64_t FlightRing::inflight_start_ns() const { return header()->inflight_start_ns.load(kRelaxed); }
int FlightRing::inflight_group() const { return static_cast<int>(header()->inflight_group.load(kRelaxed)); }

std::string FlightRing::group_name(int group) const {
  if (group < 0 || group >= header()->group_count.load(kAcquire)) return "";
  return LoadName(header()->groups[group].name);
}

std::uint64_t FlightRing::group_entered(int group) const {
  if (group < 0 || group >= header()->group_count.load(kAcquire)) return 0;
  return header()->groups[group].entered.load(kAcquire);
}

std::string FlightRing::inflight_op() const {
  const std::uint64_t id = inflight_id();
  if (id == 0) return "";
  return LoadName(slot(id)->op);
}

int FlightRing::inflight_peer() const {
  const std::uint64_t id = inflight_id();
  return id == 0 ? -1 : static_cast<int>(slot(id)->peer.load(kRelaxed));
}

std::int64_t FlightRing::inflight_microbatch() const {
  const std::uint64_t id = inflight_id();
  return id == 0 ? -1 : slot(id)->microbatch.load(kRelaxed);
}

std::uint64_t FlightRing::inflight_p2p_seq() const {
  const std::uint64_t id = inflight_id();
  return id == 0 ? 0 : slot(id)->p2p_seq.load(kRelaxed);
}

namespace {
void CopyName(const Word* words, char* buf) {
  for (int i = 0; i < kNameWords; ++i) {
    const std::uint64_t w = words[i].load(kRelaxed);
    std::memcpy(buf + i * 8, &w, 8);
  }
  buf[kMaxName] = '\0';
  for (int i = 0; i < kMaxName && buf[i] != '\0'; ++i) {
    if (buf[i] < 0x20 || buf[i] >= 0x7f || buf[i] == '"' || buf[i] == '\\') buf[i] = '?';
  }
}
}  // namespace

void FlightRing::CopyGroupName(int group, char* buf) const {
  buf[0] = '\0';
  if (group < 0 || group >= header()->group_count.load(kAcquire)) return;
  CopyName(header()->groups[group].name, buf);
}

void FlightRing::CopyInflightOp(char* buf) const {
  buf[0] = '\0';
  const std::uint64_t id = inflight_id();
  if (id != 0) CopyName(slot(id)->op, buf);
}

std::int64_t FlightRing::group_size(int group) const {
  if (group < 0 || group >= header()->group_count.load(kAcquire)) return 0;
  return header()->groups[group].size.load(kRelaxed);
}

std::vector<GroupSnapshot> FlightRing::Groups() const {
  std::vector<GroupSnapshot> out;
  const std::int64_t n = header()->group_count.load(kAcquire);
  for (std::int64_t i = 0; i < n; ++i) {
    const GroupSlot& g = header()->groups[i];
    out.push_back({LoadName(g.name), g.size.load(kRelaxed), g.entered.load(kAcquire), g.completed.load(kAcquire),
                   static_cast<int>(g.member_rank.load(kRelaxed))});
  }
  return out;
}

namespace {

// Seqlock read of entry `id` from its slot; false when the slot is being rewritten,
// was reused, or never held `id`.
bool ReadEntry(const EntrySlot& e, std::uint64_t id, EntrySnapshot* x) {
  const std::uint64_t before = e.seq.load(kAcquire);
  x->id = e.id.load(kRelaxed);
  x->group = static_cast<int>(e.group.load(kRelaxed));
  x->group_seq = e.group_seq.load(kRelaxed);
  x->op = LoadName(e.op);
  x->numel = e.numel.load(kRelaxed);
  x->start_ns = e.start_ns.load(kRelaxed);
  x->peer = static_cast<int>(std::clamp<std::int64_t>(e.peer.load(kRelaxed), INT32_MIN, INT32_MAX));
  x->microbatch = e.microbatch.load(kRelaxed);
  x->p2p_seq = e.p2p_seq.load(kRelaxed);
  x->end_ns = e.end_ns.load(kAcquire);
  std::atomic_thread_fence(kAcquire);
  return before == 2 * id + 2 && e.seq.load(kRelaxed) == before && x->id == id;
}

// Why a published entry's p2p fields cannot be trusted ("" when they can): a
// collective has peer -1, microbatch -1, p2p_seq 0; a send/recv a peer in the world,
// a microbatch >= 0 and a p2p_seq >= 1.
std::string CheckEntry(const EntrySnapshot& x, int world_size) {
  const std::string where = "entry " + std::to_string(x.id) + " (" + x.op + "): ";
  if (x.peer == -1) {
    if (x.microbatch != -1 || x.p2p_seq != 0) {
      return where + "a collective with microbatch " + std::to_string(x.microbatch) + " and p2p_seq " +
             std::to_string(x.p2p_seq) + " (want -1 and 0)";
    }
    return "";
  }
  if (x.peer < 0 || x.peer >= world_size) {
    return where + "peer " + std::to_string(x.peer) + " outside [-1, " + std::to_string(world_size) + ")";
  }
  if (x.op != "send" && x.op != "recv") return where + "peer " + std::to_string(x.peer) + " on an op not send/recv";
  if (x.microbatch < 0) return where + "microbatch " + std::to_string(x.microbatch) + " of a send/recv is negative";
  if (x.p2p_seq == 0) return where + "p2p_seq 0 of a send/recv (seqs are 1-based)";
  return "";
}

}  // namespace

int RingSnapshot::FindGroup(const std::string& name) const {
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

bool ReadRing(const std::string& path, std::size_t last_entries, RingSnapshot* out, std::string* error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = Errno(path);
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    *error = Errno(path + ": fstat");
    close(fd);
    return false;
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (!S_ISREG(st.st_mode)) {
    *error = path + ": not a regular file";
    close(fd);
    return false;
  }
  if (size < sizeof(RingHeader)) {
    *error = path + ": truncated: " + std::to_string(size) + " bytes, a ring header needs " +
             std::to_string(sizeof(RingHeader));
    close(fd);
    return false;
  }
  // Map exactly what fstat saw; the writer never shrinks its file.
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *error = Errno(path + ": mmap");
    return false;
  }
  const auto* h = static_cast<const RingHeader*>(base);
  auto fail = [&](const std::string& why) {
    *error = path + ": " + why;
    munmap(base, size);
    return false;
  };
  const std::uint64_t magic = reinterpret_cast<const std::atomic<std::uint64_t>*>(&h->magic)->load(kAcquire);
  if (magic != kRingMagic) return fail("bad magic (not a flight ring, or not initialised yet)");
  if (h->version != kRingVersion) {
    return fail("version " + std::to_string(h->version) + ", this reader knows only version " +
                std::to_string(kRingVersion) + " (the ring was written by " +
                (h->version < kRingVersion ? "an older" : "a newer") + " trainyard build)");
  }
  if (h->header_bytes != sizeof(RingHeader) || h->entry_bytes != sizeof(EntrySlot) ||
      h->max_groups != static_cast<std::uint32_t>(kMaxGroups)) {
    return fail("layout mismatch: header_bytes=" + std::to_string(h->header_bytes) +
                " entry_bytes=" + std::to_string(h->entry_bytes) + " max_groups=" + std::to_string(h->max_groups));
  }
  if (h->entry_count == 0 || h->entry_count > kMaxEntries) {
    return fail("entry_count " + std::to_string(h->entry_count) + " outside [1, " + std::to_string(kMaxEntries) + "]");
  }
  const std::uint64_t want = sizeof(RingHeader) + std::uint64_t{h->entry_count} * sizeof(EntrySlot);
  if (size != want) {
    return fail("size " + std::to_string(size) + " bytes, but " + std::to_string(h->entry_count) + " entries need " +
                std::to_string(want));
  }
  const std::int64_t group_count = h->group_count.load(kAcquire);
  if (group_count < 0 || group_count > kMaxGroups) {
    return fail("group_count " + std::to_string(group_count) + " outside [0, " + std::to_string(kMaxGroups) + "]");
  }
  RingSnapshot s;
  s.path = path;
  s.rank = h->rank;
  s.world_size = h->world_size;
  s.pid = h->pid;
  s.step = h->step.load(kRelaxed);
  s.progress_mono_ns = h->progress_mono_ns.load(kAcquire);
  s.progress_real_ns = h->progress_real_ns.load(kRelaxed);
  s.heartbeat_mono_ns = h->heartbeat_mono_ns.load(kRelaxed);
  s.total_entries = h->next_id.load(kAcquire);
  s.inflight_id = h->inflight_id.load(kAcquire);
  for (std::int64_t i = 0; i < group_count; ++i) {
    const GroupSlot& g = h->groups[i];
    const std::int64_t size = g.size.load(kRelaxed);
    const std::int64_t member = g.member_rank.load(kRelaxed);
    if (member < -1 || member >= size) {
      return fail("group " + std::to_string(i) + ": member_rank " + std::to_string(member) + " outside [-1, " +
                  std::to_string(size) + ")");
    }
    s.groups.push_back(
        {LoadName(g.name), size, g.entered.load(kAcquire), g.completed.load(kAcquire), static_cast<int>(member)});
  }
  const auto* slots = reinterpret_cast<const EntrySlot*>(static_cast<const char*>(base) + sizeof(RingHeader));
  const std::uint64_t newest = s.total_entries;
  const std::uint64_t count = std::min<std::uint64_t>({newest, h->entry_count, last_entries});
  // A slot being rewritten (or already reused) is skipped; a published one with
  // p2p fields out of range makes the whole ring untrusted.
  auto read = [&](std::uint64_t id, EntrySnapshot* x, std::string* why) {
    if (!ReadEntry(slots[(id - 1) % h->entry_count], id, x)) return false;
    *why = CheckEntry(*x, s.world_size);
    if (x->group >= 0 && x->group < group_count) x->group_name = s.groups[x->group].name;
    return true;
  };
  std::string why;
  for (std::uint64_t id = newest - count + 1; id <= newest && count > 0; ++id) {
    EntrySnapshot x;
    if (!read(id, &x, &why)) continue;
    if (!why.empty()) return fail(why);
    s.entries.push_back(std::move(x));
  }
  if (s.inflight_id != 0 && s.inflight_id <= newest && newest - s.inflight_id < h->entry_count) {
    EntrySnapshot x;
    if (read(s.inflight_id, &x, &why)) {
      if (!why.empty()) return fail(why);
      s.inflight = std::move(x);
    }
  }
  munmap(base, size);
  *out = std::move(s);
  return true;
}

std::vector<RingSnapshot> ReadRingDir(const std::string& dir, std::size_t last_entries, std::vector<std::string>* bad,
                                      std::string* error) {
  std::vector<RingSnapshot> rings;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    *error = Errno("flight dir " + dir);
    return rings;
  }
  std::vector<std::string> names;
  while (dirent* ent = readdir(d)) {
    const std::string name = ent->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".ring") == 0) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    RingSnapshot s;
    std::string why;
    if (ReadRing(dir + "/" + name, last_entries, &s, &why)) {
      rings.push_back(std::move(s));
    } else if (bad != nullptr) {
      bad->push_back(why);
    }
  }
  std::sort(rings.begin(), rings.end(), [](const RingSnapshot& a, const RingSnapshot& b) { return a.rank < b.rank; });
  return rings;
}

bool DumpFlightDirJson(const std::string& dir, std::size_t last_entries, std::string* json, std::string* error) {
  std::vector<std::string> bad;
  std::string why;
  const std::vector<RingSnapshot> rings = ReadRingDir(dir, last_entries, &bad, &why);
  if (!why.empty()) {
    *error = why;
    return false;
  }
  nlohmann::json out = {{"dir", dir}, {"rings", nlohmann::json::array()}, {"errors", bad}};
  for (const RingSnapshot& s : rings) {
    nlohmann::json groups = nlohmann::json::array();
    for (const GroupSnapshot& g : s.groups) {
      groups.push_back({{"name", g.name},
                        {"size", g.size},
                        {"member_rank", g.member_rank},
                        {"entered", g.entered},
                        {"completed", g.completed}});
    }
    nlohmann::json entries = nlohmann::json::array();
    for (const EntrySnapshot& e : s.entries) {
      nlohmann::json entry = {{"id", e.id},         {"group", e.group_name},     {"group_seq", e.group_seq},
                              {"op", e.op},         {"numel", e.numel},          {"start_ns", e.start_ns},
                              {"end_ns", e.end_ns}, {"in_flight", e.end_ns == 0}};
      if (e.is_p2p()) {
        entry["peer"] = e.peer;
        entry["microbatch"] = e.microbatch;
        entry["p2p_seq"] = e.p2p_seq;
      }
      entries.push_back(std::move(entry));
    }
    out["rings"].push_back({{"path", s.path},
                            {"rank", s.rank},
                            {"world_size", s.world_size},
                            {"pid", s.pid},
                            {"step", s.step},
                            {"progress_mono_ns", s.progress_mono_ns},
                            {"progress_realtime_ns", s.progress_real_ns},
                            {"heartbeat_mono_ns", s.heartbeat_mono_ns},
                            {"total_entries", s.total_entries},
                            {"inflight_id", s.inflight_id},
                            {"groups", std::move(groups)},
                            {"entries", std::move(entries)}});
  }
  *json = out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  return true;
}

}  // namespace trainyard::flight

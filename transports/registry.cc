#include "transports/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "base/log.h"
#include "topology/local_host.h"

namespace uccl {
namespace {

struct Table {
  std::mutex mu;
  std::vector<std::unique_ptr<TransportEntry>> entries;  // stable addresses
};
Table& table() {
  static Table* t = new Table;  // never destroyed: progress threads may ask during exit
  return *t;
}

[[noreturn]] void bad_entry(const std::string& name, const char* what) {
  std::fprintf(stderr, "uccl: transport registration '%s': %s\n", name.c_str(), what);
  std::abort();
}

}  // namespace

const TextSetting kTransport("general", "UCCL_TRANSPORT", "auto",
                             "force transports between peers: auto, or names tried in order (tcp, shm, verbs, "
                             "\"shm,tcp\")",
                             any_text());  // names are checked against the table when used

bool register_transport(TransportEntry entry) {
  if (entry.name.empty() || !entry.make || !entry.can_connect) bad_entry(entry.name, "name, make and can_connect are required");
  if (static_cast<int>(entry.id) >= kMaxTransports) bad_entry(entry.name, "id must be below kMaxTransports");
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto& e : t.entries)
    if (e->name == entry.name || e->id == entry.id) bad_entry(entry.name, "name or id already registered");
  t.entries.push_back(std::make_unique<TransportEntry>(std::move(entry)));
  return true;
}

void unregister_transport(const std::string& name) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.entries.erase(std::remove_if(t.entries.begin(), t.entries.end(), [&](auto& e) { return e->name == name; }),
                  t.entries.end());
}

std::vector<const TransportEntry*> transport_table() {
  Table& t = table();
  std::vector<const TransportEntry*> out;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    for (auto& e : t.entries) out.push_back(e.get());
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TransportEntry* a, const TransportEntry* b) { return a->priority > b->priority; });
  return out;
}

const TransportEntry* find_transport(TransportKind id) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto& e : t.entries)
    if (e->id == id) return e.get();
  return nullptr;
}

const TransportEntry* find_transport(const std::string& name) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto& e : t.entries)
    if (e->name == name || std::find(e->aliases.begin(), e->aliases.end(), name) != e->aliases.end()) return e.get();
  return nullptr;
}

const char* transport_name(TransportKind k) {
  const TransportEntry* e = find_transport(k);
  return e ? e->name.c_str() : "unknown";
}

void remove_dead_peers_leftovers() {
  for (const TransportEntry* e : transport_table())
    if (e->cleanup) e->cleanup();
}

std::vector<NicInfo> local_rdma_nics() {
  bool listed = false;
  std::vector<NicInfo> out;
  for (const TransportEntry* e : transport_table()) {
    if (!e->local_nics) continue;
    listed = true;
    for (auto& n : e->local_nics()) out.push_back(n);
  }
  return listed ? out : discover_rdma_nics();
}

}  // namespace uccl

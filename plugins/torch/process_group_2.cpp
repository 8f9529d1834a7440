// The torch-2-specific part: c10d::Backend of torch 2.x over CommRunner
// (comm_runner.hpp) and the Python module with the creator function that
// torch.distributed.Backend.register_backend calls (for the CPU device).
// torch 2's c10d::ProcessGroup is a front that dispatches each call to the
// Backend registered for the tensors' device; the groups this module makes
// itself (shrink, grow, join) come wrapped in such a front, so that
// Python treats them as the groups init_process_group makes. The Work
// class and the store adapter are torch_common.hpp's, shared with
// process_group_1_13.cpp.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/python.h>

#include <pybind11/chrono.h>

#include "comm_runner.hpp"
#include "torch_common.hpp"

namespace aitorch {
pybind11::object comm_error_object(const CommError& e);  // comm_error.cpp
namespace {

using BackendAutoinfra = AutoinfraGroup<c10d::Backend>;


// The job token (AUTOINFRA_TOKEN, else empty), alike for the communicators
// made through the store and for newcomers' joins: a join door refuses a
// newcomer whose token hash differs from the job's.
const char* job_token() {
  const char* t = std::getenv("AUTOINFRA_TOKEN");
  return t ? t : "";
}

// The Backend with a ProcessGroup front of its own, CPU tensors dispatched
// to it: what init_process_group makes around the creator's Backend, for
// the groups made here.
c10::intrusive_ptr<c10d::ProcessGroup> front(std::unique_ptr<CommRunner> runner) {
  int rank = runner->rank(), size = runner->size();
  auto backend = c10::make_intrusive<BackendAutoinfra>(std::move(runner));
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(rank, size);
  pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::CUSTOM, backend);
  pg->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
  return pg;
}

c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                         int size, double timeout_s, const std::string& peer_addr) {
  StoreAdapter adapter{store, ""};
  ai_kv_store kv{&adapter, &StoreAdapter::set, &StoreAdapter::get};
  ai_comm_config cfg{};
  cfg.rank = rank;
  cfg.size = size;
  cfg.timeout_s = timeout_s;
  cfg.store_host = peer_addr.empty() ? nullptr : peer_addr.c_str();
  cfg.token = job_token();
  // The runtime's own waits block too, for the same reason as poll_us().
  cfg.block_waits = 1;
  poll_us();  // a bad AUTOINFRA_TORCH_POLL_US fails here, named
  ai_comm* comm = nullptr;
  ai_status_t st;
  {
    pybind11::gil_scoped_release nogil;
    st = ai_comm_create_with_store(&cfg, &kv, &comm);
  }
  TORCH_CHECK(st == AI_OK, "autoinfra: rank ", rank, " of ", size,
              ": creating the communicator through the store failed: ", ai_strerror(st), ": ",
              ai_last_error(), adapter.error.empty() ? "" : " (store: " + adapter.error + ")");
  return c10::make_intrusive<BackendAutoinfra>(std::make_unique<CommRunner>(comm));
}

// The group's Backend for CPU tensors, if it is this backend's.
BackendAutoinfra* autoinfra_group(const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                                  const char* what) {
  TORCH_CHECK(pg, "autoinfra ", what, ": no process group");
  BackendAutoinfra* ai = nullptr;
  if (pg->hasBackends()) {
    try {
      ai = dynamic_cast<BackendAutoinfra*>(pg->getBackend(c10::DeviceType::CPU).get());
    } catch (const c10::Error&) {
      ai = nullptr;  // no backend for CPU
    }
  }
  TORCH_CHECK(ai, "autoinfra ", what, ": not a process group with the autoinfra backend for CPU "
              "tensors");
  return ai;
}

void revoke(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::string& reason) {
  autoinfra_group(pg, "revoke")->revoke(reason);
}

bool revoked(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  return autoinfra_group(pg, "revoked")->revoked();
}

// The fault-tolerance calls, without the GIL (they wait for peers); their
// std::runtime_error (naming the call and the cause) reaches Python as a
// RuntimeError.
template <typename F>
auto nogil(F fn) -> decltype(fn()) {
  pybind11::gil_scoped_release nogil;
  return fn();
}

c10::intrusive_ptr<c10d::ProcessGroup> shrink(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto& r = autoinfra_group(pg, "shrink")->runner();
  return front(nogil([&] { return r.shrink(); }));
}

c10::intrusive_ptr<c10d::ProcessGroup> grow(const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                                            int joiners, double timeout_s) {
  auto& r = autoinfra_group(pg, "grow")->runner();
  return front(nogil([&] { return r.grow(joiners, timeout_s); }));
}

// (joined, the larger group or None): ai_comm_admit on every member.
pybind11::tuple admit(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, double timeout_s) {
  auto& r = autoinfra_group(pg, "admit")->runner();
  int joined = 0;
  auto runner = nogil([&] { return r.admit(timeout_s, &joined); });
  if (!runner) return pybind11::make_tuple(joined, pybind11::none());
  c10::intrusive_ptr<c10d::ProcessGroup> grown = front(std::move(runner));
  return pybind11::make_tuple(joined, pybind11::cast(grown));
}

std::vector<int> failed(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto& r = autoinfra_group(pg, "failed")->runner();
  return nogil([&] { return r.failed(); });
}

std::string join_addr(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto& r = autoinfra_group(pg, "join_addr")->runner();
  return nogil([&] { return r.join_addr(); });
}

c10::intrusive_ptr<c10d::ProcessGroup> join(const std::string& job_addr, double timeout_s) {
  ai_comm_config cfg{};
  cfg.timeout_s = timeout_s;
  cfg.token = job_token();
  cfg.block_waits = 1;  // as create()'s
  poll_us();
  return front(nogil([&] { return CommRunner::join(cfg, job_addr); }));
}

pybind11::dict choice(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::string& coll,
                      size_t bytes) {
  auto* ai = autoinfra_group(pg, "choice");
  ai_coll k;
  TORCH_CHECK(ai_coll_parse(coll.c_str(), &k) == AI_OK, "autoinfra choice: ", ai_last_error());
  ai_choice c;
  {
    pybind11::gil_scoped_release nogil;
    c = ai->choice(k, bytes);
  }
  pybind11::dict d;
  d["algo"] = std::string(c.algo);
  d["chunk_bytes"] = c.chunk_bytes;
  d["channels"] = c.channels;
  d["source"] = std::string(c.source ? c.source : "");
  d["explored"] = c.explored;
  d["explore_s"] = c.explore_s;
  return d;
}

std::string fingerprint(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto* ai = autoinfra_group(pg, "fingerprint");
  pybind11::gil_scoped_release nogil;
  return ai->fingerprint();
}

double capi_allreduce_loop(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, at::Tensor t,
                           int iters) {
  auto& r = autoinfra_group(pg, "capi_allreduce_loop")->runner();
  return nogil([&] { return r.capi_allreduce_loop(t, iters); });
}

uint64_t deferred_calls(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  return autoinfra_group(pg, "deferred_calls")->runner().deferred_calls();
}

int queued_calls(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  return autoinfra_group(pg, "queued_calls")->runner().queued_calls();
}

// The first error that left group's communicator unusable, as
// autoinfra.CommError; None while it works.
pybind11::object failure(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto f = autoinfra_group(pg, "failure")->runner().failure();
  return f ? comm_error_object(*f) : pybind11::none();
}

int join_pending(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto& r = autoinfra_group(pg, "join_pending")->runner();
  return nogil([&] { return r.join_pending(); });
}

}  // namespace
void register_shares(pybind11::module_& m);  // shares_binding.cpp
void register_comm_error(pybind11::module_& m);  // comm_error.cpp
}  // namespace aitorch

PYBIND11_MODULE(_autoinfra_torch2, m) {
  pybind11::module::import("torch.distributed");
  m.doc() = "autoinfra's torch.distributed backend (torch 2 c10d::Backend)";
  m.def("create", &aitorch::create, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout_s"), pybind11::arg("peer_addr") = "",
        "A Backend of autoinfra for CPU tensors, bootstrapped through store.");
  m.def("choice", &aitorch::choice, pybind11::arg("group"), pybind11::arg("coll"),
        pybind11::arg("bytes"), "What auto runs next for coll at bytes (ai_comm_choice).");
  m.def("revoke", &aitorch::revoke, pybind11::arg("group"), pybind11::arg("reason") = "",
        "Every queued and later call on group fails at once, naming reason.");
  m.def("revoked", &aitorch::revoked, pybind11::arg("group"), "Whether group was revoked.");
  m.def("shrink", &aitorch::shrink, pybind11::arg("group"),
        "A group of the survivors (ai_comm_shrink), ranks renumbered in the old order.");
  m.def("grow", &aitorch::grow, pybind11::arg("group"), pybind11::arg("joiners"),
        pybind11::arg("timeout_s"), "The group with `joiners` newcomers (ai_comm_grow).");
  m.def("admit", &aitorch::admit, pybind11::arg("group"), pybind11::arg("timeout_s"),
        "(joined, the group with the newcomers waiting at rank 0's door, or None) "
        "(ai_comm_admit).");
  m.def("failed", &aitorch::failed, pybind11::arg("group"),
        "The ranks the runtime knows failed (ai_comm_failed).");
  m.def("join_addr", &aitorch::join_addr, pybind11::arg("group"),
        "The address newcomers pass to join (ai_comm_join_addr).");
  m.def("join_pending", &aitorch::join_pending, pybind11::arg("group"),
        "Newcomers waiting at the join door, on rank 0 (ai_comm_join_pending).");
  m.def("queued_calls", &aitorch::queued_calls, pybind11::arg("group"),
        "How many of group's calls wait in its progress thread's queue, not started yet.");
  m.def("join", &aitorch::join, pybind11::arg("job_addr"), pybind11::arg("timeout_s"),
        "A newcomer's group in the job at job_addr (ai_comm_join).");
  m.def("fingerprint", &aitorch::fingerprint, pybind11::arg("group"),
        "The communicator's topology fingerprint, hex (ai_comm_fingerprint).");
  m.def("capi_allreduce_loop", &aitorch::capi_allreduce_loop, pybind11::arg("group"),
        pybind11::arg("tensor"), pybind11::arg("iters"),
        "Seconds of iters in-place sum allreduces of tensor through the C API on group's "
        "communicator (bench/torch-overhead's reference).");
  m.def("deferred_calls", &aitorch::deferred_calls, pybind11::arg("group"),
        "How many of group's calls were queued without waking its progress thread, their "
        "caller waiting for each at once (comm_runner.hpp, kWaitStreak).");
  m.def("failure", &aitorch::failure, pybind11::arg("group"),
        "The first error that left group's communicator unusable (autoinfra.CommError), or "
        "None.");
  aitorch::register_shares(m);
  aitorch::register_comm_error(m);
  m.attr("torch_version") = "2";
}

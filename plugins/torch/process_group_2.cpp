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
namespace {

class BackendAutoinfra : public c10d::Backend {
 public:
  explicit BackendAutoinfra(std::unique_ptr<CommRunner> runner)
      : c10d::Backend(runner->rank(), runner->size()), runner_(std::move(runner)) {}

  const std::string getBackendName() const override { return "autoinfra"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& ts,
                                           const c10d::BroadcastOptions& o) override {
    auto t = one(ts, "broadcast");
    int root = static_cast<int>(o.rootRank);
    return post(c10d::OpType::BROADCAST, ts, [r = runner_.get(), t, root]() mutable { r->broadcast(t, root); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& ts,
                                           const c10d::AllreduceOptions& o) override {
    auto t = one(ts, "allreduce");
    Op op = to_op(o.reduceOp, "allreduce");
    return post(c10d::OpType::ALLREDUCE, ts, [r = runner_.get(), t, op]() mutable { r->allreduce(t, op); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& ts, const c10d::AllreduceCoalescedOptions& o) override {
    Op op = to_op(o.reduceOp, "allreduce_coalesced");
    return post(c10d::OpType::ALLREDUCE_COALESCED, ts,
                [r = runner_.get(), ts, op]() mutable { r->allreduce_coalesced(ts, op); });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& ts,
                                        const c10d::ReduceOptions& o) override {
    auto t = one(ts, "reduce");
    Op op = to_op(o.reduceOp, "reduce");
    int root = static_cast<int>(o.rootRank);
    return post(c10d::OpType::REDUCE, ts, [r = runner_.get(), t, op, root]() mutable { r->reduce(t, op, root); });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs,
                                           std::vector<at::Tensor>& ins,
                                           const c10d::AllgatherOptions&) override {
    auto in = one(ins, "allgather");
    TORCH_CHECK(outs.size() == 1, "autoinfra allgather: one output list expected");
    auto out = outs[0];
    return post(c10d::OpType::ALLGATHER, out, [r = runner_.get(), out, in]() mutable { r->allgather(out, in); });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    return post(c10d::OpType::_ALLGATHER_BASE, {out},
                [r = runner_.get(), out, in]() mutable { r->allgather_base(out, in); });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outs,
                                                std::vector<std::vector<at::Tensor>>& ins,
                                                const c10d::ReduceScatterOptions& o) override {
    auto out = one(outs, "reduce_scatter");
    TORCH_CHECK(ins.size() == 1, "autoinfra reduce_scatter: one input list expected");
    Op op = to_op(o.reduceOp, "reduce_scatter");
    auto in = ins[0];
    return post(c10d::OpType::REDUCE_SCATTER, outs,
                [r = runner_.get(), out, in, op]() mutable { r->reduce_scatter(out, in, op); });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    Op op = to_op(o.reduceOp, "_reduce_scatter_base");
    return post(c10d::OpType::_REDUCE_SCATTER_BASE, {out},
                [r = runner_.get(), out, in, op]() mutable { r->reduce_scatter_base(out, in, op); });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                               std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions&) override {
    return post(c10d::OpType::ALLTOALL_BASE, {out},
                [r = runner_.get(), out, in, out_splits, in_splits]() mutable {
                  r->alltoall_base(out, in, out_splits, in_splits);
                });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outs,
                                          std::vector<at::Tensor>& ins,
                                          const c10d::AllToAllOptions&) override {
    return post(c10d::OpType::ALLTOALL, outs,
                [r = runner_.get(), outs, ins]() mutable { r->alltoall(outs, ins); });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outs,
                                        std::vector<at::Tensor>& ins,
                                        const c10d::GatherOptions& o) override {
    auto in = one(ins, "gather");
    int root = static_cast<int>(o.rootRank);
    TORCH_CHECK(getRank() != root || outs.size() == 1,
                "autoinfra gather: the root wants one output list");
    TORCH_CHECK(getRank() == root || outs.empty() || (outs.size() == 1 && outs[0].empty()),
                "autoinfra gather: only the root passes output tensors");
    std::vector<at::Tensor> out = outs.empty() ? std::vector<at::Tensor>() : outs[0];
    return post(c10d::OpType::GATHER, out,
                [r = runner_.get(), out, in, root]() mutable { r->gather(out, in, root); });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outs,
                                         std::vector<std::vector<at::Tensor>>& ins,
                                         const c10d::ScatterOptions& o) override {
    auto out = one(outs, "scatter");
    int root = static_cast<int>(o.rootRank);
    TORCH_CHECK(getRank() != root || ins.size() == 1,
                "autoinfra scatter: the root wants one input list");
    std::vector<at::Tensor> in = ins.empty() ? std::vector<at::Tensor>() : ins[0];
    return post(c10d::OpType::SCATTER, outs,
                [r = runner_.get(), out, in, root]() mutable { r->scatter(out, in, root); });
  }

  // Messages between two ranks match in issue order; tags are not matched.
  // Each request moves on its own once posted (CommRunner::enqueue_p2p).
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& ts, int dst, int) override {
    auto t = one(ts, "send");
    return post_p2p(c10d::OpType::SEND, ts, [r = runner_.get(), t, dst]() { return r->isend(t, dst); });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& ts, int src, int) override {
    auto t = one(ts, "recv");
    return post_p2p(c10d::OpType::RECV, ts,
                    [r = runner_.get(), t, src]() mutable { return r->irecv(t, src); });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return post(c10d::OpType::BARRIER, {}, [r = runner_.get()]() { r->barrier(); });
  }

  void revoke(const std::string& reason) { runner_->revoke(reason); }
  bool revoked() { return runner_->revoked(); }
  CommRunner& runner() { return *runner_; }

  // What `auto` runs next for coll at bytes, asked in issue order.
  ai_choice choice(ai_coll coll, size_t bytes) {
    ai_choice c{};
    auto w = post(c10d::OpType::UNKNOWN, {},
                  [r = runner_.get(), coll, bytes, &c]() { c = r->choice(coll, bytes); });
    w->wait();
    return c;
  }

  // The communicator's topology fingerprint, asked in issue order.
  std::string fingerprint() {
    std::string fp;
    auto w = post(c10d::OpType::UNKNOWN, {}, [r = runner_.get(), &fp]() { fp = r->fingerprint(); });
    w->wait();
    return fp;
  }

 private:
  static at::Tensor one(const std::vector<at::Tensor>& ts, const char* what) {
    TORCH_CHECK(ts.size() == 1, "autoinfra ", what, ": one tensor expected, got ", ts.size());
    return ts[0];
  }

  // Every call is queued and returns before it ran: small ones
  // (comm_runner.hpp, kInlineBytes) without waking the progress thread
  // while it looks out, so that a caller waiting at once runs them
  // itself; large ones so while their caller waits at once (kWaitStreak).
  template <typename F>
  c10::intrusive_ptr<c10d::Work> post(c10d::OpType type, std::vector<at::Tensor> outputs, F fn) {
    size_t bytes = 0;
    for (const auto& t : outputs) bytes += static_cast<size_t>(t.numel()) * t.element_size();
    bool large = bytes > kInlineBytes;
    auto work = c10::make_intrusive<AutoinfraWork>(runner_.get(), getRank(), type,
                                                   std::move(outputs), large);
    if (large) runner_->large_posted();
    work->queued(runner_->enqueue(std::move(fn), [work](std::exception_ptr e) { work->complete(e); },
                                  large && runner_->waits_at_once(), !large));
    work->posted();
    return work;
  }

  template <typename F>
  c10::intrusive_ptr<c10d::Work> post_p2p(c10d::OpType type, std::vector<at::Tensor> outputs,
                                          F fn) {
    auto work = c10::make_intrusive<AutoinfraWork>(runner_.get(), getRank(), type,
                                                   std::move(outputs), false);
    work->queued(runner_->enqueue_p2p(std::move(fn), [work](std::exception_ptr e) { work->complete(e); }));
    return work;
  }

  std::unique_ptr<CommRunner> runner_;
};


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

int join_pending(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto& r = autoinfra_group(pg, "join_pending")->runner();
  return nogil([&] { return r.join_pending(); });
}

}  // namespace
void register_shares(pybind11::module_& m);  // shares_binding.cpp
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
  aitorch::register_shares(m);
  m.attr("torch_version") = "2";
}

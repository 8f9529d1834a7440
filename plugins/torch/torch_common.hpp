// What the torch-version files (process_group_1_13.cpp, process_group_2.cpp)
// share word for word: reduce ops, the Work the progress thread completes,
// the c10d::Store as the C API's key-value store, and the group's
// collectives (AutoinfraGroup, over either torch's base class). Each of those files
// builds into its own module against its own torch, and includes this
// after its torch headers; c10d::Work, c10d::Store and c10d::ReduceOp are
// the same in both torches as far as this uses them.
#pragma once

#include <cctype>
#include <cstring>

#include "comm_runner.hpp"

namespace aitorch {
namespace {

Op to_op(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return Op::Sum;
    case c10d::ReduceOp::PRODUCT: return Op::Prod;
    case c10d::ReduceOp::MIN: return Op::Min;
    case c10d::ReduceOp::MAX: return Op::Max;
    case c10d::ReduceOp::AVG: return Op::Avg;
    default:
      TORCH_CHECK(false, "autoinfra ", what, ": ReduceOp ", static_cast<int>(op.op_),
                  " is not supported (SUM, PRODUCT, MIN, MAX, AVG are)");
  }
  return Op::Sum;
}

// A Work that the progress thread (or its caller, from wait) completes:
// Work's own state (wait, isCompleted, exception) and a Future holding the
// output tensors, which DDP's reducer and comm hooks chain on. The Future
// is made when first asked for: most calls (dist.all_reduce and the like)
// never ask, and making and completing one costs about a microsecond.
class AutoinfraWork : public c10d::Work {
 public:
  AutoinfraWork(CommRunner* runner, int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                bool large)
      : c10d::Work(rank, type), runner_(runner), outputs_(std::move(outputs)), large_(large) {}

  std::vector<at::Tensor> result() override { return outputs_; }

  // A call still queued and next is run here (CommRunner::run_queued).
  // Otherwise poll (yielding) poll_us() before sleeping on Work's condition
  // variable (comm_runner.hpp: 0 by default, the caller sleeps at once).
  // While it waits, the runtime's own waits for this call poll (wait_begin).
  bool wait(std::chrono::milliseconds timeout) override {
    note(true);
    if (done_.load(std::memory_order_acquire)) return c10d::Work::wait(timeout);
    uint64_t ticket = ticket_.exchange(0, std::memory_order_relaxed);
    if (ticket && runner_->on_progress_thread()) {  // a future's callback (run_through)
      runner_->run_through(ticket);
      return c10d::Work::wait(timeout);
    }
    if (ticket && runner_->run_queued(ticket)) return c10d::Work::wait(timeout);
    runner_->expedite();  // it is behind another call, or that one runs
    runner_->wait_begin();
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(poll_us());
    while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    try {
      bool ok = c10d::Work::wait(timeout);
      runner_->wait_end();
      return ok;
    } catch (const c10::Error&) {
      runner_->wait_end();
      // c10d::Work::wait's own "Operation timed out!": the call is still
      // pending. Worded as torch's tests and log scrapers expect.
      if (c10d::Work::isCompleted()) throw;
      std::string op = c10d::opTypeToString(opType_);
      for (auto& ch : op) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      throw CommError(AI_ERR_TIMEOUT, -1,
                      "autoinfra " + op + " on rank " + std::to_string(rank_) +
                          ": Timed out after " + std::to_string(timeout.count()) +
                          " ms in wait(); the call is still pending");
    } catch (...) {
      runner_->wait_end();
      throw;
    }
  }

  // The sender of a completed receive (recv's src, recvAnysource's
  // match); torch's own error otherwise.
  int sourceRank() const override {
    int s = source_.load(std::memory_order_acquire);
    return s >= 0 ? s : c10d::Work::sourceRank();
  }
  void set_source(int rank) { source_.store(rank, std::memory_order_release); }

  // Polled: the caller does not wait at once.
  bool isCompleted() override {
    note(false);
    return c10d::Work::isCompleted();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    note(false);
    // Asked for in a future's callback on the progress thread, to be waited
    // for (PowerSGD's hooks): the call runs now (run_through), since that
    // thread could not run it while the callback waits.
    uint64_t ticket = ticket_.load(std::memory_order_relaxed);
    if (ticket && !done_.load(std::memory_order_acquire) && runner_->on_progress_thread())
      runner_->run_through(ticket);
    std::lock_guard<std::mutex> l(future_mu_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(list_type());
      if (finished_) settle(future_, error_);
    }
    return future_;
  }

  // The call was queued with this ticket (CommRunner::run_queued).
  void queued(uint64_t ticket) { ticket_.store(ticket, std::memory_order_relaxed); }
  // post() returns it now: when a large call's wait counts as at once.
  void posted() {
    if (large_) posted_s_ = ai_now();
  }

  // The future first: whoever wait() releases may ask for its value.
  void complete(std::exception_ptr e) {
    c10::intrusive_ptr<c10::ivalue::Future> f;
    {
      std::lock_guard<std::mutex> l(future_mu_);
      finished_ = true;
      error_ = e;
      f = future_;
    }
    if (f) settle(f, e);  // outside the lock: it runs the future's callbacks
    finish(e);
    done_.store(true, std::memory_order_release);
  }

 private:
  static const c10::TypePtr& list_type() {
    static const c10::TypePtr t = c10::ListType::create(c10::TensorType::get());
    return t;
  }
  void settle(const c10::intrusive_ptr<c10::ivalue::Future>& f, std::exception_ptr e) {
    if (e)
      f->setError(e);
    else
      f->markCompleted(c10::IValue(outputs_));
  }

  // A call's first wait, poll or future: a large call's counts in the
  // runner's streak (kWaitStreak in comm_runner.hpp); anything but a wait
  // at once starts a deferred call now.
  void note(bool waited) {
    if (noted_.exchange(true, std::memory_order_relaxed)) return;
    if (!large_) {
      if (!waited) runner_->expedite();  // a small call deferred (kInlineBytes)
      return;
    }
    if (waited) {
      runner_->large_waited(ai_now() - posted_s_ < kAtOnceS);
    } else {
      runner_->large_async();
      runner_->expedite();
    }
  }

  CommRunner* runner_;  // outlives every call it has not completed
  std::vector<at::Tensor> outputs_;
  const bool large_;           // above kInlineBytes
  double posted_s_ = 0;        // ai_now() when post() returned it
  std::atomic<bool> noted_{false};
  std::mutex future_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // made by getFuture
  bool finished_ = false;                           // under future_mu_
  std::exception_ptr error_;                        // under future_mu_
  std::atomic<bool> done_{false};
  std::atomic<uint64_t> ticket_{0};  // 0: wait() tried it (or never queued)
  std::atomic<int> source_{-1};      // set_source
};

// c10d::Store as the C API's key-value store. The store's exception text
// is kept for the creation error.
struct StoreAdapter {
  c10::intrusive_ptr<c10d::Store> store;
  std::string error;

  static ai_status_t set(void* ctx, const char* key, const void* value, size_t len) {
    auto* a = static_cast<StoreAdapter*>(ctx);
    try {
      const auto* p = static_cast<const uint8_t*>(value);
      a->store->set(key, std::vector<uint8_t>(p, p + len));
      return AI_OK;
    } catch (const std::exception& e) {
      a->error = e.what();
      return AI_ERR_IO;
    }
  }

  static ai_status_t get(void* ctx, const char* key, void* value, size_t len, double timeout_s) {
    auto* a = static_cast<StoreAdapter*>(ctx);
    try {
      a->store->wait({key}, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000) + 1));
    } catch (const std::exception& e) {
      a->error = e.what();
      return AI_ERR_TIMEOUT;
    }
    try {
      std::vector<uint8_t> v = a->store->get(key);
      if (v.size() != len) return AI_ERR_PROTO;
      std::memcpy(value, v.data(), len);
      return AI_OK;
    } catch (const std::exception& e) {
      a->error = e.what();
      return AI_ERR_IO;
    }
  }
};

// The collectives of a group over its CommRunner, the same for torch 1.13's
// c10d::ProcessGroup and torch 2's c10d::Backend (Base): each torch's file
// names its class from this.
template <class Base>
class AutoinfraGroup : public Base {
 public:
  explicit AutoinfraGroup(std::unique_ptr<CommRunner> runner)
      : Base(runner->rank(), runner->size()), runner_(std::move(runner)) {}

  const std::string getBackendName() const override { return "autoinfra"; }

  // The collectives this rank issued on the group (what gloo counts): the
  // same on every rank of a correct program, so torch's debug wrapper
  // (TORCH_DISTRIBUTED_DEBUG=DETAIL), which checks them before each
  // collective, works over this backend. Point-to-point calls, which only
  // some ranks issue, are not counted.
  void setSequenceNumberForGroup() override { seq_.store(0, std::memory_order_relaxed); }
  uint64_t getSequenceNumberForGroup() override { return seq_.load(std::memory_order_relaxed); }

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

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outs,
                                                     std::vector<at::Tensor>& ins,
                                                     const c10d::AllgatherOptions&) override {
    std::vector<at::Tensor> all;
    for (const auto& list : outs) all.insert(all.end(), list.begin(), list.end());
    return post(c10d::OpType::ALLGATHER_COALESCED, all,
                [r = runner_.get(), outs, ins]() mutable { r->allgather_coalesced(outs, ins); });
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
    TORCH_CHECK(this->getRank() != root || outs.size() == 1,
                "autoinfra gather: the root wants one output list");
    TORCH_CHECK(this->getRank() == root || outs.empty() || (outs.size() == 1 && outs[0].empty()),
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
    TORCH_CHECK(this->getRank() != root || ins.size() == 1,
                "autoinfra scatter: the root wants one input list");
    std::vector<at::Tensor> in = ins.empty() ? std::vector<at::Tensor>() : ins[0];
    return post(c10d::OpType::SCATTER, outs,
                [r = runner_.get(), out, in, root]() mutable { r->scatter(out, in, root); });
  }

  // Messages between two ranks match in issue order; tags are not matched.
  // Each request moves on its own once posted (CommRunner::enqueue_p2p).
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& ts, int dst, int) override {
    auto t = one(ts, "send");
    return post_p2p(c10d::OpType::SEND, ts,
                    [r = runner_.get(), t, dst](AutoinfraWork*) { return r->isend(t, dst); });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& ts, int src, int) override {
    auto t = one(ts, "recv");
    return post_p2p(c10d::OpType::RECV, ts, [r = runner_.get(), t, src](AutoinfraWork* w) mutable {
      w->set_source(src);
      return r->irecv(t, src);
    });
  }

  // dist.recv / dist.irecv without src: the first message that reaches
  // this rank from any rank with no receive posted for it (ai_irecv_any);
  // the Work's sourceRank() names the sender.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& ts, int) override {
    auto t = one(ts, "recvAnysource");
    return post_p2p(c10d::OpType::RECVANYSOURCE, ts, [r = runner_.get(), t](AutoinfraWork* w) mutable {
      return r->irecv_any(t, [w](int src) { w->set_source(src); });
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return post(c10d::OpType::BARRIER, {}, [r = runner_.get()]() { r->barrier(); });
  }

  // As gloo's: every other rank sends rank 0 a byte and waits for its
  // answer; rank 0 answers once all arrived within the timeout, else names
  // the first that did not (every one with waitAllRanks). The requests of
  // ranks that did not arrive stay posted.
  void monitoredBarrier(const c10d::BarrierOptions& o, bool waitAllRanks) override {
    using ms = std::chrono::milliseconds;
    // torch's unset timeout is negative; zero is a timeout that has run out.
    ms timeout = o.timeout.count() >= 0 ? o.timeout : ms(1800 * 1000);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    // Work::wait with 0 ms waits forever: at least 1 ms.
    auto left = [&] {
      auto l = std::chrono::duration_cast<ms>(deadline - std::chrono::steady_clock::now());
      return l.count() > 0 ? l : ms(1);
    };
    auto byte = [] { return std::vector<at::Tensor>{at::zeros({1}, at::kByte)}; };
    int me = this->getRank(), n = this->getSize();
    if (me != 0) {
      auto out = byte(), in = byte();
      auto ws = send(out, 0, 0);
      auto wr = recv(in, 0, 0);
      try {
        ws->wait(left());
        wr->wait(left());
      } catch (const std::exception& e) {
        TORCH_CHECK(false, "Rank ", me, " successfully reached monitoredBarrier, but received "
                    "errors while waiting for send/recv from rank 0. Please check rank 0 logs "
                    "for faulty rank. (autoinfra: ", e.what(), ")");
      }
      return;
    }
    std::vector<std::vector<at::Tensor>> bufs(n);
    std::vector<c10::intrusive_ptr<c10d::Work>> works(n);
    for (int r = 1; r < n; r++) {
      bufs[r] = byte();
      works[r] = recv(bufs[r], r, 0);
    }
    std::string failed;
    for (int r = 1; r < n; r++) {
      // As gloo: without waitAllRanks, rank 0 gives up once its time is
      // spent, naming the ranks it heard from and those it did not.
      if (!waitAllRanks && std::chrono::steady_clock::now() >= deadline) {
        std::string heard, not_yet;
        for (int q = 1; q < n; q++) {
          std::string& list = q < r ? heard : not_yet;
          list += (list.empty() ? "" : ", ") + std::to_string(q);
        }
        TORCH_CHECK(false, "Rank 0 timed out in monitoredBarrier after ", timeout.count(),
                    " ms. Ranks that arrived: [", heard, "]; not yet: [", not_yet, "]");
      }
      try {
        works[r]->wait(left());
      } catch (const std::exception&) {
        TORCH_CHECK(waitAllRanks, "Rank ", r, " failed to pass monitoredBarrier in ",
                    timeout.count(), " ms");
        failed += (failed.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    TORCH_CHECK(failed.empty(), "Ranks ", failed, " failed to pass monitoredBarrier in ",
                timeout.count(), " ms");
    for (int r = 1; r < n; r++) works[r] = send(bufs[r], r, 0);
    for (int r = 1; r < n; r++) works[r]->wait(left());
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
    if (type != c10d::OpType::UNKNOWN) seq_.fetch_add(1, std::memory_order_relaxed);
    size_t bytes = 0;
    for (const auto& t : outputs) bytes += static_cast<size_t>(t.numel()) * t.element_size();
    bool large = bytes > kInlineBytes;
    auto work = c10::make_intrusive<AutoinfraWork>(runner_.get(), this->getRank(), type,
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
    auto work = c10::make_intrusive<AutoinfraWork>(runner_.get(), this->getRank(), type,
                                                   std::move(outputs), false);
    // fn gets the Work (kept alive by the completion until after it ran).
    AutoinfraWork* w = work.get();
    work->queued(runner_->enqueue_p2p([fn = std::move(fn), w]() mutable { return fn(w); },
                                      [work](std::exception_ptr e) { work->complete(e); }));
    return work;
  }

  std::unique_ptr<CommRunner> runner_;
  std::atomic<uint64_t> seq_{0};
};

}  // namespace
}  // namespace aitorch

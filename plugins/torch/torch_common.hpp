// What the torch-version files (process_group_1_13.cpp, process_group_2.cpp)
// share word for word: reduce ops, the Work the progress thread completes,
// and the c10d::Store as the C API's key-value store. Each of those files
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
      throw std::runtime_error("autoinfra " + op + " on rank " +
                               std::to_string(rank_) + ": Timed out after " +
                               std::to_string(timeout.count()) +
                               " ms in wait(); the call is still pending");
    } catch (...) {
      runner_->wait_end();
      throw;
    }
  }

  // Polled: the caller does not wait at once.
  bool isCompleted() override {
    note(false);
    return c10d::Work::isCompleted();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    note(false);
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

}  // namespace
}  // namespace aitorch

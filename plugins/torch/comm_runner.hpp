// The torch backend's core, independent of the c10d class hierarchy of a
// torch version: one communicator (include/autoinfra.h) with one progress
// thread that runs the calls queued on it in issue order, and every
// collective written over at::Tensor. The version-specific file
// (process_group_1_13.cpp) only adapts c10d's ProcessGroup, Work and Store
// to this.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "autoinfra.h"
#include "autoinfra/introspect.h"
}

namespace aitorch {

// A call of the communicator failed: the runtime's status (ai_status_t),
// the rank that broke the communicator where the runtime knows it
// (ai_comm_failure_peer, else -1), and the message (the call, the cause,
// ai_last_error).
// The module turns it into autoinfra.CommError (comm_error.cpp); through
// torch's own error handling (autograd under DDP) it arrives as a plain
// RuntimeError, and CommRunner::failure() keeps it for the caller to ask.
class CommError : public std::runtime_error {
 public:
  CommError(ai_status_t status, int peer, const std::string& msg)
      : std::runtime_error(msg), status_(status), peer_(peer) {}
  ai_status_t status() const { return status_; }
  int peer() const { return peer_; }

 private:
  ai_status_t status_;
  int peer_;
};

// The runtime's reduction for a c10d op name ("sum", "avg", ...): the
// version file maps c10d::ReduceOp to one of these.
enum class Op { Sum, Prod, Min, Max, Avg };

// How long a waiting thread (the progress thread between calls, a caller
// in Work::wait) polls, yielding, before it sleeps: AUTOINFRA_TORCH_POLL_US,
// default 0. Under DDP the communication overlaps the backward pass on the
// same cores, and a polling thread takes cycles from that compute; a
// benchmark loop of small calls may want a few hundred us.
int poll_us();
// Calls whose tensors hold at most this many bytes are queued without
// waking the progress thread while it looks out (defer_small): a caller
// that waits at once runs the call itself (run_queued), since its time
// would be the hand-off and nothing would overlap it; a call nobody waits
// for starts within kLookoutS. Nothing runs on the caller's thread before
// the call returns: an async_op=True call must return before its peers
// arrive. DDP's gradient buckets (25 MiB by default) stay asynchronous.
constexpr size_t kInlineBytes = 64 << 10;
// While point-to-point requests are pending, the progress thread moves
// them for at most this long at a time before it looks at its queue for
// calls posted since (CommRunner::loop).
constexpr double kP2pSliceS = 1e-3;
// Requests still pending when the runner is destroyed get this long to
// finish, then fail (a receive nobody sends to, as a failed
// monitored_barrier leaves, must not hold the process for the timeout).
constexpr double kStopGraceS = 1.0;
// A larger call is queued, but while its caller waits for each such call
// at once (dist.all_reduce without async_op: the last kWaitStreak calls
// were waited for within kAtOnceS of their return, and nobody asked for
// their futures) the progress thread is not woken for it: the caller's
// wait takes it back (run_queued), and with ranks sharing cores a wake per
// call preempts a rank in the middle of a collective. The progress thread
// then looks at the queue every kLookoutS instead, so a call that is not
// waited for still starts within kLookoutS; asking for its future (DDP's
// buckets, comm hooks), polling it, a later call or a later wait starts
// it at once and ends the streak. After kTickIdleS without such a call the
// progress thread sleeps until woken again.
constexpr int kWaitStreak = 3;
constexpr double kAtOnceS = 100e-6;
constexpr double kLookoutS = 1e-3;
constexpr double kTickIdleS = 0.1;

class CommRunner {
 public:
  // Takes ownership of comm. Starts the progress thread.
  explicit CommRunner(ai_comm* comm);
  // Runs what is queued, stops the thread, destroys the communicator.
  ~CommRunner();
  CommRunner(const CommRunner&) = delete;
  CommRunner& operator=(const CommRunner&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Queue fn for the progress thread; done(nullptr) or done(exception)
  // follows on that thread once fn returned or threw. Returns the call's
  // ticket for run_queued. defer: the caller waits at once (kWaitStreak):
  // the progress thread is not woken, if it looks out anyway and nothing
  // runs or is queued.
  // small: a call of at most kInlineBytes (defer_small above).
  uint64_t enqueue(std::function<void()> fn, std::function<void(std::exception_ptr)> done,
                   bool defer = false, bool small = false);
  // A point-to-point request posted on the progress thread (post), moved
  // there beside the requests posted before and after it, each completing
  // on its own (done, after `after` ran): a receive posted before a send
  // never holds the send back. A later call that is not point to point
  // waits until they are all done (its messages queue behind theirs).
  struct P2pPost {
    ai_p2p* req = nullptr;
    std::function<void()> after;  // on completion, before req is freed: write back; holds the tensors
  };
  uint64_t enqueue_p2p(std::function<P2pPost()> post, std::function<void(std::exception_ptr)> done);
  // A caller that waits for a queued call at once (dist.all_reduce of a
  // large tensor) runs it itself, fn and done, if it is the next call and
  // the progress thread has not taken it yet: the hand-off to that thread
  // and the wake-up back each wait for a core. Returns false otherwise.
  bool run_queued(uint64_t ticket);
  // Whether the calling thread is the progress thread: a future's callback
  // (DDP's comm hooks chain on futures) runs there, when the call before
  // completes.
  bool on_progress_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // On the progress thread only: run every queued call up to and including
  // ticket's, in queue order, here and now (a point-to-point request is
  // posted, then every pending request moved until done). A callback that
  // issues a call and waits for its future (PowerSGD's hooks do, each
  // allreduce in the callback of the one before) would otherwise wait for
  // the very thread it holds.
  void run_through(uint64_t ticket);
  // The streak of kWaitStreak's comment. large_posted: a call above
  // kInlineBytes was posted; large_waited: one was waited for, at once or
  // not; large_async: its future was asked for or it was polled.
  // waits_at_once: whether the caller's next such call may be deferred.
  void large_posted();
  void large_waited(bool at_once);
  void large_async() { streak_.store(0, std::memory_order_relaxed); }
  bool waits_at_once() const { return streak_.load(std::memory_order_relaxed) >= kWaitStreak; }
  // Every deferred call starts now (someone asked for its future, polled
  // it, or waits for it behind another call).
  void expedite();
  // How many calls were queued deferred so far.
  uint64_t deferred_calls();
  // How many queued calls have not started yet.
  int queued_calls() const { return queued_.load(std::memory_order_acquire); }
  // A thread starts (begin) or stops (end) waiting for a queued call's
  // result. While one waits, or its caller runs a call (run_queued), nothing of this process
  // computes beside the call, so the runtime's waits poll before they sleep
  // (a wake-up from sleep waits for a core); otherwise they block at once,
  // leaving the cores to the compute the call overlaps (ai_comm_set_block_waits).
  void wait_begin();
  void wait_end();

  // Every queued call, and every call issued later, completes at once with
  // an error carrying reason, without reaching the communicator, and the
  // communicator is revoked (ai_comm_revoke: every rank's pending and later
  // calls fail): a job that replaces it after a failure never waits for
  // work on it. The runtime's revoke runs on the thread that owns the
  // communicator at that moment: at once when it is idle, else when the
  // running call returns (which the other ranks' revoke or failure makes
  // fail in milliseconds, or the timeout).
  void revoke(const std::string& reason);
  bool revoked();
  // The first error that left the communicator unusable (it failed, or was
  // revoked), as thrown; null while it works. What a caller asks when the
  // error reached it untyped.
  std::shared_ptr<const CommError> failure();

  // The fault-tolerance calls of include/autoinfra.h, run while no call is
  // (each waits for the running one): a new runner on the new communicator.
  // shrink: the survivors' (after revoke or a failure); grow: the members'
  // and joiners' newcomers' (a healthy communicator); failed: the ranks the
  // runtime knows failed (agreed after a shrink); join_addr: what
  // newcomers pass to join(); join_pending: the newcomers waiting at rank
  // 0's join door (0 on the other ranks).
  std::unique_ptr<CommRunner> shrink();
  std::unique_ptr<CommRunner> grow(int joiners, double timeout_s);
  // ai_comm_admit: the newcomers waiting at rank 0's door, admitted on
  // every member; null (and *joined 0) when nobody waited.
  std::unique_ptr<CommRunner> admit(double timeout_s, int* joined);
  std::vector<int> failed();
  std::string join_addr();
  int join_pending();
  // A newcomer: the communicator ai_comm_join makes with cfg at job_addr.
  static std::unique_ptr<CommRunner> join(const ai_comm_config& cfg, const std::string& job_addr);

  // Collectives, run on the progress thread (they block until done and
  // throw std::runtime_error naming the peer and cause on failure).
  // A sparse COO tensor goes to allreduce_sparse (SUM only).
  void allreduce(at::Tensor& t, Op op);
  void allreduce_sparse(at::Tensor& t, Op op);
  void allreduce_coalesced(std::vector<at::Tensor>& ts, Op op);
  void broadcast(at::Tensor& t, int root);
  void reduce(at::Tensor& t, Op op, int root);
  void allgather(std::vector<at::Tensor>& outs, const at::Tensor& in);
  void allgather_base(at::Tensor& out, const at::Tensor& in);
  // outs[r][i] gets rank r's ins[i] (any dtypes, one call).
  void allgather_coalesced(std::vector<std::vector<at::Tensor>>& outs,
                           const std::vector<at::Tensor>& ins);
  void reduce_scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, Op op);
  void reduce_scatter_base(at::Tensor& out, const at::Tensor& in, Op op);
  // Empty split vectors: equal blocks along dim 0.
  void alltoall_base(at::Tensor& out, const at::Tensor& in, const std::vector<int64_t>& out_splits,
                     const std::vector<int64_t>& in_splits);
  void alltoall(std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins);
  void gather(std::vector<at::Tensor>& outs, const at::Tensor& in, int root);
  void scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, int root);
  // Post without waiting (enqueue_p2p).
  P2pPost isend(const at::Tensor& t, int dst);
  P2pPost irecv(at::Tensor& t, int src);
  // A receive from whichever rank's message arrives first (ai_irecv_any);
  // source(rank) is called with its sender when it completes.
  P2pPost irecv_any(at::Tensor& t, std::function<void(int)> source);
  void barrier();
  // ai_comm_choice, on the progress thread (the learner is not shared).
  ai_choice choice(ai_coll coll, size_t bytes);
  // ai_comm_fingerprint (hex), on the progress thread.
  std::string fingerprint();
  // The reference of bench/torch-overhead: iters in-place sum allreduces
  // of t (contiguous) straight through the C API on this communicator, on
  // the calling thread once the runner is idle, the runtime's waits
  // polling as under `autoinfra bench`. Returns their seconds.
  double capi_allreduce_loop(at::Tensor& t, int iters);

 private:
  void loop();
  // Run fn on this thread while no call runs and nothing is queued (then
  // the communicator is this thread's).
  void exclusive(const std::function<void()>& fn);
  // Run fn as the communicator's owner (running_ set by the caller): its
  // exception, if any; then a pending revoke, and the communicator freed.
  template <typename F>
  std::exception_ptr owned(F& fn) {
    std::exception_ptr e;
    try {
      fn();
    } catch (...) {
      e = std::current_exception();
    }
    release();
    return e;
  }
  // The progress thread's pending point-to-point requests (p2p_): move
  // them for at most max_s (0: until all are done), completing those that
  // finish; a failure fails them all. fail_p2p: fail them all with msg.
  void progress_p2p(double max_s);
  void fail_p2p(std::exception_ptr e);
  // The owner gives the communicator back: a revoke that came meanwhile
  // runs first; then the threads waiting for it are woken.
  void release();
  // AI_OK or throw: the message names the call and carries ai_last_error()
  // (the peer and the cause); after the communicator failed, the first
  // failure's message.
  void check(ai_status_t st, const char* what);
  // Pairwise exchange of byte blocks: sbytes[r] at sptr[r] to rank r,
  // rbytes[r] into rptr[r] from rank r (its own block copied).
  void exchange(const char* what, const std::vector<const char*>& sptr,
                const std::vector<size_t>& sbytes, const std::vector<char*>& rptr,
                const std::vector<size_t>& rbytes);

  ai_comm* comm_;
  int rank_, size_;
  std::string first_error_;

  struct Job {
    uint64_t ticket;
    std::function<void()> fn;
    std::function<void(std::exception_ptr)> done;
    double not_before;  // ai_now() before which the progress thread leaves it (deferred)
    std::function<P2pPost()> p2p;  // set: a point-to-point request to post (fn empty)
  };
  // Run one job taken from the queue on this thread (loop, run_through):
  // a send/recv is posted beside the pending ones, a call runs unless the
  // communicator was revoked.
  void run_job(Job& job, std::string revoked);
  struct Pending {
    P2pPost post;
    std::function<void(std::exception_ptr)> done;
  };
  // The progress thread's only: posted point-to-point requests not done.
  // While there are any, it owns the communicator (running_).
  std::vector<Pending> p2p_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::atomic<int> queued_{0};
  uint64_t tickets_ = 0;  // under mu_: the last ticket enqueue gave
  bool stop_ = false;
  double stop_s_ = 0;  // under mu_: ai_now() when stop_ was set
  std::string revoked_;  // the reason, once revoked
  std::shared_ptr<const CommError> failure_;  // under mu_: failure()'s
  // Keep e as failure() unless one is kept (takes mu_).
  void keep_failure(const CommError& e);
  bool comm_revoked_ = false;  // ai_comm_revoke was called
  bool running_ = false;  // a call runs (progress thread, run_queued) or requests are pending
  bool inline_ = false;   // the running call runs on its caller's thread (run_queued)
  bool loop_owns_ = false;  // the progress thread set running_ (loop, run_through)
  int waiters_ = 0;       // threads in wait_begin..wait_end
  std::atomic<int> streak_{0};           // large calls in a row waited for at once
  std::atomic<bool> last_waited_{true};  // the last large call was waited for
  bool looking_out_ = false;  // under mu_: the progress thread sleeps at most kLookoutS
  double last_defer_ = -1e9;  // under mu_: ai_now() of the last enqueue(defer)
  double last_small_ = -1e9;  // under mu_: ai_now() of the last enqueue(small)
  uint64_t deferred_ = 0;     // under mu_: calls queued deferred
  int exclusive_waiters_ = 0;  // threads in exclusive() waiting for the runner to be idle
  // Under mu_: the runtime's wait mode for inline_ and waiters_.
  void set_wait_mode();
  // Under mu_: every deferred call may start now; whether there was one.
  bool undefer();
  std::thread thread_;
};

}  // namespace aitorch

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
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "autoinfra.h"
}

namespace aitorch {

// The runtime's reduction for a c10d op name ("sum", "avg", ...): the
// version file maps c10d::ReduceOp to one of these.
enum class Op { Sum, Prod, Min, Max, Avg };

// How long a waiting thread (the progress thread between calls, a caller
// in Work::wait) polls, yielding, before it sleeps: AUTOINFRA_TORCH_POLL_US,
// default 0. Under DDP the communication overlaps the backward pass on the
// same cores, and a polling thread takes cycles from that compute; a
// benchmark loop of small calls may want a few hundred us.
int poll_us();
// Calls whose tensors hold at most this many bytes run on the caller's
// thread when the progress thread is idle (CommRunner::run_inline): their
// time is the hand-off, and nothing would overlap them. DDP's gradient
// buckets (25 MiB by default) stay asynchronous, overlapping backward.
constexpr size_t kInlineBytes = 64 << 10;

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
  // follows on that thread once fn returned or threw.
  void enqueue(std::function<void()> fn, std::function<void(std::exception_ptr)> done);
  // Run fn and done on the calling thread, if nothing is queued or running
  // (issue order holds: every later call comes after it). Returns false,
  // having run nothing, otherwise. A small call waited for at once costs
  // two thread hand-offs through the progress thread; with ranks sharing
  // cores each is a wait for a core.
  bool run_inline(const std::function<void()>& fn,
                  const std::function<void(std::exception_ptr)>& done);

  // Collectives, run on the progress thread (they block until done and
  // throw std::runtime_error naming the peer and cause on failure).
  void allreduce(at::Tensor& t, Op op);
  void allreduce_coalesced(std::vector<at::Tensor>& ts, Op op);
  void broadcast(at::Tensor& t, int root);
  void reduce(at::Tensor& t, Op op, int root);
  void allgather(std::vector<at::Tensor>& outs, const at::Tensor& in);
  void allgather_base(at::Tensor& out, const at::Tensor& in);
  void reduce_scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, Op op);
  void reduce_scatter_base(at::Tensor& out, const at::Tensor& in, Op op);
  // Empty split vectors: equal blocks along dim 0.
  void alltoall_base(at::Tensor& out, const at::Tensor& in, const std::vector<int64_t>& out_splits,
                     const std::vector<int64_t>& in_splits);
  void alltoall(std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins);
  void gather(std::vector<at::Tensor>& outs, const at::Tensor& in, int root);
  void scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, int root);
  void send(const at::Tensor& t, int dst);
  void recv(at::Tensor& t, int src);
  void barrier();
  // ai_comm_choice, on the progress thread (the learner is not shared).
  ai_choice choice(ai_coll coll, size_t bytes);
  // ai_comm_fingerprint (hex), on the progress thread.
  std::string fingerprint();

 private:
  void loop();
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
    std::function<void()> fn;
    std::function<void(std::exception_ptr)> done;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::atomic<int> queued_{0};
  bool stop_ = false;
  bool running_ = false;  // a call is running (progress thread or inline)
  std::thread thread_;
};

}  // namespace aitorch

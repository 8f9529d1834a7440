// CommRunner: the progress thread and the collectives over at::Tensor
// (comm_runner.hpp). Data movement (broadcast, gathers, alltoall, send)
// moves bytes, so it serves every dtype; reductions map the tensor's dtype
// to the runtime's and refuse the rest by name.
#include "comm_runner.hpp"

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace aitorch {

namespace {

const char* const kReducible = "float32, float64, float16, bfloat16, int32, int64, uint8";

ai_dtype reduce_dtype(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return AI_F32;
    case at::kDouble: return AI_F64;
    case at::kHalf: return AI_F16;
    case at::kBFloat16: return AI_BF16;
    case at::kInt: return AI_I32;
    case at::kLong: return AI_I64;
    case at::kByte: return AI_U8;
    default:
      throw std::runtime_error(std::string("autoinfra ") + what + ": dtype " +
                               c10::toString(t.scalar_type()) +
                               " has no reduction in the runtime (supported: " + kReducible + ")");
  }
}

ai_op to_ai(Op op) {
  switch (op) {
    case Op::Sum: return AI_SUM;
    case Op::Prod: return AI_PROD;
    case Op::Min: return AI_MIN;
    case Op::Max: return AI_MAX;
    case Op::Avg: return AI_AVG;
  }
  return AI_SUM;
}

// The message is put together only when the check fails: these checks
// run on every call.
template <typename... Why>
void need(bool ok, const char* what, const Why&... why) {
  if (!ok) throw std::runtime_error(c10::str("autoinfra ", what, ": ", why...));
}

void check_tensor(const at::Tensor& t, const char* what) {
  need(t.defined(), what, "undefined tensor");
  need(t.device().is_cpu(), what, "tensor on ", t.device(), "; the backend serves CPU tensors");
  need(t.layout() == at::kStrided, what, "sparse tensors are not supported");
}

size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// A contiguous tensor holding t's data: t itself, or a copy that
// write_back() copies into t after the call.
struct Staged {
  at::Tensor& orig;
  at::Tensor buf;
  Staged(at::Tensor& t, const char* what) : orig(t) {
    check_tensor(t, what);
    buf = t.is_contiguous() ? t : t.contiguous();
  }
  void* data() { return buf.data_ptr(); }
  void write_back() {
    if (!buf.is_same(orig)) orig.copy_(buf);
  }
};

at::Tensor contiguous_in(const at::Tensor& t, const char* what) {
  check_tensor(t, what);
  return t.contiguous();
}

// The tensors flattened into one contiguous buffer (same dtype required).
at::Tensor flatten(const std::vector<at::Tensor>& ts, const char* what) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const auto& t : ts) {
    check_tensor(t, what);
    need(t.scalar_type() == ts[0].scalar_type(), what, "tensors of different dtypes");
    flat.push_back(t.reshape({-1}));
  }
  return at::cat(flat);
}

// Copy consecutive pieces of flat back into ts.
void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& ts) {
  int64_t off = 0;
  for (auto& t : ts) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

}  // namespace

int poll_us() {
  static const int us = [] {
    const char* v = std::getenv("AUTOINFRA_TORCH_POLL_US");
    if (!v || !*v) return 0;
    char* end = nullptr;
    long x = std::strtol(v, &end, 10);
    if (*end || x < 0 || x > 1000000)
      throw std::runtime_error(std::string("autoinfra: AUTOINFRA_TORCH_POLL_US='") + v +
                               "': want microseconds, 0 to 1000000");
    return static_cast<int>(x);
  }();
  return us;
}

CommRunner::CommRunner(ai_comm* comm)
    : comm_(comm), rank_(ai_comm_rank(comm)), size_(ai_comm_size(comm)) {
  thread_ = std::thread([this] { loop(); });
}

CommRunner::~CommRunner() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    stop_s_ = ai_now();
  }
  cv_.notify_all();
  thread_.join();
  ai_comm_destroy(comm_);
}

uint64_t CommRunner::enqueue(std::function<void()> fn, std::function<void(std::exception_ptr)> done,
                             bool defer, bool small) {
  uint64_t ticket;
  bool deferred;
  {
    std::lock_guard<std::mutex> l(mu_);
    double now = ai_now();
    if (defer) last_defer_ = now;
    if (small) last_small_ = now;
    deferred = (defer || small) && looking_out_ && !running_ && queue_.empty();
    deferred_ += deferred;
    // A call behind others: its caller did not wait for them, so none of
    // them is taken back; they start now.
    undefer();
    ticket = ++tickets_;
    queue_.push_back(Job{ticket, std::move(fn), std::move(done), deferred ? now + kLookoutS : 0, {}});
    queued_.fetch_add(1, std::memory_order_release);
  }
  if (!deferred) cv_.notify_all();
  return ticket;
}

uint64_t CommRunner::enqueue_p2p(std::function<P2pPost()> post,
                                 std::function<void(std::exception_ptr)> done) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> l(mu_);
    undefer();
    ticket = ++tickets_;
    queue_.push_back(Job{ticket, {}, std::move(done), 0, std::move(post)});
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  return ticket;
}

uint64_t CommRunner::deferred_calls() {
  std::lock_guard<std::mutex> l(mu_);
  return deferred_;
}

bool CommRunner::undefer() {
  bool any = false;
  for (auto& j : queue_)
    if (j.not_before > 0) j.not_before = 0, any = true;
  return any;
}

void CommRunner::expedite() {
  bool any;
  {
    std::lock_guard<std::mutex> l(mu_);
    any = undefer();
  }
  if (any) cv_.notify_all();
}

bool CommRunner::run_queued(uint64_t ticket) {
  Job job;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (running_ || queue_.empty() || queue_.front().ticket != ticket || queue_.front().p2p)
      return false;
    job = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    running_ = inline_ = true;
    set_wait_mode();
  }
  job.done(owned(job.fn));
  return true;
}

void CommRunner::release() {
  std::unique_lock<std::mutex> l(mu_);
  if (!revoked_.empty() && !comm_revoked_) {
    // revoke() came while the call ran: the owner revokes (ai_comm_revoke
    // sends to every peer, so not under the lock).
    comm_revoked_ = true;
    l.unlock();
    ai_comm_revoke(comm_);
    l.lock();
  }
  running_ = inline_ = loop_owns_ = false;
  set_wait_mode();
  // The progress thread sleeps until a call is queued and exclusive() until
  // the runner is idle: wake them only if one was queued or waits, since
  // waking after every call its caller ran would cost each a context switch.
  bool wake = !queue_.empty() || stop_ || exclusive_waiters_ > 0;
  l.unlock();
  if (wake) cv_.notify_all();
}

namespace {
std::exception_ptr revoked_error(const std::string& msg) {
  return std::make_exception_ptr(CommError(AI_ERR_REVOKED, -1, msg));
}
}  // namespace

void CommRunner::run_through(uint64_t ticket) {
  if (!on_progress_thread()) return;
  for (;;) {
    Job job;
    std::string revoked;
    {
      std::unique_lock<std::mutex> l(mu_);
      // A caller that took a call (run_queued), or exclusive(), holds the
      // communicator: wait for it (release wakes only while calls are
      // queued, so look again every millisecond).
      while (running_ && !loop_owns_)
        cv_.wait_for(l, std::chrono::milliseconds(1));
      if (queue_.empty() || queue_.front().ticket > ticket) break;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_release);
      running_ = loop_owns_ = true;
      revoked = revoked_;
    }
    run_job(job, std::move(revoked));  // as loop() runs it
  }
  // A request posted here completes only when moved: move them all.
  if (!p2p_.empty()) {
    progress_p2p(0);
    if (p2p_.empty()) release();
  }
}

void CommRunner::revoke(const std::string& reason) {
  std::deque<Job> drained;
  std::string msg;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (revoked_.empty())
      revoked_ = "autoinfra: rank " + std::to_string(rank_) + ": the communicator was revoked" +
                 (reason.empty() ? "" : ": " + reason);
    msg = revoked_;
    if (!failure_) failure_ = std::make_shared<const CommError>(AI_ERR_REVOKED, -1, msg);
    drained.swap(queue_);
    queued_.store(0, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& job : drained) job.done(revoked_error(msg));
  // Idle: revoke now; a running call's thread revokes when it returns.
  bool idle;
  {
    std::lock_guard<std::mutex> l(mu_);
    idle = !running_;
    if (idle) running_ = true;
  }
  if (idle) release();
}

void CommRunner::exclusive(const std::function<void()>& fn) {
  {
    std::unique_lock<std::mutex> l(mu_);
    ++exclusive_waiters_;
    cv_.wait(l, [this] { return !running_ && queue_.empty(); });
    --exclusive_waiters_;
    running_ = true;
  }
  if (auto e = owned(fn)) std::rethrow_exception(e);
}

std::unique_ptr<CommRunner> CommRunner::shrink() {
  ai_comm* out = nullptr;
  exclusive([&] { check(ai_comm_shrink(comm_, &out), "shrink"); });
  return std::make_unique<CommRunner>(out);
}

std::unique_ptr<CommRunner> CommRunner::grow(int joiners, double timeout_s) {
  ai_comm* out = nullptr;
  exclusive([&] { check(ai_comm_grow(comm_, joiners, timeout_s, &out), "grow"); });
  return std::make_unique<CommRunner>(out);
}

std::unique_ptr<CommRunner> CommRunner::admit(double timeout_s, int* joined) {
  ai_comm* out = nullptr;
  exclusive([&] { check(ai_comm_admit(comm_, timeout_s, joined, &out), "admit"); });
  return out ? std::make_unique<CommRunner>(out) : nullptr;
}

std::vector<int> CommRunner::failed() {
  std::vector<int> ranks(size_);
  int n = 0;
  exclusive([&] { check(ai_comm_failed(comm_, ranks.data(), size_, &n), "failed"); });
  ranks.resize(static_cast<size_t>(n < size_ ? n : size_));
  return ranks;
}

std::string CommRunner::join_addr() {
  char buf[128];
  exclusive([&] { check(ai_comm_join_addr(comm_, buf, sizeof buf), "join_addr"); });
  return buf;
}

int CommRunner::join_pending() {
  int n = 0;
  exclusive([&] { check(ai_comm_join_pending(comm_, &n), "join_pending"); });
  return n;
}

std::unique_ptr<CommRunner> CommRunner::join(const ai_comm_config& cfg, const std::string& job_addr) {
  ai_comm* out = nullptr;
  ai_status_t st = ai_comm_join(&cfg, job_addr.c_str(), &out);
  if (st != AI_OK)
    throw CommError(st, -1, std::string("autoinfra join ") + job_addr + ": " + ai_strerror(st) +
                                ": " + ai_last_error());
  return std::make_unique<CommRunner>(out);
}

std::shared_ptr<const CommError> CommRunner::failure() {
  std::lock_guard<std::mutex> l(mu_);
  return failure_;
}

void CommRunner::keep_failure(const CommError& e) {
  std::lock_guard<std::mutex> l(mu_);
  if (!failure_) failure_ = std::make_shared<const CommError>(e);
}

bool CommRunner::revoked() {
  std::lock_guard<std::mutex> l(mu_);
  return !revoked_.empty();
}

void CommRunner::large_posted() {
  if (!last_waited_.exchange(false, std::memory_order_relaxed))
    streak_.store(0, std::memory_order_relaxed);
}

void CommRunner::large_waited(bool at_once) {
  last_waited_.store(true, std::memory_order_relaxed);
  if (!at_once)
    streak_.store(0, std::memory_order_relaxed);
  else if (streak_.load(std::memory_order_relaxed) < kWaitStreak)
    streak_.fetch_add(1, std::memory_order_relaxed);
}

void CommRunner::set_wait_mode() { ai_comm_set_block_waits(comm_, !inline_ && waiters_ == 0); }

void CommRunner::wait_begin() {
  std::lock_guard<std::mutex> l(mu_);
  if (waiters_++ == 0) set_wait_mode();
}

void CommRunner::wait_end() {
  std::lock_guard<std::mutex> l(mu_);
  if (--waiters_ == 0) set_wait_mode();
}

void CommRunner::loop() {
  for (;;) {
    Job job;
    bool have = false, stopping = false;
    double stop_s = 0;
    std::string revoked;
    // A call usually follows the last one within microseconds (a training
    // step's buckets, a benchmark loop): poll, yielding the core, before
    // sleeping, since a wake-up from sleep waits for a core.
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(poll_us());
    while (p2p_.empty() && queued_.load(std::memory_order_acquire) == 0 &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    {
      std::unique_lock<std::mutex> l(mu_);
      for (;;) {
        double now = ai_now(), until_s = 0;
        if (!p2p_.empty()) {
          // Requests are pending (this thread owns the communicator):
          // take the next call if there is one, else move them a while.
          have = !queue_.empty() &&
                 (stop_ || !revoked_.empty() || queue_.front().not_before <= now);
          break;
        }
        // Run the next call unless it is deferred; else sleep, until a
        // deferred call's time or, while calls are deferred, kLookoutS.
        if (!running_ && queue_.empty() && stop_) return;  // everything queued has run
        if (!running_ && !queue_.empty()) {
          if (stop_ || queue_.front().not_before <= now) {
            have = true;
            break;
          }
          until_s = queue_.front().not_before;
        } else if ((waits_at_once() && now - last_defer_ < kTickIdleS) ||
                   now - last_small_ < kTickIdleS) {
          until_s = now + kLookoutS;
        }
        if (until_s > 0) {
          looking_out_ = true;
          cv_.wait_for(l, std::chrono::duration<double>(until_s - now));
          looking_out_ = false;
        } else {
          cv_.wait(l);
        }
      }
      if (have) {
        job = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_release);
        running_ = loop_owns_ = true;
      }
      revoked = revoked_;
      stopping = stop_;
      stop_s = stop_s_;
    }
    if (!revoked.empty() && !p2p_.empty())
      fail_p2p(revoked_error(revoked));
    if (!have && stopping && !p2p_.empty() && ai_now() - stop_s > kStopGraceS)
      fail_p2p(std::make_exception_ptr(CommError(
          AI_ERR_ABORTED, -1,
          "autoinfra send/recv on rank " + std::to_string(rank_) +
              ": the process group was destroyed with the request pending")));
    if (!have) {
      if (!p2p_.empty()) progress_p2p(kP2pSliceS);
      if (p2p_.empty()) release();
      continue;
    }
    run_job(job, std::move(revoked));
  }
}

void CommRunner::run_job(Job& job, std::string revoked) {
  if (revoked.empty() && job.p2p) {
    // Post it and go on: it moves beside the others from now on.
    try {
      p2p_.push_back(Pending{job.p2p(), std::move(job.done)});
    } catch (...) {
      if (p2p_.empty()) release();
      job.done(std::current_exception());
    }
    return;
  }
  if (revoked.empty() && !p2p_.empty()) {
    progress_p2p(0);  // the call's messages queue behind the requests'
    std::lock_guard<std::mutex> l(mu_);
    revoked = revoked_;
  }
  if (revoked.empty()) {
    job.done(owned(job.fn));
  } else {
    release();
    job.done(revoked_error(revoked));
  }
}

void CommRunner::progress_p2p(double max_s) {
  std::vector<ai_p2p*> reqs;
  while (!p2p_.empty()) {
    if (max_s <= 0) {
      std::string reason;
      {
        std::lock_guard<std::mutex> l(mu_);
        reason = revoked_;
      }
      if (!reason.empty()) {
        fail_p2p(revoked_error(reason));
        return;
      }
    }
    reqs.clear();
    for (auto& p : p2p_) reqs.push_back(p.post.req);
    ai_status_t st = ai_p2p_progress(comm_, reqs.data(), static_cast<int>(reqs.size()),
                                     max_s > 0 ? max_s : 20 * kP2pSliceS, nullptr);
    if (st != AI_OK) {
      std::exception_ptr e;
      try {
        check(st, "send/recv");
      } catch (...) {
        e = std::current_exception();
      }
      fail_p2p(e);
      return;
    }
    // Complete the requests that are done, in posting order.
    std::vector<Pending> finished, left;
    for (auto& p : p2p_) (ai_p2p_done(p.post.req) ? finished : left).push_back(std::move(p));
    p2p_ = std::move(left);
    for (auto& p : finished) {
      std::exception_ptr e;
      try {
        if (p.post.after) p.post.after();
      } catch (...) {
        e = std::current_exception();
      }
      ai_p2p_free(p.post.req);
      p.done(e);
    }
    if (max_s > 0) return;
  }
}

void CommRunner::fail_p2p(std::exception_ptr e) {
  std::vector<Pending> failed;
  failed.swap(p2p_);
  for (auto& p : failed) {
    ai_p2p_free(p.post.req);
    p.done(e);
  }
}

void CommRunner::check(ai_status_t st, const char* what) {
  if (st == AI_OK) return;
  // " Timed out " is what torch's own tests and users' log scrapers match.
  std::string msg = std::string("autoinfra ") + what + " on rank " + std::to_string(rank_) + ": " +
                    (st == AI_ERR_TIMEOUT ? "Timed out waiting for peers" : ai_strerror(st)) +
                    ": " + ai_last_error();
  // The peer: the rank that broke the communicator, as the runtime
  // recorded it (not the message's words).
  int peer = -1;
  if (ai_comm_state(comm_) != AI_OK && ai_comm_failure_peer(comm_, &peer) != AI_OK) peer = -1;
  if (ai_comm_state(comm_) != AI_OK) {
    if (first_error_.empty())
      first_error_ = msg;
    else if (st == AI_ERR_ABORTED)
      msg = std::string("autoinfra ") + what + " on rank " + std::to_string(rank_) +
            ": the communicator failed earlier: " + first_error_;
    CommError e(st, peer, msg);
    keep_failure(e);
    throw e;
  }
  throw CommError(st, peer, msg);
}

void CommRunner::allreduce(at::Tensor& t, Op op) {
  if (t.defined() && t.is_sparse()) {
    allreduce_sparse(t, op);
    return;
  }
  Staged s(t, "allreduce");
  ai_dtype dt = reduce_dtype(t, "allreduce");
  check(ai_allreduce(comm_, AI_IN_PLACE, s.data(), t.numel(), dt, to_ai(op), nullptr), "allreduce");
  s.write_back();
}

// As gloo's sparse allreduce: every rank's coalesced indices and values
// gathered (padded to the largest count of entries), summed by coalescing
// their concatenation; every rank builds the same result from the same
// bytes, so the results agree bit for bit.
void CommRunner::allreduce_sparse(at::Tensor& t, Op op) {
  const char* what = "allreduce (sparse)";
  need(t.device().is_cpu(), what, "tensor on ", t.device(), "; the backend serves CPU tensors");
  need(op == Op::Sum, what, "sparse tensors reduce with SUM only (as gloo's)");
  at::Tensor in = t.coalesce();
  const int64_t sdim = in.sparse_dim(), ddim = in.dense_dim(), dim = in.dim();
  // What every rank must agree on, and its entry count.
  constexpr int kMeta = 5;
  std::vector<int64_t> meta = {in._nnz(), sdim, ddim, dim, static_cast<int64_t>(in.scalar_type())};
  std::vector<int64_t> metas(static_cast<size_t>(kMeta) * size_);
  check(ai_allgather(comm_, meta.data(), metas.data(), kMeta, AI_I64, nullptr), what);
  std::vector<int64_t> sizes(in.sizes().begin(), in.sizes().end());
  std::vector<int64_t> all_sizes(static_cast<size_t>(dim) * size_);
  if (dim > 0) {
    for (int r = 0; r < size_; r++)
      need(metas[r * kMeta + 3] == dim, what, "rank ", r, " passed a tensor of ",
           metas[r * kMeta + 3], " dimensions, rank ", rank_, " one of ", dim);
    check(ai_allgather(comm_, sizes.data(), all_sizes.data(), dim, AI_I64, nullptr), what);
  }
  int64_t max_nnz = 0;
  for (int r = 0; r < size_; r++) {
    const int64_t* m = &metas[r * kMeta];
    need(m[1] == sdim && m[2] == ddim && m[3] == dim && m[4] == meta[4], what, "rank ", r,
         " passed a sparse tensor with ", m[1], " sparse and ", m[2], " dense dimensions of dtype ",
         c10::toString(static_cast<at::ScalarType>(m[4])), ", rank ", rank_, " one with ", sdim,
         " and ", ddim, " of ", c10::toString(in.scalar_type()));
    need(std::equal(sizes.begin(), sizes.end(), all_sizes.begin() + r * dim), what, "rank ", r,
         " passed a sparse tensor of another size than rank ", rank_, "'s ", in.sizes());
    max_nnz = std::max(max_nnz, m[0]);
  }
  // Indices [sdim, nnz] and values [nnz, dense sizes...], padded to max_nnz.
  std::vector<int64_t> vshape = {max_nnz};
  vshape.insert(vshape.end(), sizes.begin() + sdim, sizes.end());
  at::Tensor idx = at::zeros({sdim, max_nnz}, at::kLong);
  at::Tensor val = at::zeros(vshape, in._values().options());
  const int64_t nnz = meta[0];
  if (nnz > 0) {
    idx.narrow(1, 0, nnz).copy_(in._indices());
    val.narrow(0, 0, nnz).copy_(in._values());
  }
  at::Tensor all_idx = at::empty({size_, sdim, max_nnz}, at::kLong);
  vshape.insert(vshape.begin(), size_);
  at::Tensor all_val = at::empty(vshape, val.options());
  if (nbytes(idx) > 0)
    check(ai_allgather(comm_, idx.data_ptr(), all_idx.data_ptr(), nbytes(idx), AI_U8, nullptr), what);
  if (nbytes(val) > 0)
    check(ai_allgather(comm_, val.data_ptr(), all_val.data_ptr(), nbytes(val), AI_U8, nullptr), what);
  std::vector<at::Tensor> idxs, vals;
  for (int r = 0; r < size_; r++) {
    int64_t n = metas[r * kMeta];
    idxs.push_back(all_idx[r].narrow(1, 0, n));
    vals.push_back(all_val[r].narrow(0, 0, n));
  }
  at::Tensor out = at::sparse_coo_tensor(at::cat(idxs, 1), at::cat(vals, 0), sizes,
                                         in.options()).coalesce();
  t.copy_(out);
}

void CommRunner::allreduce_coalesced(std::vector<at::Tensor>& ts, Op op) {
  if (ts.empty()) return;
  at::Tensor flat = flatten(ts, "allreduce_coalesced");
  ai_dtype dt = reduce_dtype(flat, "allreduce_coalesced");
  check(ai_allreduce(comm_, AI_IN_PLACE, flat.data_ptr(), flat.numel(), dt, to_ai(op), nullptr),
        "allreduce_coalesced");
  unflatten(flat, ts);
}

void CommRunner::broadcast(at::Tensor& t, int root) {
  Staged s(t, "broadcast");
  check(ai_broadcast(comm_, s.data(), nbytes(t), AI_U8, root, nullptr), "broadcast");
  s.write_back();
}

void CommRunner::reduce(at::Tensor& t, Op op, int root) {
  Staged s(t, "reduce");
  ai_dtype dt = reduce_dtype(t, "reduce");
  bool me = rank_ == root;
  check(ai_reduce(comm_, me ? AI_IN_PLACE : s.data(), me ? s.data() : nullptr, t.numel(), dt,
                  to_ai(op), root, nullptr),
        "reduce");
  if (me) s.write_back();
}

void CommRunner::allgather(std::vector<at::Tensor>& outs, const at::Tensor& in) {
  need(outs.size() == static_cast<size_t>(size_), "allgather",
       "want one output tensor per rank (", size_, "), got ", outs.size());
  at::Tensor src = contiguous_in(in, "allgather");
  for (auto& o : outs)
    need(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(), "allgather",
         "output tensors must match the input's size and dtype");
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  check(ai_allgather(comm_, src.data_ptr(), flat.data_ptr(), nbytes(in), AI_U8, nullptr), "allgather");
  unflatten(flat, outs);
}

void CommRunner::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outs,
                                     const std::vector<at::Tensor>& ins) {
  const char* what = "allgather_coalesced";
  need(outs.size() == static_cast<size_t>(size_), what, "want one output list per rank (", size_,
       "), got ", outs.size());
  std::vector<at::Tensor> src;
  std::vector<size_t> off;
  size_t total = 0;
  for (const auto& t : ins) {
    src.push_back(contiguous_in(t, what));
    off.push_back(total);
    total += nbytes(t);
  }
  for (auto& list : outs) {
    need(list.size() == ins.size(), what, "every output list must hold one tensor per input (",
         ins.size(), "), got ", list.size());
    for (size_t i = 0; i < ins.size(); i++) {
      check_tensor(list[i], what);
      need(list[i].numel() == ins[i].numel() && list[i].scalar_type() == ins[i].scalar_type(),
           what, "output tensor ", i, " must match input ", i, "'s size and dtype");
    }
  }
  // The inputs' bytes side by side, gathered in one call.
  at::Tensor flat_in = at::empty({static_cast<int64_t>(total)}, at::kByte);
  at::Tensor flat_out = at::empty({static_cast<int64_t>(total) * size_}, at::kByte);
  auto* in_p = static_cast<char*>(flat_in.data_ptr());
  for (size_t i = 0; i < src.size(); i++)
    if (nbytes(src[i]) > 0) std::memcpy(in_p + off[i], src[i].data_ptr(), nbytes(src[i]));
  check(ai_allgather(comm_, in_p, flat_out.data_ptr(), total, AI_U8, nullptr), what);
  const auto* out_p = static_cast<const char*>(flat_out.data_ptr());
  for (int r = 0; r < size_; r++)
    for (size_t i = 0; i < ins.size(); i++) {
      if (nbytes(src[i]) == 0) continue;
      Staged s(outs[r][i], what);
      std::memcpy(s.data(), out_p + r * total + off[i], nbytes(src[i]));
      s.write_back();
    }
}

void CommRunner::allgather_base(at::Tensor& out, const at::Tensor& in) {
  need(out.numel() == size_ * in.numel() && out.scalar_type() == in.scalar_type(), "_allgather_base",
       "output must hold size x the input's elements, of its dtype");
  at::Tensor src = contiguous_in(in, "_allgather_base");
  Staged s(out, "_allgather_base");
  check(ai_allgather(comm_, src.data_ptr(), s.data(), nbytes(in), AI_U8, nullptr), "_allgather_base");
  s.write_back();
}

void CommRunner::reduce_scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, Op op) {
  need(ins.size() == static_cast<size_t>(size_), "reduce_scatter",
       "want one input tensor per rank (", size_, "), got ", ins.size());
  for (const auto& i : ins)
    need(i.numel() == out.numel() && i.scalar_type() == out.scalar_type(), "reduce_scatter",
         "input tensors must match the output's size and dtype");
  at::Tensor flat = flatten(ins, "reduce_scatter");
  reduce_scatter_base(out, flat, op);
}

void CommRunner::reduce_scatter_base(at::Tensor& out, const at::Tensor& in, Op op) {
  need(in.numel() == size_ * out.numel() && out.scalar_type() == in.scalar_type(),
       "reduce_scatter", "input must hold size x the output's elements, of its dtype");
  at::Tensor src = contiguous_in(in, "reduce_scatter");
  Staged s(out, "reduce_scatter");
  ai_dtype dt = reduce_dtype(out, "reduce_scatter");
  check(ai_reduce_scatter(comm_, src.data_ptr(), s.data(), out.numel(), dt, to_ai(op), nullptr),
        "reduce_scatter");
  s.write_back();
}

void CommRunner::exchange(const char* what, const std::vector<const char*>& sptr,
                          const std::vector<size_t>& sbytes, const std::vector<char*>& rptr,
                          const std::vector<size_t>& rbytes) {
  need(rbytes[rank_] == sbytes[rank_], what,
       "this rank sends itself ", sbytes[rank_], " bytes but expects ", rbytes[rank_]);
  if (sbytes[rank_] > 0) std::memcpy(rptr[rank_], sptr[rank_], sbytes[rank_]);
  // Step d: send to rank + d, receive from rank - d; every rank is in
  // exactly one pair per direction per step, so nobody waits in a cycle.
  for (int d = 1; d < size_; d++) {
    int to = (rank_ + d) % size_, from = (rank_ - d + size_) % size_;
    check(ai_sendrecv(comm_, to, sptr[to], sbytes[to], from, rptr[from], rbytes[from]), what);
  }
}

void CommRunner::alltoall_base(at::Tensor& out, const at::Tensor& in,
                               const std::vector<int64_t>& out_splits,
                               const std::vector<int64_t>& in_splits) {
  const char* what = "alltoall_base";
  need(out.scalar_type() == in.scalar_type(), what, "input and output dtypes differ");
  at::Tensor src = contiguous_in(in, what);
  Staged s(out, what);
  if (out_splits.empty() && in_splits.empty()) {
    need(in.numel() % size_ == 0 && out.numel() == in.numel(), what,
         "equal splits need input and output of one size, divisible by the ranks");
    check(ai_alltoall(comm_, src.data_ptr(), s.data(), nbytes(in) / size_, AI_U8, nullptr), what);
    s.write_back();
    return;
  }
  // Splits count rows along dim 0; empty: equal rows per rank.
  auto blocks = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* side,
                    std::vector<size_t>& off, std::vector<size_t>& len) {
    need(t.dim() >= 1, what, side, " tensor has no dim 0 to split");
    int64_t rows = t.size(0), row_bytes = rows ? static_cast<int64_t>(nbytes(t)) / rows : 0;
    std::vector<int64_t> sp = splits;
    if (sp.empty()) {
      need(rows % size_ == 0, what, side, " rows do not divide by the ranks");
      sp.assign(size_, rows / size_);
    }
    need(sp.size() == static_cast<size_t>(size_), what,
         side, " splits: want ", size_, " entries");
    int64_t sum = 0;
    for (int r = 0; r < size_; r++) {
      need(sp[r] >= 0, what, side, " split is negative");
      off[r] = static_cast<size_t>(sum * row_bytes);
      len[r] = static_cast<size_t>(sp[r] * row_bytes);
      sum += sp[r];
    }
    need(sum == rows, what, side, " splits sum to ", sum, ", the tensor has ", rows,
         " rows");
  };
  std::vector<size_t> soff(size_), slen(size_), roff(size_), rlen(size_);
  blocks(in, in_splits, "input", soff, slen);
  blocks(out, out_splits, "output", roff, rlen);
  std::vector<const char*> sp(size_);
  std::vector<char*> rp(size_);
  for (int r = 0; r < size_; r++) {
    sp[r] = static_cast<const char*>(src.data_ptr()) + soff[r];
    rp[r] = static_cast<char*>(s.data()) + roff[r];
  }
  exchange(what, sp, slen, rp, rlen);
  s.write_back();
}

void CommRunner::alltoall(std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& ins) {
  const char* what = "alltoall";
  need(outs.size() == static_cast<size_t>(size_) && ins.size() == static_cast<size_t>(size_), what,
       "want one input and one output tensor per rank (", size_, ")");
  std::vector<at::Tensor> src(size_);
  std::vector<Staged> dst;
  dst.reserve(size_);
  std::vector<const char*> sp(size_);
  std::vector<char*> rp(size_);
  std::vector<size_t> slen(size_), rlen(size_);
  for (int r = 0; r < size_; r++) {
    src[r] = contiguous_in(ins[r], what);
    dst.emplace_back(outs[r], what);
    sp[r] = static_cast<const char*>(src[r].data_ptr());
    rp[r] = static_cast<char*>(dst[r].data());
    slen[r] = nbytes(src[r]);
    rlen[r] = nbytes(outs[r]);
  }
  exchange(what, sp, slen, rp, rlen);
  for (auto& d : dst) d.write_back();
}

void CommRunner::gather(std::vector<at::Tensor>& outs, const at::Tensor& in, int root) {
  const char* what = "gather";
  at::Tensor src = contiguous_in(in, what);
  if (rank_ != root) {
    check(ai_send(comm_, root, src.data_ptr(), nbytes(src)), what);
    return;
  }
  need(outs.size() == static_cast<size_t>(size_), what,
       "the root wants one output tensor per rank (", size_, ")");
  for (int r = 0; r < size_; r++) {
    need(outs[r].numel() == in.numel() && outs[r].scalar_type() == in.scalar_type(), what,
         "output tensors must match the input's size and dtype");
    if (r == rank_) {
      outs[r].copy_(src.reshape(outs[r].sizes()));
      continue;
    }
    Staged s(outs[r], what);
    check(ai_recv(comm_, r, s.data(), nbytes(outs[r])), what);
    s.write_back();
  }
}

void CommRunner::scatter(at::Tensor& out, const std::vector<at::Tensor>& ins, int root) {
  const char* what = "scatter";
  Staged s(out, what);
  if (rank_ != root) {
    check(ai_recv(comm_, root, s.data(), nbytes(out)), what);
    s.write_back();
    return;
  }
  need(ins.size() == static_cast<size_t>(size_), what,
       "the root wants one input tensor per rank (", size_, ")");
  for (int r = 0; r < size_; r++) {
    need(ins[r].numel() == out.numel() && ins[r].scalar_type() == out.scalar_type(), what,
         "input tensors must match the output's size and dtype");
    if (r == rank_) continue;
    at::Tensor src = contiguous_in(ins[r], what);
    check(ai_send(comm_, r, src.data_ptr(), nbytes(src)), what);
  }
  out.copy_(ins[rank_].reshape(out.sizes()));
}

CommRunner::P2pPost CommRunner::isend(const at::Tensor& t, int dst) {
  at::Tensor src = contiguous_in(t, "send");
  P2pPost p;
  check(ai_isend(comm_, dst, src.data_ptr(), nbytes(src), &p.req), "send");
  p.after = [src] {};  // the data stays alive until the request is done
  return p;
}

CommRunner::P2pPost CommRunner::irecv(at::Tensor& t, int src) {
  check_tensor(t, "recv");
  at::Tensor buf = t.is_contiguous() ? t : t.contiguous();
  P2pPost p;
  check(ai_irecv(comm_, src, buf.data_ptr(), nbytes(t), &p.req), "recv");
  p.after = [t, buf]() mutable {
    if (!buf.is_same(t)) t.copy_(buf);
  };
  return p;
}

CommRunner::P2pPost CommRunner::irecv_any(at::Tensor& t, std::function<void(int)> source) {
  const char* what = "recv from any source";
  check_tensor(t, what);
  at::Tensor buf = t.is_contiguous() ? t : t.contiguous();
  P2pPost p;
  check(ai_irecv_any(comm_, buf.data_ptr(), nbytes(t), &p.req), what);
  ai_p2p* req = p.req;  // progress_p2p runs after before it frees the request
  p.after = [t, buf, req, source = std::move(source)]() mutable {
    source(ai_p2p_source(req));
    if (!buf.is_same(t)) t.copy_(buf);
  };
  return p;
}

void CommRunner::barrier() { check(ai_barrier(comm_, nullptr), "barrier"); }

ai_choice CommRunner::choice(ai_coll coll, size_t bytes) {
  ai_choice c{};
  check(ai_comm_choice(comm_, coll, bytes, &c), "choice");
  return c;
}

double CommRunner::capi_allreduce_loop(at::Tensor& t, int iters) {
  TORCH_CHECK(t.is_contiguous(), "autoinfra capi_allreduce_loop: a contiguous tensor expected");
  ai_dtype dt = reduce_dtype(t, "capi_allreduce_loop");
  double s = 0;
  exclusive([&] {
    ai_comm_set_block_waits(comm_, 0);
    ai_status_t st = AI_OK;
    double t0 = ai_now();
    for (int i = 0; i < iters && st == AI_OK; i++)
      st = ai_allreduce(comm_, AI_IN_PLACE, t.data_ptr(), t.numel(), dt, AI_SUM, nullptr);
    s = ai_now() - t0;
    {
      std::lock_guard<std::mutex> l(mu_);
      set_wait_mode();
    }
    check(st, "allreduce (C API loop)");
  });
  return s;
}

std::string CommRunner::fingerprint() {
  char fp[17] = {0};
  check(ai_comm_fingerprint(comm_, fp), "fingerprint");
  return fp;
}

}  // namespace aitorch

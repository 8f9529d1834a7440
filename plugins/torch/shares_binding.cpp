// Python bindings of the batch-share balancer (include/autoinfra.h, "batch
// shares"; src/balance/shares.c), registered into _autoinfra_torch by
// register_shares: the training job's per-rank step-time models and
// re-balancing. Thin: every call is one C call, its status turned into a
// Python exception carrying ai_last_error(). Independent of torch's
// classes, so it stays when process_group_*.cpp is ported.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

extern "C" {
#include "autoinfra.h"
}

namespace aitorch {
namespace {

void ok(ai_status_t st, const char* what) {
  if (st != AI_OK)
    throw std::invalid_argument(std::string("autoinfra ") + what + ": " + ai_last_error());
}

class Shares {
 public:
  Shares(int nranks, int global_batch, double hysteresis) : n_(nranks) {
    ai_shares* s = nullptr;
    ok(ai_shares_create(nranks, global_batch, hysteresis, &s), "Shares");
    s_.reset(s);
  }

  void observe(int rank, int batch, double seconds) {
    ok(ai_shares_observe(s_.get(), rank, batch, seconds), "Shares.observe");
  }

  void set(const std::vector<int>& shares) {
    if (static_cast<int>(shares.size()) != n_)
      throw std::invalid_argument("autoinfra Shares.set: " + std::to_string(shares.size()) +
                                  " shares for " + std::to_string(n_) + " ranks");
    ok(ai_shares_set(s_.get(), shares.data()), "Shares.set");
  }

  // (shares, changed, predicted step time s)
  std::tuple<std::vector<int>, bool, double> rebalance() {
    std::vector<int> b(static_cast<size_t>(n_));
    int changed = 0;
    double pred = 0;
    ok(ai_shares_rebalance(s_.get(), b.data(), &changed, &pred), "Shares.rebalance");
    return {b, changed != 0, pred};
  }

  // (fixed seconds, seconds per sample, affine)
  std::tuple<double, double, bool> model(int rank) const {
    double a = 0, c = 0;
    int affine = 0;
    ok(ai_shares_model(s_.get(), rank, &a, &c, &affine), "Shares.model");
    return {a, c, affine != 0};
  }

 private:
  struct Free {
    void operator()(ai_shares* s) const { ai_shares_destroy(s); }
  };
  int n_;
  std::unique_ptr<ai_shares, Free> s_;
};

std::vector<int> split(const std::vector<double>& throughput, int global_batch) {
  std::vector<int> b(throughput.size());
  ok(ai_shares_split(static_cast<int>(throughput.size()), throughput.data(), global_batch,
                     b.data()),
     "shares_split");
  return b;
}

std::vector<double> grad_weights(const std::vector<int>& shares) {
  std::vector<double> w(shares.size());
  ok(ai_shares_grad_weights(static_cast<int>(shares.size()), shares.data(), w.data()),
     "shares_grad_weights");
  return w;
}

}  // namespace

void register_shares(pybind11::module_& m) {
  namespace py = pybind11;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  py::class_<Shares>(m, "Shares",
                     "Batch shares of a global batch over data-parallel ranks, re-balanced from "
                     "each rank's step-time model t(b) = a + c b (ai_shares_*).")
      .def(py::init<int, int, double>(), py::arg("nranks"), py::arg("global_batch"),
           py::arg("hysteresis") = 0.03)
      .def("observe", &Shares::observe, py::arg("rank"), py::arg("batch"), py::arg("seconds"),
           "One step of rank: batch samples took seconds up to the gradient reduction.")
      .def("set", &Shares::set, py::arg("shares"), "Make these the current shares.")
      .def("rebalance", &Shares::rebalance, "(shares, changed, predicted_step_s)")
      .def("model", &Shares::model, py::arg("rank"), "(fixed_s, per_sample_s, affine)");
  m.def("shares_split", &split, py::arg("throughput"), py::arg("global_batch"),
        "Integer shares proportional to throughput, summing to global_batch.");
  m.def("shares_grad_weights", &grad_weights, py::arg("shares"), "w_i = b_i / B.");
}

}  // namespace aitorch

// CommError (comm_runner.hpp) as Python's autoinfra.CommError(status,
// peer, message), a RuntimeError subclass defined in python/autoinfra/
// errors.py and handed over by autoinfra.torch (set_comm_error), so that
// both torches' modules raise the one class. The translator is pybind11's
// global one, so it also applies where torch's own bindings (Work.wait,
// dist.all_reduce) rethrow a call's error; registered after torch's, it
// is asked first. Where torch turns the error into Python itself (the
// autograd engine, DDP's reducer), it arrives as a plain RuntimeError:
// the group's failure() then holds it. Independent of torch's classes.
#include <pybind11/pybind11.h>

#include "comm_runner.hpp"

namespace aitorch {
namespace {

// autoinfra.CommError, held for the life of the process (released at exit
// it would outlive the interpreter).
PyObject* comm_error_class = nullptr;

}  // namespace

pybind11::object comm_error_object(const CommError& e) {
  if (!comm_error_class) return pybind11::none();
  pybind11::handle cls(comm_error_class);
  return cls(static_cast<int>(e.status()), e.peer(), std::string(e.what()));
}

void register_comm_error(pybind11::module_& m) {
  m.def(
      "set_comm_error",
      [](pybind11::object cls) {
        if (!PyType_Check(cls.ptr()) ||
            !PyObject_IsSubclass(cls.ptr(), PyExc_RuntimeError))
          throw pybind11::type_error("set_comm_error: a subclass of RuntimeError is wanted");
        Py_XDECREF(comm_error_class);
        comm_error_class = cls.release().ptr();
      },
      pybind11::arg("cls"),
      "The class (status, peer, message) the module raises a failed call's error as.");
  pybind11::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const CommError& e) {
      if (!comm_error_class) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return;
      }
      try {
        pybind11::object obj = comm_error_object(e);
        PyErr_SetObject(comm_error_class, obj.ptr());
      } catch (pybind11::error_already_set& err) {
        err.restore();  // the class's constructor failed: that error, named
      }
    }
  });
}

}  // namespace aitorch

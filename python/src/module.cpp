// collectives_torch._C: the process group's Python face, and the function torch calls to
// make one (collectives_torch/__init__.py registers it as the backend "collectives").
#include <chrono>

#include <pybind11/chrono.h>
#include <torch/python.h>

#include "process_group.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "The collectives library as a torch.distributed backend";
  py::class_<collectives_torch::process_group, c10d::ProcessGroup, c10::intrusive_ptr<collectives_torch::process_group>>(
      m, "ProcessGroupCollectives")
      .def_property_readonly("transport", &collectives_torch::process_group::transport_name,
                             "The transport the group joined over: 'shm' or 'tcp'");
  // What torch.distributed.Backend.register_backend expects: (store, rank, size, timeout).
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return c10::make_intrusive<collectives_torch::process_group>(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>());
}

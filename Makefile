# Thin wrapper over CMake so that a fresh Debian 12 machine needs two
# commands: `make demo` and `make test`. Each installs the Debian packages
# it needs when they are missing.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2
# Open MPI and MPICH: the MPI shim is built against them and the tests run
# the KB's exported tuning files through both. torch (with Python headers
# and pybind11): the torch.distributed backend (docs/torch.md) and the
# training job (autoinfra.train) the demo and the tests run. Slurm and munge:
# a real Slurm on this machine (bench/slurm) and the SPANK plugin. libsodium:
# the job token's challenge-response (docs/runtime.md, "Security").
DEPS       := build-essential cmake pkg-config libjansson-dev libsqlite3-dev libcmocka-dev iproute2 libsodium-dev \
              openmpi-bin libopenmpi-dev mpich libmpich-dev \
              python3-torch libtorch-dev python3-dev pybind11-dev \
              munge slurmctld slurmd slurm-client libslurm-dev
# python3-venv: the torch 2 venv (TORCH2_VENV below), when python3 is Debian's.
DEPS       += python3-venv
BENCH_DEPS :=
# The stronger peers of bench/vs-ompi (oneCCL, Intel MPI, Open MPI 5, MPICH
# 5; docs/runtime.md, "Peers"): pinned PyPI packages, one virtual
# environment each under PEERS_PREFIX, made once by `make bench-deps`.
# libhwloc-dev: the oneCCL benchmark links oneCCL's static CPU library,
# which needs hwloc.
BENCH_DEPS += libhwloc-dev
PEERS_PREFIX ?= $(HOME)/.cache/autoinfra/peers
# The torch 2 backend (docs/torch.md) is built and tested against this exact
# torch from PyPI, in a virtual environment of the python3 on PATH kept
# outside the checkout (a few GB, made once, shared by every clone).
TORCH2_VERSION ?= 2.13.0
TORCH2_PY      ?= python3
ifndef TORCH2_VENV
TORCH2_VENV    := $(HOME)/.cache/autoinfra/torch-$(TORCH2_VERSION)-py$(shell $(TORCH2_PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
endif
TORCH2_CMAKE   := -DAI_TORCH2_PYTHON=$(TORCH2_VENV)/bin/python
# Fuzzing builds with clang's libFuzzer (fuzz/): not needed to build or test.
FUZZ_DEPS  := clang
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined

.PHONY: all deps bench-deps fuzz-deps build asan demo test bench-vs-ompi fuzz fuzz-wire fuzz-spec clean
.PHONY: torch2-venv torch2
.PHONY: torch2-bench-deps

all: build

deps:
	@./scripts/install-deps $(DEPS)

bench-deps:
	@./scripts/install-deps $(DEPS) $(BENCH_DEPS)
	@./scripts/install-peers $(PEERS_PREFIX)

fuzz-deps:
	@./scripts/install-deps $(FUZZ_DEPS)

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(TORCH2_CMAKE) >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DAI_SANITIZE=ON $(TORCH2_CMAKE) >/dev/null
	cmake --build $(ASAN_BUILD) -j$(JOBS)

# The main job: a GPT-style transformer trained with DDP on 4 local ranks
# (autoinfra.train), what the learner chose, then the planner's plan of the
# embedded default scenario.
demo: build
	./scripts/demo $(BUILD)

# Unit and integration tests under AddressSanitizer + UBSan; with the torch
# 2 venv made first, so that the build finds it and the torch 2 backend's
# tests run too.
test: torch2-venv asan
	cd $(ASAN_BUILD) && ctest --output-on-failure --timeout 300

# The virtual environment with torch $(TORCH2_VERSION) (scripts/install-torch-venv:
# nothing to do once it exists). The builds find it and build the torch 2
# backend beside the torch 1.13 one, and register its tests (ctest torch2_*).
torch2-venv: deps
	@./scripts/install-torch-venv $(TORCH2_VENV) $(TORCH2_VERSION) $(TORCH2_PY)

# The torch 2 backend alone: the venv, the sanitizer build, its tests.
torch2: torch2-venv
	$(MAKE) asan
	cd $(ASAN_BUILD) && ctest -R '^torch2_' --output-on-failure --timeout 300

# Side-by-side benchmark against Open MPI (docs/runtime.md).
bench-vs-ompi: bench-deps build
	./bench/vs-ompi --build $(BUILD)

# The wire-frame parsers (src/comm/transport/wire.c) under libFuzzer for
# FUZZ_SECONDS, from the seeds in fuzz/wire/corpus (new inputs go to
# $(FUZZ_BUILD)/corpus-wire, the repo's seeds stay as they are). A crash,
# a broken invariant or an input slower than 5 s fails the target and
# leaves the input in $(FUZZ_BUILD)/.
fuzz-wire: fuzz-deps
	mkdir -p $(FUZZ_BUILD)/corpus-wire
	clang $(FUZZ_CFLAGS) -o $(FUZZ_BUILD)/fuzz_wire fuzz/wire/fuzz_wire.c src/comm/transport/wire.c \
	      src/util/status.c -lsodium
	$(FUZZ_BUILD)/fuzz_wire -max_total_time=$(FUZZ_SECONDS) -timeout=5 -print_final_stats=1 \
	      -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus-wire fuzz/wire/corpus

# The spec loader (cluster, model, training JSON) under libFuzzer for
# FUZZ_SECONDS, from fuzz/spec/corpus and every spec under examples/.
fuzz-spec: fuzz-deps
	./fuzz/spec/run $(FUZZ_SECONDS) $(FUZZ_BUILD)

fuzz: fuzz-wire fuzz-spec

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)

# What bench/torch-suite and bench/train-faults --peer torchft need beyond
# `make test`: PyTorch's test helpers import expecttest (MIT), into the
# torch 2 venv and, for Debian's torch 1.13, into a folder of its own
# (TORCH_SUITE_PYPATH, put on PYTHONPATH by bench/torch-suite); torchft
# (BSD-3-Clause, Meta's fault tolerance for DDP) into the torch 2 venv,
# with torch held at the venv's release.
TORCH_SUITE_PYPATH ?= $(HOME)/.cache/autoinfra/py311-suite
torch2-bench-deps: torch2-venv
	$(TORCH2_VENV)/bin/python -m pip install --disable-pip-version-check \
	    "torch==$(TORCH2_VERSION)" expecttest==0.3.0 torchft==0.2.0
	$(TORCH2_VENV)/bin/python -m pip install --disable-pip-version-check \
	    --target $(TORCH_SUITE_PYPATH) --upgrade expecttest==0.3.0

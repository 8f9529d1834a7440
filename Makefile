# Thin wrapper over CMake so that a fresh Debian 12 machine needs two
# commands: `make demo` and `make test`. Each installs the Debian packages
# it needs when they are missing.

BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= 2
# Open MPI and MPICH: the MPI shim is built against them and the tests run
# the KB's exported tuning files through both.
DEPS       := build-essential cmake pkg-config libjansson-dev libsqlite3-dev libcmocka-dev iproute2 \
              openmpi-bin libopenmpi-dev mpich libmpich-dev
BENCH_DEPS :=

.PHONY: all deps bench-deps build asan demo test bench-vs-ompi clean

all: build

deps:
	@./scripts/install-deps $(DEPS)

bench-deps:
	@./scripts/install-deps $(DEPS) $(BENCH_DEPS)

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DAI_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j$(JOBS)

# The main job: 4 local ranks measure allreduce over shared memory and check
# every result, then the planner plans the embedded default scenario.
demo: build
	./scripts/demo $(BUILD)

# Unit and integration tests under AddressSanitizer + UBSan.
test: asan
	cd $(ASAN_BUILD) && ctest --output-on-failure --timeout 300

# Side-by-side benchmark against Open MPI (docs/runtime.md).
bench-vs-ompi: bench-deps build
	./bench/vs-ompi --build $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

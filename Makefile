# megafold — build. `make` builds the library (float and double), the megafold
# command, the tests, and — when nvcc is found — the CUDA library, the kernel lab
# (dev/cuda) and the GPU tests (compiled here, run on a GPU machine with test-gpu).
#
#   make             everything this machine can build
#   make test        CPU tests + the same tests under ASan/UBSan; ends "N passed, N failed"
#   make test-gpu    GPU tests (needs a GPU)
#   make test-gpu-ops GPU tests of the kernels only (no LMDB/zstd/jansson needed)
#   make demo        the built-in demo
#   make NO_CUDA=1   skip CUDA even when nvcc is present
#
# Sources are found by pattern, so a new src/**/*.c or tests/test_*.c needs no edit here.

NVCC     ?= nvcc
BUILD    ?= build
CFLAGS   ?= -O2 -g   # yours to override; the flags the build needs are in ALL_CFLAGS
WARN     := -Wall -Wextra -Wshadow -Wmissing-prototypes -Wstrict-prototypes
ALL_CFLAGS = -std=c11 $(WARN) -Iinclude -Isrc -MMD -MP -pthread $(BLAS_DEF) $(CFLAGS)
LDLIBS   := -llmdb -lzstd -lz -ljansson -lm -pthread
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
NVFLAGS  := -std=c++17 -O3 -g -lineinfo $(CUDA_ARCH) -Iinclude -Isrc -Xcompiler -Wall,-Wextra -MMD -MP

# ---------------------------------------------------------------- detection
HAVE_BLAS := $(shell echo 'int main(void){return 0;}' | $(CC) -x c - -include cblas.h -lopenblas -o /dev/null 2>/dev/null && echo 1)
ifeq ($(NO_CUDA),1)
HAVE_CUDA :=
else
HAVE_CUDA := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
HAVE_NCCL := $(if $(HAVE_CUDA),$(shell test -f $(CUDA_HOME)/include/nccl.h -o -f /usr/include/nccl.h && echo 1))
HAVE_MPI  := $(shell command -v mpicc >/dev/null 2>&1 && echo 1)

ifeq ($(HAVE_BLAS),1)
BLAS_DEF := -DMF_HAVE_BLAS
LDLIBS += -lopenblas
endif
ifeq ($(HAVE_MPI),1)
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
endif
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt

define yesno
$(if $(1),✓,✗)
endef
$(info megafold build: $(call yesno,$(HAVE_BLAS)) OpenBLAS  $(call yesno,$(HAVE_CUDA)) CUDA (nvcc)  $(call yesno,$(HAVE_NCCL)) NCCL  $(call yesno,$(HAVE_MPI)) MPI)

# ---------------------------------------------------------------- sources
LIB_C    := $(shell find src -name '*.c' -not -path 'src/cli/*' | sort)
CLI_C    := $(shell find src/cli -name '*.c' 2>/dev/null | sort)
LIB_CU   := $(shell find src -name '*.cu' | sort)
TEST_C   := $(sort $(wildcard tests/test_*.c))
TEST_F32 := $(filter %_f32.c,$(TEST_C))
TEST_F64 := $(filter-out %_f32.c,$(TEST_C))
HARNESS  := tests/harness.c
LAB_CU   := $(sort $(wildcard dev/cuda/*.cu))
GPU_TEST_CU := $(sort $(wildcard tests/gpu/*.cu))
CLI_TESTS := $(sort $(wildcard tests/cli/test_*.sh))
# GPU tests of the data layer (staging) link it whole, with LMDB/zstd/jansson.
GPU_DATA_TEST_CU := tests/gpu/test_staging_gpu.cu

# The GPU tests and the lab need only core + ops + model (the CPU oracle), not the data
# layer with its LMDB/zstd/jansson dependencies (absent on the GPU machine).
ORACLE_C := $(filter src/core/% src/ops/% src/model/%,$(LIB_C))
OBJ_F32  := $(LIB_C:%.c=$(BUILD)/f32/%.o)
OBJ_F64  := $(LIB_C:%.c=$(BUILD)/f64/%.o)
OBJ_ASAN := $(LIB_C:%.c=$(BUILD)/asan/%.o)
OBJ_ASAN32 := $(LIB_C:%.c=$(BUILD)/asan32/%.o)
OBJ_CU   := $(LIB_CU:%.cu=$(BUILD)/cuda/%.o)

LIB_F32  := $(BUILD)/libmegafold.a
LIB_F64  := $(BUILD)/libmegafold_f64.a
LIB_ASAN := $(BUILD)/libmegafold_asan.a
LIB_ASAN32 := $(BUILD)/libmegafold_asan32.a
LIB_CUDA := $(BUILD)/libmegafold_cuda.a
LIB_ORACLE := $(BUILD)/libmegafold_oracle_f64.a

TESTS      := $(TEST_C:tests/%.c=$(BUILD)/tests/%)
ASAN_TESTS := $(TEST_C:tests/%.c=$(BUILD)/asan/tests/%)
LABS       := $(LAB_CU:dev/cuda/%.cu=$(BUILD)/dev/%)
GPU_TESTS  := $(GPU_TEST_CU:tests/gpu/%.cu=$(BUILD)/tests/gpu/%)
CLI        := $(BUILD)/megafold
MAKE_BUNDLE := $(BUILD)/tools/make_bundle

ALL := $(LIB_F32) $(LIB_F64) $(CLI) $(MAKE_BUNDLE) $(TESTS)
ifeq ($(HAVE_CUDA),1)
ALL += $(LIB_CUDA) $(LABS) $(GPU_TESTS)
endif

.SECONDARY:
.PHONY: all test test-cpu-all test-gpu-ops test-cpu test-asan test-gpu asan demo clean
all: $(ALL)
asan: $(ASAN_TESTS)

# ---------------------------------------------------------------- rules
$(BUILD)/f32/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@
$(BUILD)/f64/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -DMF_REAL_DOUBLE -c $< -o $@
$(BUILD)/asan/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -DMF_REAL_DOUBLE $(SAN) -O1 -c $< -o $@
$(BUILD)/asan32/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(SAN) -O1 -c $< -o $@
$(BUILD)/cuda/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(LIB_F32): $(OBJ_F32)
	@rm -f $@; ar rcs $@ $^
$(LIB_F64): $(OBJ_F64)
	@rm -f $@; ar rcs $@ $^
$(LIB_ASAN): $(OBJ_ASAN)
	@rm -f $@; ar rcs $@ $^
$(LIB_ASAN32): $(OBJ_ASAN32)
	@rm -f $@; ar rcs $@ $^
$(LIB_CUDA): $(OBJ_CU)
	@rm -f $@; ar rcs $@ $^
$(LIB_ORACLE): $(ORACLE_C:%.c=$(BUILD)/f64/%.o)
	@rm -f $@; ar rcs $@ $^

$(CLI): $(CLI_C:%.c=$(BUILD)/f32/%.o) $(LIB_F32)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS)

# Parity bundles of the CPU double stack for the PyTorch reference (tools/reference).
$(MAKE_BUNDLE): $(BUILD)/f64/tools/reference/make_bundle.o $(LIB_F64)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS)

# Tests link the double build (gradient checks); tests/test_*_f32.c the float one.
$(BUILD)/tests/%: $(BUILD)/f64/tests/%.o $(BUILD)/f64/tests/harness.o $(LIB_F64)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS)
$(TEST_F32:tests/%.c=$(BUILD)/tests/%): $(BUILD)/tests/%: $(BUILD)/f32/tests/%.o $(BUILD)/f32/tests/harness.o $(LIB_F32)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/asan/tests/%: $(BUILD)/asan/tests/%.o $(BUILD)/asan/tests/harness.o $(LIB_ASAN)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)
$(TEST_F32:tests/%.c=$(BUILD)/asan/tests/%): $(BUILD)/asan/tests/%: $(BUILD)/asan32/tests/%.o $(BUILD)/asan32/tests/harness.o $(LIB_ASAN32)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)

# Kernel lab and GPU tests: CUDA sources linked with the double CPU reference (the oracle).
$(BUILD)/dev/%: dev/cuda/%.cu $(LIB_CUDA) $(LIB_ORACLE)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -DMF_REAL_DOUBLE $< -o $@ $(LIB_CUDA) $(LIB_ORACLE) $(CUDA_LIBS) $(if $(HAVE_BLAS),-lopenblas) -lm
$(BUILD)/tests/gpu/%: tests/gpu/%.cu $(BUILD)/f64/tests/harness.o $(LIB_CUDA) $(LIB_ORACLE)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -DMF_REAL_DOUBLE $< $(BUILD)/f64/tests/harness.o -o $@ $(LIB_CUDA) $(LIB_ORACLE) $(CUDA_LIBS) $(if $(HAVE_BLAS),-lopenblas) -lm
$(GPU_DATA_TEST_CU:tests/gpu/%.cu=$(BUILD)/tests/gpu/%): $(BUILD)/tests/gpu/%: tests/gpu/%.cu $(BUILD)/f64/tests/harness.o $(LIB_CUDA) $(LIB_F64)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -DMF_REAL_DOUBLE $< $(BUILD)/f64/tests/harness.o -o $@ $(LIB_CUDA) $(LIB_F64) $(CUDA_LIBS) $(if $(HAVE_BLAS),-lopenblas) -llmdb -lzstd -lz -ljansson -lm

# ---------------------------------------------------------------- running
test: all asan
	@$(MAKE) --no-print-directory test-cpu-all
test-cpu-all: $(CLI) $(MAKE_BUNDLE)
	@MF_BUILD=$(BUILD) scripts/run_tests.sh $(TESTS) $(ASAN_TESTS) $(CLI_TESTS)
test-cpu: $(TESTS)
	@scripts/run_tests.sh $(TESTS)
test-asan: $(ASAN_TESTS)
	@scripts/run_tests.sh $(ASAN_TESTS)
test-gpu: $(GPU_TESTS)
	@scripts/run_tests.sh $(GPU_TESTS)
# The kernels' GPU tests alone: builds only core + ops + model + CUDA (no data-layer libraries).
test-gpu-ops: $(filter-out $(GPU_DATA_TEST_CU:tests/gpu/%.cu=$(BUILD)/tests/gpu/%),$(GPU_TESTS))
	@scripts/run_tests.sh $^
demo: $(CLI)
	$(CLI) demo

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

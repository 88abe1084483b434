# Makefile for train_t5.
#   make            build ./train_t5 (CUDA backend when nvcc is found, CPU-only otherwise)
#   make deps       install the Debian packages the project needs (when missing)
#   make test       every test that needs no GPU; last line "N passed, M failed" (tests/tensorboard_events.sh
#                   pip-installs the tensorboard Python package when it is missing)
#   make demo       fine-tune a small T5 on the shipped lines; a parallel build, CPU-only
#                   (in build-cpu/) unless a GPU is visible or CUDA=1 is given
#   make test-asan  the bad-input tests under AddressSanitizer (also part of `make test`)
#   make test-gpu   GPU tests (run on the GPU machine)
#   make blog-table the 2021 post's table with HF + DeepSpeed beside us (two-GPU machine; bench/blog_table.sh)
#   make clean
# Sources are picked up by directory: every .c in common/ formats/ model/ kernels/cpu/ comm/ optim/
# deepspeed/ zero/ data/ eval/ plot/ trainer/ cmd/ goes into build/libt5.a; every tests/test_*.c becomes build/tests/test_*.
# With nvcc, kernels/cuda/*.cu and comm/*.cu (NCCL) join it and the binary links -lnccl;
# without, the *_absent.c files stand in for them (entry points that refuse --device cuda
# naming the build), so no caller needs an #ifdef.

CC      ?= gcc
NVCC    ?= nvcc
OPT     ?= -O2 -g
SAN     ?=
CFLAGS  := $(OPT) $(SAN) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fopenmp -MMD -MP
CXXFLAGS := $(OPT) $(SAN) -std=c++17 -Wall -Wextra -MMD -MP
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
CFLAGS  += $(MPI_CFLAGS)
LDLIBS  := -lcjson -lsentencepiece -lprotobuf-c -lstdc++ -lm -fopenmp $(MPI_LIBS) $(SAN)
ASAN    := OPT="-O1 -g -fno-omit-frame-pointer" SAN="-fsanitize=address,undefined,float-cast-overflow" HAVE_NVCC=0

LIB_DIRS := common formats model kernels kernels/cpu comm optim deepspeed zero data eval plot trainer cmd
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
LIB_CXX  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cc))
TEST_SRC := $(wildcard tests/test_*.c)

# ---- feature detection: print what was found, never silently drop a feature -------
CUDA_HOME ?= /usr/local/cuda
ifeq ($(wildcard $(CUDA_HOME)/include/cuda_bf16.h),)
  TEST_SRC := $(filter-out tests/test_flash_emu.c,$(TEST_SRC))
  FEATURE_NOTES += no CUDA headers in $(CUDA_HOME)/include: test_flash_emu (the tile kernels on the CPU) left out
endif
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)
CUDA_SRC  := $(wildcard kernels/cuda/*.cu comm/*.cu)
# GPU targets (docs/CUDA.md "GPUs"): one cubin per compute capability in CUDA_ARCH (Turing 7.5
# for fp16/fp32 on the 2021 post's Titan RTX cards, Ampere 8.0/8.6, Ada 8.9, Hopper 9.0) and PTX
# of the newest, which the driver compiles for GPUs newer than every cubin (Blackwell).
# `make CUDA_ARCH="80 90"` builds fewer; an entry "90a" is arch-specific (that GPU only). No
# kernel uses a Hopper-only instruction, so there is no sm_90a cubin by default.
CUDA_ARCH ?= 75 80 86 89 90
CUDA_PTX  ?= $(shell printf '%s\n' $(CUDA_ARCH) | sort -n | tail -n 1)
comma     := ,
GENCODE   := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a)$(comma)code=sm_$(a)) \
             $(if $(strip $(CUDA_PTX)),-gencode arch=compute_$(CUDA_PTX)$(comma)code=compute_$(CUDA_PTX))
# Six targets make a large fatbin: nvcc 12.8+ compresses it for size (53 MB -> about 12 MB for the
# binary; the driver inflates a kernel's image when it first loads it)
NVCC_COMPRESS := $(if $(HAVE_NVCC),$(shell $(NVCC) --help 2>/dev/null | grep -q -- --compress-mode && echo --compress-mode=size))
NVCCFLAGS := -O3 -std=c++17 $(GENCODE) -Xcompiler -Wall --expt-relaxed-constexpr $(NVCC_COMPRESS) \
             -MMD -MP -lineinfo -I$(CUDA_HOME)/include $(MPI_CFLAGS)
ifeq ($(HAVE_NVCC),1)
  ifneq ($(CUDA_SRC),)
    FEATURES += cuda(sm_$(subst $(eval) ,/,$(strip $(CUDA_ARCH)))$(if $(strip $(CUDA_PTX)),+ptx_$(CUDA_PTX))) nccl
    LIB_SRC  := $(filter-out %_absent.c,$(LIB_SRC))
    CFLAGS   += -DT5_HAVE_CUDA -I$(CUDA_HOME)/include
    LDLIBS   += -L$(CUDA_HOME)/lib64 -lnccl -lcublasLt -lcudart_static -ldl -lrt -lpthread
  else
    FEATURE_NOTES += nvcc found, but kernels/cuda/ has no kernels yet: CPU backend only
  endif
else
  CUDA_SRC :=
  ifeq ($(origin HAVE_NVCC),command line)
    FEATURE_NOTES += HAVE_NVCC=$(HAVE_NVCC): CPU backend only, --device cuda will say so
  else
    FEATURE_NOTES += nvcc not found: CPU backend only, --device cuda will say so
  endif
endif
FEATURES += cpu(fp32) sentencepiece cjson protobuf-c $(if $(MPI_LIBS),mpi,)

# cairo draws the PNGs (train_t5 plot, estimate --png; only plot/canvas.c includes it): found by
# pkg-config, else by its header; without it plot/canvas_nocairo.c refuses both, naming make deps
CAIRO_CFLAGS := $(shell pkg-config --cflags cairo 2>/dev/null)
CAIRO_LIBS   := $(shell pkg-config --libs cairo 2>/dev/null)
ifeq ($(CAIRO_LIBS),)
  ifneq ($(wildcard /usr/include/cairo/cairo.h),)
    CAIRO_CFLAGS := -I/usr/include/cairo
    CAIRO_LIBS   := -lcairo
  endif
endif
ifneq ($(CAIRO_LIBS),)
  FEATURES += cairo
  LIB_SRC  := $(filter-out plot/canvas_nocairo.c,$(LIB_SRC))
  LDLIBS   += $(CAIRO_LIBS)
else
  LIB_SRC  := $(filter-out plot/canvas.c,$(LIB_SRC))
  FEATURE_NOTES += cairo not found (libcairo2-dev, make deps): train_t5 plot and estimate --png will say so
endif

BUILD ?= build
# Protocol buffers (TensorBoard event files, trainer/tensorboard.h): each .proto in LIB_DIRS
# becomes C with protoc-c (protobuf-c) under $(BUILD)/gen/, compiled into libt5.a; the
# generated files are build outputs, never committed.
PROTO_SRC := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.proto))
PROTO_HDR := $(PROTO_SRC:%.proto=$(BUILD)/gen/%.pb-c.h)
PROTO_OBJ := $(PROTO_SRC:%.proto=$(BUILD)/obj/%.pb-c.o)
CFLAGS   += $(addprefix -I$(BUILD)/gen/,$(sort $(dir $(PROTO_SRC))))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(LIB_CXX:%.cc=$(BUILD)/obj/%.o) $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o) $(PROTO_OBJ)
GPU_TEST_SRC := $(wildcard tests/gpu/test_*.c)
GPU_TEST_BIN := $(GPU_TEST_SRC:tests/gpu/%.c=$(BUILD)/tests-gpu/%)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all deps test test-asan test-gpu clean features demo demo-flags blog-table
all: features train_t5

features:
	@echo 'train_t5 build: features [$(FEATURES)] $(FEATURE_NOTES)'

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: %.proto
	@command -v protoc-c >/dev/null 2>&1 || { echo "error: protoc-c not found (it turns $< into C)"; \
	  echo "HINT: make deps (installs protobuf-c-compiler and libprotobuf-c-dev)"; exit 1; }
	@mkdir -p $(dir $@)
	protoc-c --c_out=$(dir $@) --proto_path=$(dir $<) $<

$(BUILD)/obj/%.pb-c.o: $(BUILD)/gen/%.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# every C file may include a generated header: they are made before any object
$(LIB_OBJ) $(BUILD)/obj/train_t5.o $(TEST_BIN) $(GPU_TEST_BIN): | $(PROTO_HDR)

$(BUILD)/obj/plot/canvas.o: CFLAGS += $(CAIRO_CFLAGS)

# The targets travel into the binary (kernels/gpu_arch.c: the start-up check of every rank's GPU),
# and a changed CUDA_ARCH / CUDA_PTX rebuilds every object that depends on them: the stamp file
# holds the last build's gencode line (and fatbin compression) and is rewritten only when it differs.
ARCH_STAMP := $(BUILD)/.cuda_arch
ARCH_TEXT  := $(strip $(GENCODE) $(NVCC_COMPRESS))
$(shell mkdir -p $(BUILD); [ "$$(cat $(ARCH_STAMP) 2>/dev/null)" = "$(ARCH_TEXT)" ] || echo "$(ARCH_TEXT)" >$(ARCH_STAMP))
$(BUILD)/obj/kernels/gpu_arch.o: CFLAGS += -DT5_CUDA_CUBINS='"$(strip $(CUDA_ARCH))"' -DT5_CUDA_PTX='"$(strip $(CUDA_PTX))"'
$(BUILD)/obj/kernels/gpu_arch.o $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o): $(ARCH_STAMP)

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/tests-gpu/%: tests/gpu/%.c $(BUILD)/libt5.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libt5.a -o $@ $(LDLIBS)

$(BUILD)/libt5.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# ./train_t5 is linked from one build folder at a time (build/, or build-cpu/ for a CPU-only
# demo); .train_t5.build records which, so that switching folders relinks it rather than
# leaving the other build's binary in place
ifneq ($(shell cat .train_t5.build 2>/dev/null),$(BUILD))
  .PHONY: train_t5
endif
train_t5: $(BUILD)/obj/train_t5.o $(BUILD)/libt5.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
	@echo '$(BUILD)' >.train_t5.build

# benchmark programs (bench/*.c): not part of `all`; bench/README.md says which script runs them
$(BUILD)/bench/%: bench/%.c $(BUILD)/libt5.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libt5.a -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libt5.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/libt5.a -o $@ $(LDLIBS)

# tests/test_flash_emu: the CUDA attention tile kernels run on the CPU (tests/emu/warp_emu.h):
# host C++ over the kernel headers, so it needs the CUDA headers (cuda_bf16.h's 16-bit types)
# but neither nvcc nor a GPU. -fno-strict-aliasing: the kernels pun types through
# reinterpret_cast (16-byte vector access, pairs of 16-bit values), which nvcc compiles as meant
# and g++ -O2 may not (84 of test_flash_emu's checks failed without it). Without the headers the
# test is left out, and the feature line says so.
EMU_OBJ := $(patsubst %.cc,$(BUILD)/obj/%.o,$(wildcard tests/emu/*.cc))
$(BUILD)/obj/tests/emu/%.o: tests/emu/%.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -fno-strict-aliasing -Wno-unknown-pragmas -DT5_WARP_EMU -I$(CUDA_HOME)/include -c $< -o $@
$(BUILD)/tests/test_flash_emu: tests/test_flash_emu.c $(EMU_OBJ) $(BUILD)/libt5.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(EMU_OBJ) $(BUILD)/libt5.a -o $@ $(LDLIBS)
-include $(EMU_OBJ:.o=.d)

# ---- dependencies ---------------------------------------------------------------
# Each entry: a file that proves the package is installed, and the package.
DEB_DEPS := /usr/include/cjson/cJSON.h:libcjson-dev \
            /usr/include/sentencepiece_processor.h:libsentencepiece-dev \
            /usr/bin/mpicc:libopenmpi-dev \
            /usr/bin/mpirun:openmpi-bin \
            /usr/include/protobuf-c/protobuf-c.h:libprotobuf-c-dev \
            /usr/bin/protoc-c:protobuf-c-compiler \
            /usr/include/cairo/cairo.h:libcairo2-dev
deps:
	@missing=""; for d in $(DEB_DEPS); do f=$${d%%:*}; p=$${d##*:}; \
	  [ -e $$f ] || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null \
	    || { echo "error: apt-get install$$missing failed"; echo "HINT: install these Debian packages by hand"; exit 1; }; \
	else echo "make deps: all present (libcjson-dev libsentencepiece-dev openmpi protobuf-c cairo)"; fi

# ---- tests ------------------------------------------------------------------------
# The script tests (each prints OK / NOT OK lines and "N passed, M failed"); ASAN_SCRIPTS run
# the AddressSanitizer build (build-asan/train_t5) on hostile input, make test-asan alone.
ASAN_SCRIPTS := tests/bad_input.sh tests/bad_input_pickle.sh tests/bad_input_tokenizer.sh tests/bad_input_ckpt.sh \
                tests/bad_input_files.sh tests/bad_input_dsblocks.sh
TEST_SCRIPTS := $(ASAN_SCRIPTS) tests/check_links.sh tests/post_commands.sh tests/post_dry_runs.sh \
                tests/tensorboard_events.sh tests/plot_png.sh tests/progress_tty.sh tests/readme_demo.sh tests/accelerate_env.sh \
                tests/ds_blocks.sh tests/layout_rules.sh tests/bench_fp8.sh \
                bench/test_zero_scaling.sh bench/test_blog_table.sh

test: deps
	@$(MAKE) --no-print-directory all $(TEST_BIN) $(BUILD)/bench/blog_chart
	@if nvidia-smi -L >/dev/null 2>&1; then echo "NOTICE: a GPU is present: make test-gpu runs the CUDA tests"; \
	 else echo "NOTICE: no GPU here: the CUDA tests (make test-gpu) are skipped"; fi
	@$(MAKE) --no-print-directory BUILD=build-asan $(ASAN) build-asan/train_t5
	@tests/run_tests.sh $(TEST_BIN) $(TEST_SCRIPTS)

# tests/bad_input_tokenizer.sh also runs ./train_t5 (an AddressSanitizer binary cannot run under ulimit -v)
test-asan: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory BUILD=build-asan $(ASAN) build-asan/train_t5
	@tests/run_tests.sh $(ASAN_SCRIPTS)

build-asan/train_t5: $(BUILD)/obj/train_t5.o $(BUILD)/libt5.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

test-gpu: all $(GPU_TEST_BIN)
	@[ -n "$(CUDA_SRC)" ] || { echo "error: make test-gpu needs nvcc and kernels/cuda/*.cu"; exit 1; }
	@tests/run_tests.sh $(GPU_TEST_BIN)

# the 2021 post's table on the two-GPU machine, HF + DeepSpeed beside us (bench/blog_table.sh)
blog-table: all $(BUILD)/bench/blog_chart
	@OUT=$${OUT:-out/blog_table} BT_CHART=$(BUILD)/bench/blog_chart bash bench/blog_table.sh

clean:
	rm -rf build build-asan build-cpu train_t5 .train_t5.build

-include $(LIB_OBJ:.o=.d) $(BUILD)/obj/train_t5.d

# ---- demo: fine-tune a small random-init T5 on the shipped en-ro lines (CPU) ----------
# (no pretrained weights can ship in the repo: a 5M-parameter T5 with the real tokenizer,
#  trained from scratch for 120 steps; the loss falls from ~10.4)
DEMO_FLAGS := --model data/sample/t5-demo --init random --tokenizer_name data/sample/spiece.model \
  --data_dir data/sample --task translation_en_to_ro --max_source_length 32 --max_target_length 32 \
  --per_device_train_batch_size 16 --per_device_eval_batch_size 32 --learning_rate 2e-3 --warmup_steps 10 \
  --max_steps 120 --logging_steps 10 --sampler sortish --n_val 50 --do_train --do_eval \
  --predict_with_generate --generation_num_beams 4 --generation_max_length 32 \
  --output_dir out/demo --overwrite_output_dir
# Built in parallel, and only for what this machine can run: without a visible GPU the CUDA
# kernels (minutes of nvcc) are skipped and the objects go to build-cpu/, so that `make test`
# (build/, CUDA whenever nvcc exists) neither reuses nor is confused by them. That build is for
# this CPU (-O3 -march=native: twice as fast on the dev machine's AVX2, and bit-identical, since
# -std=c11 forbids contracting a*b+c and nothing reassociates sums).
NPROC = $(shell nproc 2>/dev/null || echo 2)
# the demo's flags, for tests/readme_demo.sh (which checks README's demo block against a run)
demo-flags:
	@echo '$(DEMO_FLAGS)'

demo: deps
	@if [ "$(CUDA)" = 1 ] || { [ -z "$(CUDA)" ] && nvidia-smi -L >/dev/null 2>&1; }; then \
	  $(MAKE) --no-print-directory -j$(NPROC) all; \
	else \
	  echo "make demo: no GPU visible (or CUDA=0): a CPU-only build in build-cpu/ (make demo CUDA=1 builds the CUDA backend too)"; \
	  $(MAKE) --no-print-directory -j$(NPROC) BUILD=build-cpu HAVE_NVCC=0 OPT="-O3 -march=native -g" all; \
	fi
	./train_t5 $(DEMO_FLAGS)

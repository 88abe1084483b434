// trainer/args_device.c: the device and precision checks of the flags (see args.h), in
// one place: --device, fp16/bf16 from a flag or --deepspeed's config, --tf32, --max_gpu_memory
// and --num_gpus against the device and the GPUs visible (a dry run, --explain, plans GPU
// lines without them); bf16 and TF32 against the GPU's compute capability; each error says
// where the setting came from. They run once the DeepSpeed config is loaded (its fp16/bf16
// "enabled").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "args.h"
#include "device.h"

void train_args_take_ds_precision(TrainArgs *a, const DsConfig *c) {
    static char fp16_from[DS_PATH_MAX + 32], bf16_from[DS_PATH_MAX + 32];
    if (c->fp16.enabled.is_set && !c->fp16.enabled.is_auto && c->fp16.enabled.v && !(a->ds_flag_mask & DS_FLAG_FP16)) {
        snprintf(fp16_from, sizeof fp16_from, "%s: fp16.enabled", c->file);
        a->fp16 = 1;
        a->fp16_from = fp16_from;
    }
    if (c->bf16.enabled.is_set && !c->bf16.enabled.is_auto && c->bf16.enabled.v && !(a->ds_flag_mask & DS_FLAG_BF16)) {
        snprintf(bf16_from, sizeof bf16_from, "%s: bf16.enabled", c->file);
        a->bf16 = 1;
        a->bf16_from = bf16_from;
    }
}

static int from_config(const char *from) { return strstr(from, ": ") != NULL; }

void train_args_resolve_dry_run_device(TrainArgs *a) {
    if (!a->explain || strncmp(a->device_from, "default", 7) != 0 || !strcmp(a->device, "cuda")) return;
    const char *why = a->fp16 ? a->fp16_from : a->bf16 ? a->bf16_from : a->num_gpus > 0 ? "--num_gpus"
                      : a->max_gpu_memory > 0 ? "--max_gpu_memory" : a->tf32 == 1 ? "--tf32" : NULL;
    if (!why) return;
    static char from[DS_PATH_MAX + 160];
    snprintf(from, sizeof from, "default of a dry run: %s asks for a GPU, and --explain plans it without one", why);
    a->device = "cuda";
    a->device_from = from;
}

void train_args_check_gpu(const TrainArgs *a, const GpuInfo *g) {
    if (a->bf16) gpu_arch_require_precision(g, "bf16", a->bf16_from);
    if (a->tf32 == 1) gpu_arch_require_precision(g, "tf32", "--tf32");
    if (a->fp8) gpu_arch_require_precision(g, "fp8", "--fp8");
}

void train_args_check_device(const TrainArgs *a) {
    int cuda = !strcmp(a->device, "cuda"), defaulted = !strncmp(a->device_from, "default", 7);
    if (a->tf32 == 1 && !cuda)  // HF's refusal (training_args.py), with the device named
        t5_fail("--tf32 requires Ampere or a newer GPU arch (--device cuda), but the device is cpu (%s); HINT: drop "
                "--tf32: the CPU computes in exact fp32", a->device_from);
    // a dry run plans for GPUs it does not need: --num_gpus N and --device cuda on any machine and build
    int dry_gpu = a->explain && cuda;
    if (a->num_gpus > 0 && (!cuda || (!dry_gpu && device_gpu_count() < a->num_gpus))) {
        int gpus = device_gpu_count();
        if (!device_cuda_built())
            t5_fail("--num_gpus %d: this train_t5 was built without CUDA (nvcc not found at build time); HINT: to train "
                    "on the CPU drop --num_gpus (one rank), or run CPU ranks under mpirun: mpirun -np %d ./train_t5 ... "
                    "--device cpu", a->num_gpus, a->num_gpus);
        if (!cuda && !defaulted)
            t5_fail("--num_gpus %d with %s: --num_gpus starts GPU ranks (NCCL); several CPU ranks run only under "
                    "mpirun (MPI is their transport): mpirun -np %d ./train_t5 ... --device cpu", a->num_gpus,
                    a->device_from, a->num_gpus);
        if (gpus == 0)
            t5_fail("--num_gpus %d: no GPU is visible (the CUDA runtime finds none; CUDA_VISIBLE_DEVICES=%s); HINT: to "
                    "train on the CPU drop --num_gpus (one rank), or run CPU ranks under mpirun: mpirun -np %d "
                    "./train_t5 ... --device cpu", a->num_gpus,
                    getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "(unset)", a->num_gpus);
        t5_fail("--num_gpus %d: only %d GPU%s visible; HINT: --num_gpus %d, or check CUDA_VISIBLE_DEVICES", a->num_gpus,
                gpus, gpus == 1 ? " is" : "s are", gpus);
    }
    if (cuda && !dry_gpu && !device_cuda_built())
        t5_fail("--device cuda: this train_t5 was built without CUDA (nvcc not found at build time; see make's "
                "feature line); HINT: --explain plans a GPU run on any build");
    if (cuda && !dry_gpu && device_gpu_count() == 0)
        t5_fail("--device cuda: no GPU is visible (the CUDA runtime finds none; CUDA_VISIBLE_DEVICES=%s); HINT: drop "
                "--device to train on the CPU, or check nvidia-smi", getenv("CUDA_VISIBLE_DEVICES") ?
                getenv("CUDA_VISIBLE_DEVICES") : "(unset)");
    if (a->fp8 && cuda && !a->bf16)  // the activations around the fp8 GEMMs (HF accelerate's fp8 autocasts to bf16)
        t5_fail("--fp8 on the GPU runs bf16 activations around its fp8 GEMMs: add --bf16 (or bf16.enabled in the "
                "DeepSpeed config)");
    const char *p16 = a->fp16 ? a->fp16_from : a->bf16 ? a->bf16_from : NULL;
    if (p16 && !cuda) {
        if (from_config(p16))
            t5_fail("%s is true, which needs a GPU (--device cuda), but the device is cpu (%s); HINT: set it to \"auto\" "
                    "(it follows --%s) or false to train in fp32 on the CPU", p16, a->device_from, a->fp16 ? "fp16" : "bf16");
        t5_fail("%s needs a GPU (--device cuda), but the device is cpu (%s): the CPU backend is the fp32 reference", p16,
                a->device_from);
    }
    // a dry run may plan for a GPU of that size from a CPU-only machine (the fp32 plan: the
    // CPU backend's dtype); anything that runs would not be capped, so it is refused
    if (a->max_gpu_memory > 0 && !cuda && !a->explain)
        t5_fail("--max_gpu_memory caps GPU memory: it needs a GPU (--device cuda), but the device is cpu (%s)",
                a->device_from);
    // full evaluation in 16 bits after training in another precision: one backend per run
    if ((a->fp16_full_eval && !a->fp16) || (a->bf16_full_eval && !a->bf16))
        t5_fail("--%s_full_eval after training in %s: switching precision between training and evaluation is not "
                "built; HINT: train with --%s (its evaluation runs in %s too), or evaluate in a run of its own with "
                "--do_eval --%s_full_eval", a->fp16_full_eval ? "fp16" : "bf16", a->fp16 ? "fp16" : a->bf16 ? "bf16" : "fp32",
                a->fp16_full_eval ? "fp16" : "bf16", a->fp16_full_eval ? "fp16" : "bf16",
                a->fp16_full_eval ? "fp16" : "bf16");
}

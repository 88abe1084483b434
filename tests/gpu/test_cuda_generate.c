// tests/gpu/test_cuda_generate.c: generation on the CUDA backend in fp32 against the same
// Hugging Face fixtures as the CPU (tests/fixtures/generate_*): greedy and beam search token
// for token, the KV-cache steps against the full forward, the device candidate selection.
// The checks are tests/test_generate.c's, compiled here with the CUDA backend.
// Run from the repository root on a machine with a GPU (make test-gpu).
#define TEST_GENERATE_CUDA 1
#include "../test_generate.c"

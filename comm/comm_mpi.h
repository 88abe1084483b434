// comm/comm_mpi.h: internal to comm/: the MPI check macro shared by comm.c (start-up) and
// comm_mpi.c (the MPI table), and the MPI table's host-array entries, which the NCCL
// table (comm_nccl.cu) calls for GPU ranks started under mpirun.
#pragma once
#include <mpi.h>

#include "../common/check.h"
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define mpiCheck(call)                                                                                  \
    do {                                                                                                \
        int rc_ = (call);                                                                               \
        if (rc_ != MPI_SUCCESS) {                                                                       \
            char msg_[MPI_MAX_ERROR_STRING + 64];                                                      \
            int len_ = 0;                                                                               \
            MPI_Error_string(rc_, msg_, &len_);                                                         \
            t5_die(__FILE__, __LINE__, msg_, "an MPI rank failed or the launcher lost a process; check " \
                                              "the other ranks' output");                               \
        }                                                                                               \
    } while (0)

#ifdef __cplusplus
}
#endif

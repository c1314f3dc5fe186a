// Package mpi is goccl's MPI backend: with GOCCL_BACKEND=mpi (or
// goccl.WithBackend("mpi")) a communicator's collectives and barriers run
// as MPI's blocking calls (MPI_Allreduce, MPI_Bcast, ...), or with
// GOCCL_MPI_WAIT=poll as its nonblocking ones (MPI_Iallreduce, ...)
// tested until they complete, and its sends and receives as MPI_Isend and
// MPI_Irecv, while goccl keeps its own front: argument checks, the call's
// order, fingerprints, the deadline, the flight recorder and the comms
// logger (package backend).
//
// Blocking or polled: Open MPI runs its blocking collectives with other
// algorithms than its nonblocking ones (4.1's tuned module against
// libnbc), on one host 3x faster at 8 bytes, 1.3-1.8x from 1 KiB to 64 KiB
// and about 2x from 256 KiB (BENCHMARKS.md; MPICH's were not timed), so
// the blocking calls are the default. A blocking
// call cannot return at its deadline: a watchdog (backend.Blocker) names
// the rank behind, writes the error to standard error and ends the job
// with MPI_Abort, as torch.distributed's NCCL watchdog ends the process.
// A polled call returns the error to its caller instead, and Close ends
// the job. Either way a job whose MPI call was abandoned cannot go on.
//
// It is cgo against mpi.h and is compiled only with the build tag mpi
// (`go build -tags mpi`, with Open MPI's or MPICH's headers and library
// where pkg-config finds them: ompi-c, or mpich with -tags mpi,mpich).
// Without the tag this package is empty, nothing links MPI, and asking
// for the backend fails with "goccl built without -tags mpi". Tested, by
// scripts/mpi-check.sh, with Debian bookworm's Open MPI 4.1.4 (under
// mpirun) and MPICH 4.0.2 (under its Hydra mpiexec, mpiexec.mpich), at 2
// and 4 ranks. Library says which MPI a process runs on.
//
// What it maps, and what it does not:
//   - Host buffers only: a device buffer with backend mpi is ErrInvalid.
//   - DTypes one to one: float32 MPI_FLOAT, float64 MPI_DOUBLE, int8..uint64
//     MPI_INT8_T..MPI_UINT64_T, bool MPI_C_BOOL, complex64
//     MPI_C_FLOAT_COMPLEX, complex128 MPI_C_DOUBLE_COMPLEX. float16 and
//     bfloat16 have no standard MPI type: their calls run on goccl's own
//     path (over goccl's links, which the ranks keep beside MPI).
//   - Ops: Sum, Prod, Min, Max as MPI_SUM..MPI_MAX; BAnd, BOr, BXor as
//     MPI_BAND, MPI_BOR, MPI_BXOR, and on bool as MPI_LAND, MPI_LOR,
//     MPI_LXOR; Avg is MPI_SUM and goccl divides.
//   - Reductions the library gets wrong run on goccl's own path: at init
//     each integer and bool dtype is reduced by each op with
//     MPI_Reduce_local and compared with goccl's host kernel. MPICH 4.0.2
//     orders unsigned types as signed, so there uint8..uint64 Min and Max
//     are goccl's (WrongReductions lists them); Open MPI 4.1.4 passes.
//   - Counts above MPI's int (2^31-1 elements) run on goccl's own path,
//     and so do sends and receives whose tag is above the library's
//     MPI_TAG_UB (MPICH's is 2^28-1, goccl's MaxTag 2^31-1).
//   - Groups are MPI_Comm_split of their parent.
//
// Threads: MPI_Init_thread asks for MPI_THREAD_MULTIPLE; when it is not
// granted (or GOCCL_MPI_THREAD=serialized asks so), every MPI call runs
// on one goroutine locked to its OS thread, the one that initialized MPI.
// Both tested MPIs grant MPI_THREAD_MULTIPLE. goccl's own links, which
// under this backend carry the fingerprint check, poll and yield the core
// (GOCCL_SPIN=yield, unless GOCCL_SPIN is set): a rank bound to one core
// shares it between MPI's call and goccl's waits, and polls that kept
// the core cost a blocking 1 MiB allreduce half its speed.
//
// Signals: the backend sets OMPI_MCA_opal_signal empty (unless it is
// set), so that Open MPI installs no handler of SIGSEGV, SIGBUS, ... in
// place of the Go runtime's; MPICH reads no such variable and needs none.
// Under both the suite checks that a nil dereference after MPI_Init is
// still Go's panic, which recover catches.
//
// A call that reaches its deadline, or that is under the communicator
// when it aborts, is abandoned in MPI, which cannot take back a
// collective in flight. Polled (GOCCL_MPI_WAIT=poll), the call returns
// goccl's error (ErrTimeout naming the rank behind, ErrMismatch, ...),
// later calls fail at once, and Close ends the job with MPI_Abort; the
// abandoned request keeps its buffers pinned until then (MPI may still
// write them).
// Blocking (the default), the watchdog reports that error ("goccl: ...
// ending the job") and calls MPI_Abort at once. A timed-out MPI job
// cannot continue.
//
// MPICH 4.0.2's blocking MPI_Reduce with MPI_IN_PLACE at a root other
// than 0 faults from about 2 KiB (a C program alone shows it; its
// MPI_Ireduce does not): under -tags mpich the root reduces from a copy.
package mpi

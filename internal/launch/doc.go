// Package launch implements environment discovery for goccl.Init: it
// reads the rank, world size, local rank and rendezvous address that a
// launcher (goccl run, torchrun, Open MPI's mpirun, MPICH's mpiexec, Slurm's
// srun, a Kubernetes job) leaves in each process's environment.
//
// Discover tries Open MPI, then torchrun-style variables, then PMI, then
// Slurm, and fills in MASTER_ADDR and MASTER_PORT when the launcher does
// not set them and a safe choice exists: the first node of a Slurm step,
// or the loopback when every rank runs on one machine, with a port hashed
// from the job's identity so that two jobs on one node do not collide.
// ExpandNodeList expands Slurm's compressed host lists.
//
// The package is internal: its API may change with goccl.Init's needs.
package launch

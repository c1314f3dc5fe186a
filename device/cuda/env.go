package cuda

import (
	"os"
	"strconv"
)

// LocalDevice returns the device ordinal this process should use: its local
// rank, read from the first of LOCAL_RANK (torchrun), OMPI_COMM_WORLD_LOCAL_RANK
// (Open MPI), MPI_LOCALRANKID (MPICH) and SLURM_LOCALID (Slurm) that is set to
// a non-negative integer, or 0 when none is.
func LocalDevice() int {
	for _, k := range []string{"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"} {
		if v, ok := os.LookupEnv(k); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				return n
			}
		}
	}
	return 0
}

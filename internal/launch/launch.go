package launch

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Info is what a process learns about its place in the job from the
// environment its launcher set.
type Info struct {
	Rank, Size int // this process's rank in [0, Size)
	// LocalRank and LocalSize place the process among the ranks on its
	// machine; both are -1 when the launcher does not say.
	LocalRank, LocalSize int
	// MasterAddr and MasterPort are where rank 0 hosts the rendezvous
	// store.
	MasterAddr string
	MasterPort int
	// Source names the launcher recognised: "torchrun", "openmpi", "pmi"
	// or "slurm".
	Source string
}

// DefaultPort is the rendezvous port when MASTER_PORT is unset and the
// launcher offers nothing to derive one from (torch.distributed's default).
const DefaultPort = 29500

// Derived ports fall in [portBase, portBase+portSpan) = [20000, 32000):
// above the usual service ports and below Linux's default ephemeral range
// (32768-60999), so that no outgoing connection holds the port by chance.
const (
	portBase = 20000
	portSpan = 12000
)

// ErrNotFound is wrapped by Discover's error when no launcher's variables
// are present.
var ErrNotFound = errors.New("no launcher environment found")

// Variables Discover reads, in the order it tries them.
var (
	ompiVars     = []string{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}
	torchrunVars = []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
	pmiVars      = []string{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}
	slurmVars    = []string{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"}
)

// Discover reads the rank, size and rendezvous address that a launcher
// left in the environment, through getenv (os.Getenv in production, a map
// in tests). It tries, in order:
//
//   - Open MPI (mpirun): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
//     _LOCAL_SIZE. Tried first because mpirun inside an salloc allocation
//     also inherits the job's SLURM_* variables.
//   - torchrun and Kubernetes jobs: RANK, WORLD_SIZE, LOCAL_RANK,
//     LOCAL_WORLD_SIZE.
//   - MPICH/Hydra PMI: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID,
//     MPI_LOCALNRANKS.
//   - Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the
//     local size from SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE)
//     at SLURM_NODEID.
//
// MASTER_ADDR and MASTER_PORT win when set. Otherwise: under Slurm the
// address is the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST)
// and the port is derived from SLURM_JOB_ID and SLURM_STEP_ID; under
// Open MPI or PMI with every rank on one machine the address is 127.0.0.1
// and the port is derived from the job's namespace (Hydra, MPICH's
// mpiexec, sets none: the port is DefaultPort, and two such jobs at once
// on one machine need MASTER_PORT); with ranks on several
// machines there is no safe guess and Discover asks for MASTER_ADDR.
// Derived ports lie in [20000, 32000), below Linux's ephemeral ports, so that two jobs sharing a machine
// do not pick the same one.
func Discover(getenv func(string) string) (Info, error) {
	switch {
	case getenv("OMPI_COMM_WORLD_RANK") != "":
		return discoverMPI(getenv, "openmpi", ompiVars,
			[]string{"PMIX_NAMESPACE", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid"}, "mpirun -x MASTER_ADDR -x MASTER_PORT")
	case getenv("RANK") != "" || getenv("WORLD_SIZE") != "":
		return discoverTorchrun(getenv)
	// srun --mpi=pmi2 sets PMI_RANK and PMI_SIZE equal to Slurm's own: then
	// Slurm, which also knows the node list, describes the job better.
	case getenv("PMI_RANK") != "" && !(getenv("SLURM_PROCID") == getenv("PMI_RANK") && getenv("SLURM_NTASKS") == getenv("PMI_SIZE")):
		return discoverMPI(getenv, "pmi", pmiVars,
			[]string{"PMI_KVSNAME", "PMIX_NAMESPACE", "PMI_JOBID"}, "mpiexec -genv MASTER_ADDR <host> -genv MASTER_PORT <port>")
	case getenv("SLURM_PROCID") != "":
		return discoverSlurm(getenv)
	}
	var all []string
	for _, vs := range [][]string{ompiVars, torchrunVars, pmiVars, slurmVars} {
		all = append(all, vs...)
	}
	all = append(all, "MASTER_ADDR", "MASTER_PORT")
	return Info{}, fmt.Errorf("launch: %w: none of %s is set; start the program with goccl run, torchrun, mpirun, mpiexec or srun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT",
		ErrNotFound, strings.Join(all, ", "))
}

// intVar parses the variable name; a missing one is an error when
// required, else -1.
func intVar(getenv func(string) string, name string, required bool) (int, error) {
	s := getenv(name)
	if s == "" {
		if required {
			return 0, fmt.Errorf("%s is not set", name)
		}
		return -1, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not an integer", name, s)
	}
	return n, nil
}

// readCounts reads rank, size, local rank and local size from vars; the
// local pair is optional.
func readCounts(getenv func(string) string, source string, vars []string) (Info, error) {
	inf := Info{Source: source}
	var err error
	for i, dst := range []*int{&inf.Rank, &inf.Size, &inf.LocalRank, &inf.LocalSize} {
		if *dst, err = intVar(getenv, vars[i], i < 2); err != nil {
			return Info{}, fmt.Errorf("launch: %s environment: %w", source, err)
		}
	}
	return inf, nil
}

func (inf *Info) check(vars []string) error {
	switch {
	case inf.Size < 1:
		return fmt.Errorf("launch: %s environment: %s=%d, want at least 1", inf.Source, vars[1], inf.Size)
	case inf.Rank < 0 || inf.Rank >= inf.Size:
		return fmt.Errorf("launch: %s environment: %s=%d is not in [0, %d)", inf.Source, vars[0], inf.Rank, inf.Size)
	case (inf.LocalRank < 0) != (inf.LocalSize < 0):
		if inf.LocalRank < 0 {
			return fmt.Errorf("launch: %s environment: %s is set but %s is not", inf.Source, vars[3], vars[2])
		}
		return fmt.Errorf("launch: %s environment: %s is set but the local size is unknown", inf.Source, vars[2])
	case inf.LocalSize > inf.Size:
		return fmt.Errorf("launch: %s environment: local size %d exceeds %s=%d", inf.Source, inf.LocalSize, vars[1], inf.Size)
	case inf.LocalRank >= 0 && inf.LocalRank >= inf.LocalSize:
		return fmt.Errorf("launch: %s environment: %s=%d is not below the local size %d", inf.Source, vars[2], inf.LocalRank, inf.LocalSize)
	}
	return nil
}

// masterFromEnv fills MasterAddr and MasterPort from MASTER_ADDR and
// MASTER_PORT where set.
func (inf *Info) masterFromEnv(getenv func(string) string) error {
	inf.MasterAddr = strings.TrimSpace(getenv("MASTER_ADDR"))
	if s := getenv("MASTER_PORT"); s != "" {
		p, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("launch: MASTER_PORT=%q is not a port number", s)
		}
		inf.MasterPort = p
	}
	return nil
}

// derivePort hashes s into [portBase, portBase+portSpan).
func derivePort(s string) int {
	h := fnv.New32a()
	h.Write([]byte(s))
	return portBase + int(h.Sum32()%portSpan)
}

func discoverTorchrun(getenv func(string) string) (Info, error) {
	inf, err := readCounts(getenv, "torchrun", torchrunVars)
	if err != nil {
		return Info{}, err
	}
	if err := inf.check(torchrunVars); err != nil {
		return Info{}, err
	}
	if err := inf.masterFromEnv(getenv); err != nil {
		return Info{}, err
	}
	if inf.MasterAddr == "" {
		if inf.Size > 1 {
			return Info{}, fmt.Errorf("launch: torchrun environment: RANK and WORLD_SIZE are set but MASTER_ADDR is not")
		}
		inf.MasterAddr = "127.0.0.1"
	}
	if inf.MasterPort == 0 {
		inf.MasterPort = DefaultPort
	}
	return inf, nil
}

// discoverMPI serves Open MPI and PMI: the same shape, different names.
func discoverMPI(getenv func(string) string, source string, vars, nsVars []string, hint string) (Info, error) {
	inf, err := readCounts(getenv, source, vars)
	if err != nil {
		return Info{}, err
	}
	if err := inf.check(vars); err != nil {
		return Info{}, err
	}
	if err := inf.masterFromEnv(getenv); err != nil {
		return Info{}, err
	}
	if inf.MasterAddr == "" {
		if inf.LocalSize != inf.Size {
			return Info{}, fmt.Errorf("launch: %s environment: the %d ranks span several machines (or %s is unset) and MASTER_ADDR is not set; pass rank 0's host, e.g. %s",
				source, inf.Size, vars[3], hint)
		}
		inf.MasterAddr = "127.0.0.1"
	}
	if inf.MasterPort == 0 {
		inf.MasterPort = DefaultPort
		for _, v := range nsVars {
			if ns := getenv(v); ns != "" {
				inf.MasterPort = derivePort(source + "/" + ns)
				break
			}
		}
	}
	return inf, nil
}

func discoverSlurm(getenv func(string) string) (Info, error) {
	inf, err := readCounts(getenv, "slurm", []string{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_LOCALID"})
	if err != nil {
		return Info{}, err
	}
	inf.LocalSize = -1
	if inf.LocalRank >= 0 {
		if inf.LocalSize, err = slurmLocalSize(getenv); err != nil {
			return Info{}, err
		}
	}
	if err := inf.check(slurmVars); err != nil {
		return Info{}, err
	}
	if err := inf.masterFromEnv(getenv); err != nil {
		return Info{}, err
	}
	if inf.MasterAddr == "" {
		var list, name string
		for _, v := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
			if list = getenv(v); list != "" {
				name = v
				break
			}
		}
		if list == "" {
			return Info{}, fmt.Errorf("launch: slurm environment: neither MASTER_ADDR nor SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST is set")
		}
		hosts, err := ExpandNodeList(list)
		if err != nil {
			return Info{}, fmt.Errorf("launch: slurm environment: %s: %w", name, err)
		}
		inf.MasterAddr = hosts[0]
	}
	if inf.MasterPort == 0 {
		job := getenv("SLURM_JOB_ID")
		if job == "" {
			job = getenv("SLURM_JOBID")
		}
		if job == "" {
			inf.MasterPort = DefaultPort
		} else {
			inf.MasterPort = derivePort("slurm/" + job + "." + getenv("SLURM_STEP_ID"))
		}
	}
	return inf, nil
}

// slurmLocalSize finds the number of tasks on this node: entry
// SLURM_NODEID of SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE),
// else SLURM_NTASKS_PER_NODE, else -1.
func slurmLocalSize(getenv func(string) string) (int, error) {
	node, err := intVar(getenv, "SLURM_NODEID", false)
	if err != nil {
		return 0, fmt.Errorf("launch: slurm environment: %w", err)
	}
	if node >= 0 {
		for _, v := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
			s := getenv(v)
			if s == "" {
				continue
			}
			counts, err := ExpandTasksPerNode(s)
			if err != nil {
				return 0, fmt.Errorf("launch: slurm environment: %s: %w", v, err)
			}
			if node >= len(counts) {
				return 0, fmt.Errorf("launch: slurm environment: SLURM_NODEID=%d but %s=%q lists %d nodes", node, v, s, len(counts))
			}
			return counts[node], nil
		}
	}
	n, err := intVar(getenv, "SLURM_NTASKS_PER_NODE", false)
	if err != nil {
		return 0, fmt.Errorf("launch: slurm environment: %w", err)
	}
	return n, nil
}

// ExpandTasksPerNode expands Slurm's tasks-per-node notation,
// "2(x3),1" -> [2 2 2 1].
func ExpandTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		num, rep := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasSuffix(part, ")") || !strings.HasPrefix(part[i:], "(x") {
				return nil, fmt.Errorf("bad tasks-per-node entry %q", part)
			}
			num, rep = part[:i], part[i+2:len(part)-1]
		}
		n, err1 := strconv.Atoi(num)
		r, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || n < 0 || r < 1 || r > maxHosts || len(out)+r > maxHosts {
			return nil, fmt.Errorf("bad tasks-per-node entry %q", part)
		}
		for range r {
			out = append(out, n)
		}
	}
	return out, nil
}

package launch

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestExpandNodeList(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"n1", []string{"n1"}},
		{"n1,n2", []string{"n1", "n2"}},
		{"node[1-3,7]", []string{"node1", "node2", "node3", "node7"}},
		{"a[01-03]", []string{"a01", "a02", "a03"}},
		{"a[8-11]", []string{"a8", "a9", "a10", "a11"}},
		{"a[08-11]", []string{"a08", "a09", "a10", "a11"}},
		{"a[5]", []string{"a5"}},
		{"a[3-3]", []string{"a3"}},
		{"rack[1-2]-node[3-4]", []string{"rack1-node3", "rack1-node4", "rack2-node3", "rack2-node4"}},
		{"x,y[1-2],z", []string{"x", "y1", "y2", "z"}},
		{"gpu-[001-002].cluster", []string{"gpu-001.cluster", "gpu-002.cluster"}},
		{"[1-2]", []string{"1", "2"}},
		{"a[1,3],b[2-3]", []string{"a1", "a3", "b2", "b3"}},
	}
	for _, c := range cases {
		got, err := ExpandNodeList(c.in)
		if err != nil {
			t.Errorf("ExpandNodeList(%q): %v", c.in, err)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ExpandNodeList(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestExpandNodeListErrors(t *testing.T) {
	bad := []string{
		"",
		"a,,b",
		",a",
		"a,",
		"node[",
		"node]",
		"node[1-3",
		"node[[1]]",
		"node[]",
		"node[a-b]",
		"node[1-x]",
		"node[-3]",
		"node[3-]",
		"node[5-2]",
		"node[1,,2]",
		"node[+1]",
		"node[1-2-3]",
		"node[99999999999999999999]",
		"node[0-99999999]",
		"a[0-2000]b[0-2000]",
		"a b",
	}
	for _, in := range bad {
		if got, err := ExpandNodeList(in); err == nil {
			t.Errorf("ExpandNodeList(%q) = %d hosts, want an error", in, len(got))
		}
	}
}

func TestExpandTasksPerNode(t *testing.T) {
	cases := []struct {
		in   string
		want []int
		ok   bool
	}{
		{"4", []int{4}, true},
		{"2(x3),1", []int{2, 2, 2, 1}, true},
		{"1,2,3", []int{1, 2, 3}, true},
		{"2(x", nil, false},
		{"2(3)", nil, false},
		{"x", nil, false},
		{"2(x0)", nil, false},
		{"", nil, false},
	}
	for _, c := range cases {
		got, err := ExpandTasksPerNode(c.in)
		if (err == nil) != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("ExpandTasksPerNode(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestDiscover(t *testing.T) {
	slurmJob := map[string]string{
		"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
		"SLURM_STEP_TASKS_PER_NODE": "2(x4)", "SLURM_STEP_NODELIST": "gpu[03-06]",
		"SLURM_JOB_NODELIST": "gpu[01-08]", "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0",
	}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := make(map[string]string)
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	slurmPort := derivePort("slurm/123456.0")
	cases := []struct {
		name string
		env  map[string]string
		want Info
	}{
		{"torchrun", map[string]string{
			"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
		}, Info{3, 8, 1, 2, "10.0.0.1", 29400, "torchrun"}},
		{"kubernetes (no local ranks, no port)", map[string]string{
			"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "job-master-0",
		}, Info{1, 4, -1, -1, "job-master-0", DefaultPort, "torchrun"}},
		{"single process", map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			Info{0, 1, -1, -1, "127.0.0.1", DefaultPort, "torchrun"}},
		{"openmpi one host", map[string]string{
			"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
			"PMIX_NAMESPACE": "prterun-host-1234@1",
		}, Info{2, 4, 2, 4, "127.0.0.1", derivePort("openmpi/prterun-host-1234@1"), "openmpi"}},
		{"openmpi with MASTER_ADDR", map[string]string{
			"OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_SIZE": "8",
			"OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
			"MASTER_ADDR": "head", "MASTER_PORT": "4000",
		}, Info{6, 8, 2, 4, "head", 4000, "openmpi"}},
		{"openmpi inside salloc wins over slurm", with(slurmJob,
			"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2",
			"OMPI_COMM_WORLD_LOCAL_RANK", "0", "OMPI_COMM_WORLD_LOCAL_SIZE", "2",
			"OMPI_MCA_orte_hnp_uri", "123.0;tcp://10.0.0.1:5000"),
			Info{0, 2, 0, 2, "127.0.0.1", derivePort("openmpi/123.0;tcp://10.0.0.1:5000"), "openmpi"}},
		{"openmpi wins over torchrun names", map[string]string{
			"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
			"RANK": "0", "WORLD_SIZE": "1",
		}, Info{1, 2, 1, 2, "127.0.0.1", DefaultPort, "openmpi"}},
		{"torchrun wins over slurm", with(slurmJob, "RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "n1", "MASTER_PORT", "1234"),
			Info{0, 2, -1, -1, "n1", 1234, "torchrun"}},
		{"pmi one host", map[string]string{
			"PMI_RANK": "1", "PMI_SIZE": "3", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3", "PMI_KVSNAME": "kvs_99_0",
		}, Info{1, 3, 1, 3, "127.0.0.1", derivePort("pmi/kvs_99_0"), "pmi"}},
		// What MPICH 4.0.2's mpiexec (Hydra) sets, and no job name: the
		// default port.
		{"mpich hydra", map[string]string{
			"PMI_RANK": "1", "PMI_SIZE": "4", "PMI_FD": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4",
			"HYDI_CONTROL_FD": "7", "MPIR_CVAR_CH3_INTERFACE_HOSTNAME": "vm",
		}, Info{1, 4, 1, 4, "127.0.0.1", DefaultPort, "pmi"}},
		{"pmi wins over slurm", with(slurmJob, "PMI_RANK", "0", "PMI_SIZE", "1"),
			Info{0, 1, -1, -1, "head", 7, "pmi"}},
		{"slurm", slurmJob, Info{5, 8, 1, 2, "gpu03", slurmPort, "slurm"}},
		{"slurm job nodelist only", with(slurmJob, "SLURM_STEP_NODELIST", ""),
			Info{5, 8, 1, 2, "gpu01", slurmPort, "slurm"}},
		{"slurm with MASTER_ADDR", with(slurmJob, "MASTER_ADDR", "login1"),
			Info{5, 8, 1, 2, "login1", slurmPort, "slurm"}},
		{"slurm uneven tasks", with(slurmJob, "SLURM_STEP_TASKS_PER_NODE", "3(x2),1(x2)", "SLURM_NODEID", "3", "SLURM_LOCALID", "0"),
			Info{5, 8, 0, 1, "gpu03", slurmPort, "slurm"}},
		{"slurm job tasks per node", with(slurmJob, "SLURM_STEP_TASKS_PER_NODE", "", "SLURM_TASKS_PER_NODE", "4(x2)", "SLURM_NODEID", "1"),
			Info{5, 8, 1, 4, "gpu03", slurmPort, "slurm"}},
	}
	// "pmi wins over slurm" relies on MASTER_* to keep the expected values simple.
	for i := range cases {
		if cases[i].name == "pmi wins over slurm" {
			cases[i].env["MASTER_ADDR"], cases[i].env["MASTER_PORT"] = "head", "7"
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Discover(env(c.env))
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("Discover = %+v\nwant       %+v", got, c.want)
			}
		})
	}
}

func TestDiscoverSlurmPortsDiffer(t *testing.T) {
	seen := map[int]string{}
	for _, id := range []struct{ job, step string }{{"100", "0"}, {"100", "1"}, {"101", "0"}, {"7", "0"}} {
		inf, err := Discover(env(map[string]string{
			"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_NODELIST": "n1",
			"SLURM_JOB_ID": id.job, "SLURM_STEP_ID": id.step,
		}))
		if err != nil {
			t.Fatal(err)
		}
		if inf.MasterPort < 20000 || inf.MasterPort >= 32000 {
			t.Errorf("job %s.%s: port %d outside [20000, 32000)", id.job, id.step, inf.MasterPort)
		}
		key := id.job + "." + id.step
		if other, dup := seen[inf.MasterPort]; dup {
			t.Errorf("jobs %s and %s share port %d", other, key, inf.MasterPort)
		}
		seen[inf.MasterPort] = key
	}
}

func TestDiscoverErrors(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		contains []string
	}{
		{"nothing", nil, []string{"OMPI_COMM_WORLD_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
			"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "MASTER_ADDR", "MASTER_PORT"}},
		{"rank without size", map[string]string{"RANK": "0"}, []string{"WORLD_SIZE is not set"}},
		{"size without rank", map[string]string{"WORLD_SIZE": "2"}, []string{"RANK is not set"}},
		{"rank not a number", map[string]string{"RANK": "one", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, []string{`RANK="one"`}},
		{"rank out of range", map[string]string{"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, []string{"RANK=2", "[0, 2)"}},
		{"negative rank", map[string]string{"RANK": "-1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, []string{"RANK=-1"}},
		{"zero size", map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, []string{"WORLD_SIZE=0"}},
		{"local rank too big", map[string]string{"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h"}, []string{"LOCAL_RANK=2"}},
		{"local size too big", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "h"}, []string{"local size 3"}},
		{"local rank without local size", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h"}, []string{"LOCAL_RANK is set"}},
		{"torchrun without master", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, []string{"MASTER_ADDR"}},
		{"bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, []string{"MASTER_PORT"}},
		{"port not a number", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "http"}, []string{"MASTER_PORT"}},
		{"openmpi multi-host", map[string]string{
			"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
		}, []string{"-x MASTER_ADDR", "several machines"}},
		{"openmpi without size", map[string]string{"OMPI_COMM_WORLD_RANK": "0"}, []string{"OMPI_COMM_WORLD_SIZE is not set"}},
		{"pmi multi-host", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"},
			[]string{"MASTER_ADDR"}},
		{"slurm without nodelist", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, []string{"SLURM_JOB_NODELIST"}},
		{"slurm bad nodelist", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[3-1]"}, []string{"SLURM_JOB_NODELIST", "n[3-1]"}},
		{"slurm bad tasks per node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
			"SLURM_STEP_TASKS_PER_NODE": "2(y2)", "SLURM_JOB_NODELIST": "n1"}, []string{"SLURM_STEP_TASKS_PER_NODE"}},
		{"slurm node id past the list", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "5",
			"SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "n1"}, []string{"SLURM_NODEID=5"}},
		{"slurm procid not a number", map[string]string{"SLURM_PROCID": "x", "SLURM_NTASKS": "2"}, []string{"SLURM_PROCID"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Discover(env(c.env))
			if err == nil {
				t.Fatalf("Discover = %+v, want an error", got)
			}
			for _, s := range c.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	if _, err := Discover(env(nil)); !errors.Is(err, ErrNotFound) {
		t.Errorf("empty environment: err = %v, want ErrNotFound", err)
	}
}

func ExampleExpandNodeList() {
	hosts, err := ExpandNodeList("gpu[01-03],login1,rack[1-2]-n[7,9]")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(hosts)
	// Output: [gpu01 gpu02 gpu03 login1 rack1-n7 rack1-n9 rack2-n7 rack2-n9]
}

func ExampleDiscover() {
	env := map[string]string{ // as srun sets it for task 5 of 8
		"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
		"SLURM_STEP_TASKS_PER_NODE": "2(x4)", "SLURM_STEP_NODELIST": "gpu[03-06]",
		"MASTER_PORT": "29500",
	}
	inf, err := Discover(func(k string) string { return env[k] })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: rank %d of %d, local %d of %d, store at %s:%d\n",
		inf.Source, inf.Rank, inf.Size, inf.LocalRank, inf.LocalSize, inf.MasterAddr, inf.MasterPort)
	// Output: slurm: rank 5 of 8, local 1 of 2, store at gpu03:29500
}

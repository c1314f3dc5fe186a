package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the program `goccl run` starts: with
// GOCCL_RUN_TEST_CHILD set, TestRunHelperProcess plays a rank instead of
// testing. No TestMain is needed.
const childEnv = "GOCCL_RUN_TEST_CHILD"

// childArgs is the command line that runs this test binary as a rank.
func childArgs(t *testing.T) []string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "-test.run=^TestRunHelperProcess$"}
}

func TestRunHelperProcess(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("only runs as a child of goccl run")
	}
	os.Exit(child(mode))
}

// child plays one rank. The modes:
//
//	echo    print the environment to stdout, a line to stderr, exit 0
//	fail    rank GOCCL_TEST_FAIL_RANK waits until the others have written
//	        their pid files, then exits with code 3; the others start a
//	        grandchild and block
//	block   write pid files and block
//	sleep   (grandchild) block
//	cpus    print the CPUs the rank may run on
//	watch   rank GOCCL_TEST_VICTIM listens on MASTER_PORT and blocks; the
//	        others connect to it, write pid files and block reading: when
//	        the victim dies they exit 1 at once, as ranks that see a peer
//	        close do
//	pingpong  as watch, but the others send a byte and wait for its echo
//	        in a loop, as ranks running collectives with the victim do
//	bench   goccl bench with the arguments in GOCCL_TEST_BENCH_ARGS
func child(mode string) int {
	rank := os.Getenv("RANK")
	dir := os.Getenv("GOCCL_TEST_DIR")
	if os.Getenv("GOCCL_TEST_IGNORE_TERM") == rank {
		signal.Ignore(syscall.SIGTERM)
	}
	switch mode {
	case "bench":
		return benchMain(context.Background(), strings.Fields(os.Getenv("GOCCL_TEST_BENCH_ARGS")), os.Stdout, os.Stderr)
	case "cpus":
		fmt.Printf("cpus %v\n", allowedCPUs())
		return 0
	case "echo":
		fmt.Printf("env %s %s %s %s %s %s %s %s\n", rank, os.Getenv("WORLD_SIZE"), os.Getenv("LOCAL_RANK"),
			os.Getenv("LOCAL_WORLD_SIZE"), os.Getenv("GROUP_RANK"), os.Getenv("NODE_RANK"),
			os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
		for i := range 50 {
			fmt.Printf("line %d of rank %s %s\n", i, rank, strings.Repeat("x", 100))
		}
		fmt.Fprintf(os.Stderr, "to stderr from %s\n", rank)
		fmt.Print("no newline")
		return 0
	case "fail", "block":
		if mode == "fail" && rank == os.Getenv("GOCCL_TEST_FAIL_RANK") {
			n, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
			for { // wait for the other ranks' and grandchildren's pid files
				m, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
				if len(m) >= 2*(n-1) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			fmt.Println("failing")
			return 3
		}
		gc := exec.Command(os.Args[0], os.Args[1:]...)
		gc.Env = append(os.Environ(), childEnv+"=sleep")
		gc.Stdout = os.Stdout
		if err := gc.Start(); err != nil {
			fmt.Println(err)
			return 1
		}
		writePid(dir, "rank"+rank, os.Getpid())
		writePid(dir, "grandchild"+rank, gc.Process.Pid)
		select {}
	case "sleep":
		select {}
	case "watch", "pingpong":
		return peerChild(mode, rank, dir)
	}
	return 99
}

// peerChild plays a rank of the watch and pingpong modes.
func peerChild(mode, rank, dir string) int {
	n, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	victim := os.Getenv("GOCCL_TEST_VICTIM")
	addr := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
	if rank == victim {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		for range n - 1 {
			c, err := ln.Accept()
			if err != nil {
				fmt.Println(err)
				return 1
			}
			go io.Copy(c, c) // echo
		}
		writePid(dir, "peer"+rank, os.Getpid())
		select {} // until killed
	}
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Println(err)
			return 1
		}
		time.Sleep(5 * time.Millisecond) // the victim is not listening yet
	}
	writePid(dir, "peer"+rank, os.Getpid())
	buf := make([]byte, 1)
	for {
		var err error
		if mode == "pingpong" {
			_, err = c.Write(buf)
		}
		if err == nil {
			_, err = io.ReadFull(c, buf)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %s: peer %s: %v\n", rank, victim, err)
			return 1
		}
	}
}

// writePid writes a pid file atomically (a temp file, then a rename), so
// that a test that sees the file also sees its contents.
func writePid(dir, name string, pid int) {
	tmp := filepath.Join(dir, name+".tmp")
	os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o600)
	os.Rename(tmp, filepath.Join(dir, name+".pid"))
}

// alive reports whether pid names a process that has not exited (a zombie
// counts as exited).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func runChildren(t *testing.T, ctx context.Context, mode string, flags []string, env ...string) (code int, stdout, stderr string, dir string) {
	t.Helper()
	dir = t.TempDir()
	t.Setenv(childEnv, mode)
	t.Setenv("GOCCL_TEST_DIR", dir)
	for i := 0; i+1 < len(env); i += 2 {
		t.Setenv(env[i], env[i+1])
	}
	var out, errb testutil.Buffer
	args := append(append(slices.Clone(flags), "--"), childArgs(t)...)
	code = runCommand(ctx, args, &out, &errb, nil)
	return code, out.String(), errb.String(), dir
}

func TestRunPrefixesAndEnv(t *testing.T) {
	code, out, errOut, _ := runChildren(t, context.Background(), "echo", []string{"-n", "3"},
		"OMPI_COMM_WORLD_RANK", "7") // must not leak into the ranks
	if code != 0 {
		t.Fatalf("exit code %d, stderr:\n%s", code, errOut)
	}
	lineRE := regexp.MustCompile(`^\[([0-2])\] (.*)$`)
	ports := map[string]bool{}
	perRank := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		m := lineRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line without a rank prefix: %q", line)
		}
		rank, body := m[1], m[2]
		perRank[rank]++
		switch {
		case strings.HasPrefix(body, "env "):
			f := strings.Fields(body)
			want := []string{"env", rank, "3", rank, "3", "0", "0", "127.0.0.1"}
			if !slices.Equal(f[:8], want) {
				t.Errorf("rank %s env = %q, want %q", rank, f[:8], want)
			}
			if p, err := strconv.Atoi(f[8]); err != nil || p <= 0 {
				t.Errorf("rank %s MASTER_PORT = %q", rank, f[8])
			}
			ports[f[8]] = true
		case strings.HasPrefix(body, "line "):
			if !strings.Contains(body, "of rank "+rank+" ") || !strings.HasSuffix(body, strings.Repeat("x", 100)) {
				t.Errorf("mangled line from rank %s: %q", rank, body)
			}
		case body == "no newline":
		default:
			t.Errorf("unexpected line %q", line)
		}
	}
	for r := range 3 {
		if n := perRank[strconv.Itoa(r)]; n != 52 {
			t.Errorf("rank %d printed %d lines, want 52", r, n)
		}
	}
	if len(ports) != 1 {
		t.Errorf("ranks disagree on MASTER_PORT: %v", ports)
	}
	for r := range 3 {
		if want := fmt.Sprintf("[%d] to stderr from %d\n", r, r); !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestRunMultiNodeEnv(t *testing.T) {
	code, out, errOut, _ := runChildren(t, context.Background(), "echo",
		[]string{"-n", "2", "-nnodes", "3", "-node-rank", "1", "-master-addr", "head", "-master-port", "4567"})
	if code != 0 {
		t.Fatalf("exit code %d, stderr:\n%s", code, errOut)
	}
	for _, want := range []string{
		"[2] env 2 6 0 2 1 1 head 4567\n",
		"[3] env 3 6 1 2 1 1 head 4567\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// pids reads the pid files the ranks wrote.
func pids(t *testing.T, dir, prefix string) []int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, prefix+"*.pid"))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

func checkAllGone(t *testing.T, dir string, wantRanks int) {
	t.Helper()
	ranks, grand := pids(t, dir, "rank"), pids(t, dir, "grandchild")
	if len(ranks) != wantRanks || len(grand) != wantRanks {
		t.Fatalf("found %d rank and %d grandchild pid files, want %d each", len(ranks), len(grand), wantRanks)
	}
	for _, pid := range append(ranks, grand...) {
		// The grandchildren are reaped by init, not by us: allow it a moment.
		deadline := time.Now().Add(10 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("process %d still runs after goccl run returned", pid)
		}
	}
}

func TestRunFailureStopsOthers(t *testing.T) {
	cases := []struct {
		name  string
		env   []string
		ranks int
	}{
		{"sigterm", []string{"GOCCL_TEST_FAIL_RANK", "1"}, 4},
		{"rank ignores sigterm", []string{"GOCCL_TEST_FAIL_RANK", "0", "GOCCL_TEST_IGNORE_TERM", "2"}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut, dir := runChildren(t, context.Background(), "fail",
				[]string{"-n", strconv.Itoa(c.ranks), "-grace", "200ms"}, c.env...)
			if code != 3 {
				t.Fatalf("exit code %d, want 3 (the failing rank's); stdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			fail := c.env[1]
			if !strings.Contains(out, "["+fail+"] failing\n") {
				t.Errorf("stdout lacks the failing rank's line:\n%s", out)
			}
			if !strings.Contains(errOut, "goccl run: rank "+fail+" exited with code 3; stopping the other ranks\n") {
				t.Errorf("stderr does not name the failing rank:\n%s", errOut)
			}
			if want := regexp.MustCompile(`goccl run: ranks? [0-9, -]+ stopped because of rank ` + fail + `: .*killed by signal (9|15)`); !want.MatchString(errOut) {
				t.Errorf("stderr does not list the stopped ranks (%v):\n%s", want, errOut)
			}
			checkAllGone(t, dir, c.ranks-1)
		})
	}
}

// A rank killed from outside is the one goccl run blames, not the ranks
// that exit 1 moments later because their peer died, whatever the order in
// which their exits reach the launcher (issue 20). The survivors notice the
// victim's closed connection within microseconds and exit at once, so their
// exits race the victim's every time.
func TestRunBlamesKilledRank(t *testing.T) {
	const (
		n      = 4
		victim = 2
		runs   = 20
	)
	for _, mode := range []string{"watch", "pingpong"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv(childEnv, mode)
			t.Setenv("GOCCL_TEST_VICTIM", strconv.Itoa(victim))
			for i := range runs {
				dir := filepath.Join(t.TempDir(), strconv.Itoa(i))
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				t.Setenv("GOCCL_TEST_DIR", dir)
				done := make(chan struct{})
				killed := make(chan error, 1)
				go func() { // SIGKILL the victim once every rank is connected
					for {
						select {
						case <-done:
							killed <- fmt.Errorf("goccl run returned before the ranks were up")
							return
						case <-time.After(2 * time.Millisecond):
						}
						if m, _ := filepath.Glob(filepath.Join(dir, "peer*.pid")); len(m) < n {
							continue
						}
						b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("peer%d.pid", victim)))
						if err == nil {
							var pid int
							if pid, err = strconv.Atoi(string(b)); err == nil {
								err = syscall.Kill(pid, syscall.SIGKILL)
							}
						}
						killed <- err
						return
					}
				}()
				var out, errb testutil.Buffer
				args := append([]string{"-n", strconv.Itoa(n), "-grace", "2s", "--"}, childArgs(t)...)
				code := runCommand(context.Background(), args, &out, &errb, nil)
				close(done)
				if err := <-killed; err != nil {
					t.Fatalf("run %d: killing rank %d: %v\nstdout:\n%s\nstderr:\n%s", i, victim, err, out.String(), errb.String())
				}
				stderr := errb.String()
				want := []string{
					fmt.Sprintf("goccl run: rank %d killed by signal 9 (killed); stopping the other ranks\n", victim),
					fmt.Sprintf("goccl run: ranks 0, 1, 3 stopped because of rank %d: ", victim),
				}
				for _, w := range want {
					if !strings.Contains(stderr, w) {
						t.Errorf("run %d: stderr lacks %q:\n%s", i, w, stderr)
					}
				}
				if c := strings.Count(stderr, "; stopping the other ranks"); c != 1 {
					t.Errorf("run %d: %d verdicts, want 1:\n%s", i, c, stderr)
				}
				if code != 128+int(syscall.SIGKILL) {
					t.Errorf("run %d: exit code %d, want %d (the killed rank's)", i, code, 128+int(syscall.SIGKILL))
				}
				if t.Failed() {
					return
				}
			}
		})
	}
}

// exitOf runs a shell command and returns its Wait error.
func exitOf(t *testing.T, script string) error {
	t.Helper()
	err := exec.Command("sh", "-c", script).Run()
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("sh -c %q: %v, want an exit error", script, err)
	}
	return err
}

func TestRunVerdictText(t *testing.T) {
	code1, code3 := exitOf(t, "exit 1"), exitOf(t, "exit 3")
	kill9, term := exitOf(t, "kill -9 $$"), exitOf(t, "kill -TERM $$")
	for _, tc := range []struct {
		err  error
		want string
		code int
	}{
		{code3, "exited with code 3", 3},
		{kill9, "killed by signal 9 (killed)", 137},
		{term, "killed by signal 15 (terminated)", 143},
	} {
		if got := describeExit(tc.err); got != tc.want {
			t.Errorf("describeExit(%v) = %q, want %q", tc.err, got, tc.want)
		}
		if got := exitCode(tc.err); got != tc.code {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}

	for _, tc := range []struct {
		ranks []int
		want  string
	}{
		{[]int{3}, "3"},
		{[]int{0, 1, 3}, "0, 1, 3"},
		{[]int{0, 1, 2, 4, 5, 6, 7, 9}, "0-2, 4-7, 9"},
		{[]int{1, 2, 5, 6}, "1, 2, 5, 6"},
	} {
		if got := rankList(tc.ranks); got != tc.want {
			t.Errorf("rankList(%v) = %q, want %q", tc.ranks, got, tc.want)
		}
	}

	p := func(rank int, err error) *rankProc { return &rankProc{rank: rank, status: err} }
	if got, want := describeStopped([]*rankProc{p(3, code1), p(0, code1), p(1, code1)}, 2),
		"ranks 0, 1, 3 stopped because of rank 2: exited with code 1"; got != want {
		t.Errorf("describeStopped = %q, want %q", got, want)
	}
	if got, want := describeStopped([]*rankProc{p(3, term), p(0, code1), p(1, code1)}, 2),
		"ranks 0, 1, 3 stopped because of rank 2: 0, 1 exited with code 1; 3 killed by signal 15 (terminated)"; got != want {
		t.Errorf("describeStopped = %q, want %q", got, want)
	}
	if got, want := describeStopped([]*rankProc{p(1, term)}, 0),
		"rank 1 stopped because of rank 0: killed by signal 15 (terminated)"; got != want {
		t.Errorf("describeStopped = %q, want %q", got, want)
	}

	// A death by a signal outranks exit statuses, whatever the order.
	for _, suspects := range [][]*rankProc{
		{p(0, code1), p(2, kill9), p(1, code1)},
		{p(2, kill9), p(0, code1)},
	} {
		if got := culprit(suspects); got.rank != 2 {
			t.Errorf("culprit blames rank %d, want 2", got.rank)
		}
	}
	if got := culprit([]*rankProc{p(1, code3), p(0, code1)}); got.rank != 1 {
		t.Errorf("culprit among statuses blames rank %d, want the first, 1", got.rank)
	}
}

// dying sees a child that was killed before it is reaped and after.
func TestDying(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dying is implemented on Linux only")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if dying(pid) {
		t.Error("a running child is dying")
	}
	cmd.Process.Kill()
	for deadline := time.Now().Add(10 * time.Second); !dying(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a killed child is not dying after 10s")
		}
	}
	cmd.Wait()
	if !dying(pid) {
		t.Error("a reaped child is not dying")
	}
}

func TestRunCancelStopsAll(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	t.Setenv(childEnv, "block")
	t.Setenv("GOCCL_TEST_DIR", dir)
	const n = 3
	go func() { // cancel once every rank and grandchild is up
		for {
			if m, _ := filepath.Glob(filepath.Join(dir, "*.pid")); len(m) >= 2*n {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var out, errb testutil.Buffer
	args := append([]string{"-n", strconv.Itoa(n), "-grace", "200ms", "--"}, childArgs(t)...)
	code := runCommand(ctx, args, &out, &errb, nil)
	if code != 128+int(syscall.SIGINT) {
		t.Errorf("exit code %d after cancel, want %d", code, 128+int(syscall.SIGINT))
	}
	checkAllGone(t, dir, n)
}

func TestRunSignalStopsAll(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(childEnv, "block")
	t.Setenv("GOCCL_TEST_DIR", dir)
	t.Setenv("GOCCL_TEST_IGNORE_TERM", "1") // rank 1 needs the second signal
	const n = 2
	sigs := make(chan os.Signal, 2)
	go func() {
		for {
			if m, _ := filepath.Glob(filepath.Join(dir, "*.pid")); len(m) >= 2*n {
				sigs <- syscall.SIGTERM
				sigs <- syscall.SIGTERM
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var out, errb testutil.Buffer
	args := append([]string{"-n", strconv.Itoa(n), "-grace", "1h", "--"}, childArgs(t)...)
	code := runCommand(context.Background(), args, &out, &errb, sigs)
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit code %d after SIGTERM, want %d", code, 128+int(syscall.SIGTERM))
	}
	checkAllGone(t, dir, n)
}

func TestRunFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-n", "2"}, 2, "no program"},
		{[]string{"-n", "0", "--", "true"}, 2, "at least one rank"},
		{[]string{"-nnodes", "2", "-master-addr", "h", "--", "true"}, 2, "-master-port is required"},
		{[]string{"-nnodes", "2", "-master-port", "5", "--", "true"}, 2, "-master-addr is required"},
		{[]string{"-nnodes", "2", "-node-rank", "2", "-master-addr", "h", "-master-port", "5", "--", "true"}, 2, "-node-rank 2"},
		{[]string{"-master-port", "70000", "--", "true"}, 2, "not a port"},
		{[]string{"-bogus", "--", "true"}, 2, "bogus"},
		{[]string{"-h"}, 0, "usage: goccl run"},
		{[]string{"-n", "2", "--", "/nonexistent/program"}, 1, "rank 0"},
		{[]string{"-n", "2", "--", "false"}, 1, "exited with code 1"},
		{[]string{"-n", "2", "--", "true"}, 0, ""},
	}
	for _, c := range cases {
		var out, errb testutil.Buffer
		code := runCommand(context.Background(), c.args, &out, &errb, nil)
		if code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("goccl run %q = %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
}

func TestCopyPrefixed(t *testing.T) {
	long := strings.Repeat("y", 70<<10)
	cases := []struct{ in, want string }{
		{"", ""},
		{"a\n", "[7] a\n"},
		{"a\nb", "[7] a\n[7] b\n"},
		{"\n\n", "[7] \n[7] \n"},
		{long + "\nz\n", "[7] " + long + "\n[7] z\n"},
	}
	for _, c := range cases {
		var b bytes.Buffer
		copyPrefixed(&b, strings.NewReader(c.in), []byte("[7] "))
		if b.String() != c.want {
			t.Errorf("copyPrefixed(%.20q...) = %.40q..., want %.40q...", c.in, b.String(), c.want)
		}
	}
}

// Each rank gets its share of the machine's cores as GOMAXPROCS, unless the
// caller chose a value.
func TestRankEnvGOMAXPROCS(t *testing.T) {
	get := func(env []string) string {
		v := ""
		for _, kv := range env {
			if s, ok := strings.CutPrefix(kv, "GOMAXPROCS="); ok {
				v = s // the last one wins, as in exec
			}
		}
		return v
	}
	t.Setenv("GOMAXPROCS", "")
	ncpu := runtime.NumCPU()
	for _, tc := range []struct{ nproc, want int }{{1, ncpu}, {ncpu, 1}, {4 * ncpu, 1}} {
		cfg := &runConfig{nproc: tc.nproc, nnodes: 1, masterAddr: "127.0.0.1", masterPort: 1}
		if got := get(rankEnv(cfg, 0)); got != strconv.Itoa(tc.want) {
			t.Errorf("%d ranks on %d cores: GOMAXPROCS=%q, want %d", tc.nproc, ncpu, got, tc.want)
		}
	}
	t.Setenv("GOMAXPROCS", "7")
	cfg := &runConfig{nproc: 4 * ncpu, nnodes: 1, masterAddr: "127.0.0.1", masterPort: 1}
	if got := get(rankEnv(cfg, 0)); got != "7" {
		t.Errorf("with GOMAXPROCS=7 set: %q, want it kept", got)
	}
}

func TestRankCPUs(t *testing.T) {
	for _, tc := range []struct {
		allowed     []int
		nproc, rank int
		want        []int
	}{
		{[]int{0, 1}, 2, 0, []int{0}},
		{[]int{0, 1}, 2, 1, []int{1}},
		{[]int{0, 1}, 1, 0, nil}, // one rank: the whole machine
		{[]int{0, 1}, 4, 3, nil}, // oversubscribed: unbound
		{[]int{2, 3, 5, 7, 8}, 2, 0, []int{2, 3}},
		{[]int{2, 3, 5, 7, 8}, 2, 1, []int{5, 7, 8}},
		{[]int{0, 1, 2, 3, 4, 5}, 3, 2, []int{4, 5}},
	} {
		if got := rankCPUs(tc.allowed, tc.nproc, tc.rank); !slices.Equal(got, tc.want) {
			t.Errorf("rankCPUs(%v, %d, %d) = %v, want %v", tc.allowed, tc.nproc, tc.rank, got, tc.want)
		}
	}
}

// goccl run binds each rank to its own CPUs, and -cpu-bind=false does not.
func TestRunBindsRanks(t *testing.T) {
	all := allowedCPUs()
	if len(all) < 2 {
		t.Skipf("needs 2 CPUs, this process may use %v", all)
	}
	cpusOf := func(out string) map[string]string {
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if rank, rest, ok := strings.Cut(line, " cpus "); ok {
				got[rank] = rest
			}
		}
		return got
	}
	code, out, errOut, _ := runChildren(t, context.Background(), "cpus", []string{"-n", "2"})
	if code != 0 {
		t.Fatalf("exit code %d, stderr:\n%s", code, errOut)
	}
	got := cpusOf(out)
	for r := range 2 {
		want := fmt.Sprint(rankCPUs(all, 2, r))
		if got[fmt.Sprintf("[%d]", r)] != want {
			t.Errorf("rank %d runs on %s, want %s (output:\n%s)", r, got[fmt.Sprintf("[%d]", r)], want, out)
		}
	}
	code, out, errOut, _ = runChildren(t, context.Background(), "cpus", []string{"-n", "2", "-cpu-bind=false"})
	if code != 0 {
		t.Fatalf("exit code %d, stderr:\n%s", code, errOut)
	}
	unbound := cpusOf(out)
	if len(unbound) != 2 {
		t.Fatalf("with -cpu-bind=false: %d ranks printed their CPUs, want 2 (output:\n%s)", len(unbound), out)
	}
	for rank, cpus := range unbound {
		if cpus != fmt.Sprint(all) {
			t.Errorf("with -cpu-bind=false rank %s runs on %s, want %v", rank, cpus, all)
		}
	}
}

// Command goccl launches, measures and serves goccl jobs.
//
//	goccl bench [flags]          measure a collective, nccl-tests style
//	goccl limits                 measure copy, add and loopback limits
//	goccl run -n N -- prog args  start N local ranks of a program (like torchrun)
//	goccl sim [flags]            run the algorithms on a simulated cluster of thousands of ranks
//	goccl store -addr :29500     run a standalone rendezvous store
//	goccl trace analyze DIR      find where ranks diverged from their flight recorder dumps
//	goccl version                print the module version and VCS revision
//	goccl help CMD               print a command's usage and flags
//
// Run `goccl <command> -h` for a command's flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

const usage = `usage: goccl <command> [flags]

commands:
  bench    measure a collective across ranks (nccl-tests style table)
  limits   measure this machine's limits (copy, add, TCP loopback) to compare with
  run      start ranks of a program with the rendezvous environment set
  sim      run the algorithms on a simulated cluster (virtual clock, thousands of ranks)
  store    run a standalone rendezvous key-value store
  trace    analyze the ranks' flight recorder dumps: goccl trace analyze DIR
  version  print goccl's module version and VCS revision
  help     print a command's usage: goccl help <command>

Run 'goccl help <command>' or 'goccl <command> -h' for a command's flags.
`

const versionUsage = `usage: goccl version

Prints the goccl module's version, the VCS revision it was built from (with
its time, and "modified" if the work tree had changes), and the Go version.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "bench":
		return benchMain(ctx, args[1:], stdout, stderr)
	case "limits":
		return limitsMain(ctx, args[1:], stdout, stderr)
	case "run":
		return runMain(ctx, args[1:])
	case "sim":
		return simMain(ctx, args[1:], stdout, stderr)
	case "store":
		return storeMain(ctx, args[1:])
	case "trace":
		return traceMain(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		return versionMain(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		return helpMain(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "goccl: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// helpMain runs `goccl help [command]`: the command's usage and flags, as
// `goccl command -h` prints them, on stdout.
func helpMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "usage: goccl help <command>\n")
		return 2
	}
	h := []string{"-h"}
	switch args[0] {
	case "bench":
		return benchMain(ctx, h, stdout, stdout)
	case "limits":
		return limitsMain(ctx, h, stdout, stdout)
	case "run":
		return runCommand(ctx, h, stdout, stdout, nil)
	case "sim":
		return simMain(ctx, h, stdout, stdout)
	case "store":
		return storeCommand(ctx, h, stdout, nil)
	case "trace":
		return traceMain(h, stdout, stdout)
	case "version":
		fmt.Fprint(stdout, versionUsage)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "goccl help: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// versionMain runs `goccl version`.
func versionMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprint(stderr, versionUsage)
			return 0
		}
		fmt.Fprintf(stderr, "goccl version: unexpected arguments %q\n\n%s", args, versionUsage)
		return 2
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi))
	return 0
}

// versionLine describes the build: the main module's path and version
// ("(devel)" when go build did not know it), the VCS revision, its time
// and whether the tree was modified (unknown under go run and go test,
// which do not stamp it), and the Go version and platform.
func versionLine(bi *debug.BuildInfo) string {
	if bi == nil {
		return "goccl: no build information (built without module support)"
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	path, ver := bi.Main.Path, bi.Main.Version
	if path == "" {
		path = "github.com/goccl/goccl"
	}
	if ver == "" {
		ver = "(devel)"
	}
	rev := "revision unknown (not stamped: built by go run, go test or -buildvcs=false)"
	if r := settings["vcs.revision"]; r != "" {
		var notes []string
		if t := settings["vcs.time"]; t != "" {
			notes = append(notes, t)
		}
		if settings["vcs.modified"] == "true" {
			notes = append(notes, "modified")
		}
		rev = settings["vcs"] + " revision " + r
		if len(notes) > 0 {
			rev += " (" + strings.Join(notes, ", ") + ")"
		}
	}
	gover := bi.GoVersion
	if gover == "" {
		gover = runtime.Version()
	}
	return fmt.Sprintf("goccl %s %s, %s, %s %s/%s", path, ver, rev, gover, runtime.GOOS, runtime.GOARCH)
}

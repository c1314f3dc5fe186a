// Command goccl launches, measures and serves goccl jobs.
//
//	goccl bench [flags]          measure a collective, nccl-tests style
//	goccl limits                 measure copy, add and loopback limits
//	goccl run -n N -- prog args  start N local ranks of a program (like torchrun)
//	goccl store -addr :29500     run a standalone rendezvous store
//
// Run `goccl <command> -h` for a command's flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: goccl <command> [flags]

commands:
  bench   measure a collective across ranks (nccl-tests style table)
  limits  measure this machine's limits (copy, add, TCP loopback) to compare with
  run     start ranks of a program with the rendezvous environment set
  store   run a standalone rendezvous key-value store
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
	case "store":
		return storeMain(ctx, args[1:])
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "goccl: unknown command %q\n\n%s", args[0], usage)
	return 2
}

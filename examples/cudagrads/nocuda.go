//go:build !cuda

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "cudagrads: built without the cuda tag; build with: go build -tags cuda ./examples/cudagrads")
	os.Exit(2)
}

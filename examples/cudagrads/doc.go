// Command cudagrads is a framework's side of goccl on a GPU: the framework
// (here gorgonia.org/cu, in the device's primary context, as the CUDA
// runtime, CuPy and PyTorch work) allocates the gradients and owns the
// stream; goccl wraps both, without copying or owning them, and averages
// the gradients across ranks on the framework's stream, between the kernel
// that produced them and the one that will consume them.
//
// It needs the cuda build tag and a GPU:
//
//	go build -tags cuda -o cudagrads ./examples/cudagrads
//	go run ./cmd/goccl run -n 2 -- ./cudagrads
//
// Each rank fills its gradients with rank+1 and checks that every element
// ends as the average over the ranks, (n+1)/2. Built without the tag it
// says so and exits with status 2.
package main

// Package shm is a transport.Endpoint for ranks that are processes on one
// host: each ordered pair of ranks has a single-producer single-consumer
// ring of slots in a shared memory segment under /dev/shm.
package shm

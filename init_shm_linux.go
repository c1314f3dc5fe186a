//go:build linux

package goccl

import (
	"context"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

// hostIdentity says which ranks can share memory with this process: the
// host name, the kernel's boot id (two hosts that share a name differ in
// it), and what makes transport/shm work between two processes of one
// kernel, which two containers need not share: the /dev/shm they see,
// their pid namespace (shm watches its peers by pid) and their user (its
// segments are 0600).
func hostIdentity() (string, error) {
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("host name: %w", err)
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(shm.DefaultDir, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", shm.DefaultDir, err)
	}
	pidns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "", fmt.Errorf("pid namespace: %w", err)
	}
	return fmt.Sprintf("%s boot=%s shm=%#x %s uid=%d", name, strings.TrimSpace(string(boot)), st.Dev, pidns, os.Geteuid()), nil
}

// connectShm connects this host's ranks over transport/shm.
func connectShm(ctx context.Context, c shmConfig) (transport.Endpoint, error) {
	return shm.Connect(ctx, shm.Config{Rank: c.rank, Size: c.size, JobID: c.job, Nonce: c.nonce})
}

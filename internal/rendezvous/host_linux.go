//go:build linux

package rendezvous

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
	return shm.Connect(ctx, shm.Config{Rank: c.rank, Size: c.size, JobID: c.job, Nonce: c.nonce, Spin: c.spin, Yield: c.yield, Help: c.help, StandBack: c.standBack})
}

// shmRoom fails when the filesystem of transport/shm's segments lacks the
// room that the rings between n ranks take: a tmpfs sizes a file without
// reserving its pages, so a full one would kill a rank with SIGBUS on
// its first write rather than fail its Connect (a container's /dev/shm
// is often 64 MiB; 8 ranks' rings take 56 MiB, 16 ranks' 124 MiB).
func shmRoom(n int) error {
	need := uint64(n) * uint64(n-1) * uint64(shm.RingBytes(n))
	var st unix.Statfs_t
	if err := unix.Statfs(shm.DefaultDir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", shm.DefaultDir, err)
	}
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Errorf("%s has %d MiB free, the rings of %d ranks take %d MiB", shm.DefaultDir, free>>20, n, need>>20)
	}
	return nil
}

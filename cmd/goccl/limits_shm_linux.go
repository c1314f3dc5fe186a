//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared-memory limits: two processes map one memfd segment (fd 3 in
// both) and measure what transport/shm is built from. The measuring side
// (shmMeasure) asks, through a command word, and the answering side
// (shmAnswer) does:
//   - copy: the answerer copies n bytes from its own memory into a ring of
//     shmSlots slots of shmSlot bytes in the segment, slot by slot, while
//     the measurer copies them out into its own memory: the one-way
//     bandwidth of a message moved with two copies, the most the ring path
//     of transport/shm can reach;
//   - ping: the two write a sequence number into a cache line each and
//     spin until the other's line shows it: the round trip of one cache
//     line between the cores, the least an exchange through shared memory
//     can take;
//   - swap: each writes 8 bytes and a sequence number into a line of its
//     own, in one of two rows taken in turn, then waits for the other's
//     line of that row and adds its 8 bytes to its own: a 2-rank 8-byte
//     allreduce with nothing around it (no fingerprint, no ack, no
//     timeout, no record), the limit of the board's (board.go in the
//     root package);
//   - cma: the measurer pulls n bytes of the answerer's memory straight
//     into its own (process_vm_readv, cross-memory attach): the one-copy
//     path transport/shm takes for a message its ring cannot hold, and
//     the limit of a large allreduce between two processes;
//   - cma2: both pull n bytes of the other's memory at once, as the two
//     ranks of an allreduce do in each of its steps.
const (
	shmCmd    = 0   // command word (measurer), its sequence in the low 32 bits
	shmAck    = 64  // the answerer's echo of the command sequence
	shmHead   = 128 // slots written (answerer)
	shmTail   = 192 // slots read (measurer)
	shmPing   = 256 // measurer's ping
	shmPong   = 320 // answerer's pong
	shmArg    = 384 // the number of pings of a ping command, or of swaps
	shmBase   = 448 // the sequence number a swap command starts after
	shmSwapM  = 512 // the measurer's two swap rows, a line each
	shmSwapA  = 640 // the answerer's
	shmPeerA  = 768 // the answerer's pid, and the address of its n bytes
	shmPeerM  = 832 // the measurer's
	shmData   = 4096
	shmSlot   = 64 << 10
	shmSlots  = 16
	shmSegLen = shmData + shmSlot*shmSlots

	shmCmdCopy = 1
	shmCmdPing = 2
	shmCmdQuit = 3
	shmCmdSwap = 4
	shmCmdCMA2 = 5

	// shmStuck: a side that sees no progress from the other for this long
	// gives up (the other died).
	shmStuck = 10 * time.Second
)

// shmFigures are the shared-memory limits, in bytes/s and seconds. cma
// and cma2 are 0 where the kernel refuses cross-memory attach (ptrace
// scope, a container's seccomp profile).
type shmFigures struct{ copy, rtt, swap, cma, cma2 float64 }

func (f shmFigures) rows() []limit {
	rows := []limit{
		{"shared memory copy, 2 procs", f.copy / 1e9, "GB/s (2 copies, one way)"},
		{"shared memory cache-line round trip", f.rtt * 1e6, "us"},
		{"shared memory 8-byte exchange, 2 procs", f.swap * 1e6, "us"},
	}
	if f.cma == 0 {
		return append(rows, limit{"cross-memory attach, 2 procs", 0, "GB/s (refused here: transport/shm copies through its ring)"})
	}
	return append(rows,
		limit{"cross-memory attach, 2 procs", f.cma / 1e9, "GB/s (1 copy, one way)"},
		limit{"cross-memory attach, both ways at once, 2 procs", f.cma2 / 1e9, "GB/s each way"})
}

// publish writes this process's pid and the address of b at off, for the
// other side's pulls.
func publish(mem []byte, off int, b []byte) {
	word(mem, off).Store(uint64(os.Getpid()))
	word(mem, off+8).Store(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))))
}

// pull copies len(b) bytes of the process whose pid and address are at
// off into b, with process_vm_readv.
func pull(mem []byte, off int, b []byte) error {
	pid, addr := int(word(mem, off).Load()), uintptr(word(mem, off+8).Load())
	for len(b) > 0 {
		local := []unix.Iovec{{Base: &b[0]}}
		local[0].SetLen(len(b))
		remote := []unix.RemoteIovec{{Base: addr, Len: len(b)}}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("process_vm_readv from pid %d: %w", pid, err)
		}
		b, addr = b[n:], addr+uintptr(n)
	}
	return nil
}

func word(mem []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[off]))
}

// spinUntil polls cond, yielding now and then, and fails once it has
// waited shmStuck or ctx ends.
func spinUntil(ctx context.Context, what string, cond func() bool) error {
	var start time.Time
	for i := 1; !cond(); i++ {
		if i&1023 == 0 {
			runtime.Gosched()
			now := time.Now()
			if start.IsZero() {
				start = now
			} else if now.Sub(start) > shmStuck {
				return fmt.Errorf("shared memory: no %s for %v: the other process is gone", what, shmStuck)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// spinFast is spinUntil with a tight first loop, for the ping-pong, where
// a time check per poll would be most of what is measured.
func spinFast(ctx context.Context, what string, cond func() bool) error {
	for range 1 << 16 {
		if cond() {
			return nil
		}
	}
	return spinUntil(ctx, what, cond)
}

// newShmSegment makes the memfd the two processes share and maps it.
func newShmSegment() (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("goccl-limits", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "goccl-limits")
	if err := f.Truncate(shmSegLen); err != nil {
		f.Close()
		return nil, nil, err
	}
	mem, err := mapShm(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, mem, nil
}

func mapShm(f *os.File) ([]byte, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, shmSegLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return mem, nil
}

// shmProcesses measures between two child processes of this binary, each
// bound to a CPU of its own, sharing a memfd segment.
func shmProcesses(ctx context.Context, n, runs int) (shmFigures, error) {
	exe, err := os.Executable()
	if err != nil {
		return shmFigures{}, err
	}
	seg, mem, err := newShmSegment()
	if err != nil {
		return shmFigures{}, err
	}
	defer seg.Close()
	unix.Munmap(mem) // the children map it
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	size, cpus := strconv.Itoa(n), allowedCPUs()
	answer := exec.CommandContext(ctx, exe, "limits", "-shm-serve", "-size", size)
	answer.ExtraFiles = []*os.File{seg}
	answer.Stdout, answer.Stderr = os.Stderr, os.Stderr
	if err := startBound(answer, rankCPUs(cpus, 2, 0)); err != nil {
		return shmFigures{}, err
	}
	defer func() {
		cancel() // an answerer still waiting (the measurer failed) is killed
		answer.Wait()
	}()
	measure := exec.CommandContext(ctx, exe, "limits", "-shm-measure", "-size", size, "-runs", strconv.Itoa(runs))
	measure.ExtraFiles = []*os.File{seg}
	var res strings.Builder
	measure.Stdout, measure.Stderr = &res, os.Stderr
	if err := startBound(measure, rankCPUs(cpus, 2, 1)); err != nil {
		return shmFigures{}, err
	}
	if err := measure.Wait(); err != nil {
		return shmFigures{}, fmt.Errorf("shared memory measurer: %w", err)
	}
	var f shmFigures
	if _, err := fmt.Sscan(res.String(), &f.copy, &f.rtt, &f.swap, &f.cma, &f.cma2); err != nil {
		return shmFigures{}, fmt.Errorf("shared memory measurer said %q: %w", res.String(), err)
	}
	return f, nil
}

// shmChild is a child's side: it maps the segment it inherited as fd 3
// and answers or measures.
func shmChild(ctx context.Context, measure bool, n, runs int, stdout io.Writer) error {
	f := os.NewFile(3, "goccl-limits")
	if f == nil {
		return errors.New("shared memory: no segment at fd 3")
	}
	defer f.Close()
	mem, err := mapShm(f)
	if err != nil {
		return err
	}
	defer unix.Munmap(mem)
	if !measure {
		return shmAnswer(ctx, mem, n)
	}
	fig, err := shmMeasure(ctx, mem, n, runs, shmPings)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, fig.copy, fig.rtt, fig.swap, fig.cma, fig.cma2)
	return err
}

// shmPings is the number of round trips one ping run times.
const shmPings = 20000

// shmMeasure drives the tests from the measuring side.
func shmMeasure(ctx context.Context, mem []byte, n, runs, pings int) (f shmFigures, err error) {
	cmd, ack := word(mem, shmCmd), word(mem, shmAck)
	head, tail := word(mem, shmHead), word(mem, shmTail)
	ping, pong := word(mem, shmPing), word(mem, shmPong)
	dst := make([]byte, n)
	var seq uint64
	ask := func(c uint64) error {
		seq++
		cmd.Store(c<<32 | seq)
		return spinUntil(ctx, "answer", func() bool { return ack.Load() == seq })
	}
	copyRun := func() error {
		if err := ask(shmCmdCopy); err != nil {
			return err
		}
		t := tail.Load()
		for off := 0; off < n; off += shmSlot {
			if err := spinUntil(ctx, "slot", func() bool { return head.Load() > t }); err != nil {
				return err
			}
			s := shmData + int(t%shmSlots)*shmSlot
			copy(dst[off:min(n, off+shmSlot)], mem[s:s+shmSlot])
			t++
			tail.Store(t)
		}
		return nil
	}
	if err := copyRun(); err != nil { // warm-up: fault the pages in
		return f, err
	}
	for i, b := range dst { // the answerer sends byte(i) at i
		if b != byte(i) {
			return f, fmt.Errorf("shared memory copy: byte %d is %d, want %d", i, b, byte(i))
		}
	}
	if f.copy, err = rate(runs, n, copyRun); err != nil {
		return f, err
	}
	var rtts []float64
	for range runs {
		word(mem, shmArg).Store(uint64(pings))
		if err := ask(shmCmdPing); err != nil {
			return f, err
		}
		p := ping.Load()
		t := time.Now()
		for range pings {
			p++
			ping.Store(p)
			if err := spinFast(ctx, "pong", func() bool { return pong.Load() == p }); err != nil {
				return f, err
			}
		}
		rtts = append(rtts, time.Since(t).Seconds()/float64(pings))
	}
	f.rtt = median(rtts)
	var swaps []float64
	var base uint64
	for range runs {
		word(mem, shmArg).Store(uint64(pings))
		word(mem, shmBase).Store(base)
		if err := ask(shmCmdSwap); err != nil {
			return f, err
		}
		t := time.Now()
		sum, err := swap(ctx, mem, shmSwapM, shmSwapA, base, pings)
		if err != nil {
			return f, err
		}
		swaps = append(swaps, time.Since(t).Seconds()/float64(pings))
		// Each side adds 1 (the measurer) and 2 (the answerer) a swap.
		if want := uint64(3 * pings); sum != want {
			return f, fmt.Errorf("shared memory exchange: sum %d, want %d", sum, want)
		}
		base += uint64(pings)
	}
	f.swap = median(swaps)
	if f.cma, f.cma2, err = cmaRates(ctx, mem, dst, runs, ask); err != nil {
		return f, err
	}
	seq++
	cmd.Store(shmCmdQuit<<32 | seq)
	return f, nil
}

// cmaRates measures the cma and cma2 figures from the measuring side,
// pulling into dst; both are 0 where the kernel refuses the first pull.
func cmaRates(ctx context.Context, mem, dst []byte, runs int, ask func(uint64) error) (cma, cma2 float64, err error) {
	clear(dst)
	if err := pull(mem, shmPeerA, dst); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS) {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	for i, b := range dst { // the answerer's bytes are byte(i) at i
		if b != byte(i) {
			return 0, 0, fmt.Errorf("cross-memory attach: byte %d is %d, want %d", i, b, byte(i))
		}
	}
	n := len(dst)
	if cma, err = rate(runs, n, func() error { return pull(mem, shmPeerA, dst) }); err != nil {
		return 0, 0, err
	}
	mine := make([]byte, n) // what the answerer pulls, its pages faulted in
	for i := range mine {
		mine[i] = byte(i)
	}
	publish(mem, shmPeerM, mine)
	word(mem, shmArg).Store(uint64(runs))
	if err := ask(shmCmdCMA2); err != nil { // the answerer pulls runs times from now
		return 0, 0, err
	}
	if cma2, err = rate(runs, n, func() error { return pull(mem, shmPeerA, dst) }); err != nil {
		return 0, 0, err
	}
	// mine stays until the answerer's last pull is over.
	err = spinUntil(ctx, "end of the other side's pulls", func() bool { return word(mem, shmArg).Load() == 0 })
	runtime.KeepAlive(mine)
	return cma, cma2, err
}

// shmAnswer answers shmMeasure's commands until it says quit.
func shmAnswer(ctx context.Context, mem []byte, n int) error {
	cmd, ack := word(mem, shmCmd), word(mem, shmAck)
	head, tail := word(mem, shmHead), word(mem, shmTail)
	ping, pong := word(mem, shmPing), word(mem, shmPong)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	publish(mem, shmPeerA, src)
	defer runtime.KeepAlive(src) // the measurer reads it through its address
	var last uint64
	for {
		// Idle between commands: sleep a little once the spin gives up.
		var c uint64
		for {
			c = cmd.Load()
			if c != last {
				break
			}
			if err := spinUntil(ctx, "command", func() bool { return cmd.Load() != last }); err != nil {
				if ctx.Err() != nil {
					return err
				}
				time.Sleep(time.Millisecond)
			}
		}
		last = c
		op := c >> 32
		switch op {
		case shmCmdQuit:
			ack.Store(c & 0xffffffff)
			return nil
		case shmCmdCopy:
			ack.Store(c & 0xffffffff)
			h := head.Load()
			for off := 0; off < n; off += shmSlot {
				if err := spinUntil(ctx, "free slot", func() bool { return h-tail.Load() < shmSlots }); err != nil {
					return err
				}
				s := shmData + int(h%shmSlots)*shmSlot
				copy(mem[s:s+shmSlot], src[off:min(n, off+shmSlot)])
				h++
				head.Store(h)
			}
		case shmCmdPing:
			count := word(mem, shmArg).Load()
			p := pong.Load()
			ack.Store(c & 0xffffffff)
			for range count {
				p++
				if err := spinFast(ctx, "ping", func() bool { return ping.Load() == p }); err != nil {
					return err
				}
				pong.Store(p)
			}
		case shmCmdSwap:
			count, base := word(mem, shmArg).Load(), word(mem, shmBase).Load()
			ack.Store(c & 0xffffffff)
			if _, err := swap(ctx, mem, shmSwapA, shmSwapM, base, int(count)); err != nil {
				return err
			}
		case shmCmdCMA2:
			count := word(mem, shmArg).Load()
			dst := make([]byte, n)
			for i := range dst { // its pages faulted in before the pulls are timed
				dst[i] = 1
			}
			ack.Store(c & 0xffffffff)
			for range count {
				if err := pull(mem, shmPeerM, dst); err != nil {
					return err
				}
			}
			word(mem, shmArg).Store(0) // done: the measurer may drop its buffer
		default:
			return fmt.Errorf("shared memory: unknown command %d", op)
		}
	}
}

// swap is one side of count exchanges: exchange base+j writes this
// side's value (1 for the measurer's rows, 2 for the answerer's) and the
// number into its line of row j mod 2 at mine, waits for the other's line
// of that row at theirs to show the number, and adds the other's value
// to its own. Two rows suffice without acks: a side writes a row again
// only after the other has written the row between, which it did after
// reading this one. It returns the sum of both sides' values.
func swap(ctx context.Context, mem []byte, mine, theirs int, base uint64, count int) (uint64, error) {
	val := uint64(1)
	if mine == shmSwapA {
		val = 2
	}
	var sum uint64
	for j := 1; j <= count; j++ {
		v := base + uint64(j)
		row := int(v&1) * 64
		word(mem, mine+row+8).Store(val)
		word(mem, mine+row).Store(v)
		seq := word(mem, theirs+row)
		if err := spinFast(ctx, "exchange", func() bool { return seq.Load() == v }); err != nil {
			return 0, err
		}
		sum += val + word(mem, theirs+row+8).Load()
	}
	return sum, nil
}
